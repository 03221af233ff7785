package extproc

// Video tasks at the edge (spec 4.3): POST /v1/videos creates a task, GET /v1/videos/{id}
// reads it. Both are answered by ext_proc itself: creation and queries reach the provider
// through Envoy's internal listener (extproc/tasks), never through the client's connection,
// because the provider's task outlives the request.

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const videosPath = "/v1/videos"

// Provider calls made while a client waits must end inside Envoy's ext_proc message timeout
// (5 s), or Envoy fails the request closed: a create gets 4 s over all its attempts; a refresh
// on GET gets 3 s, after which the stored state is answered (the poller keeps refreshing).
const (
	createTimeout  = 4 * time.Second
	refreshTimeout = 3 * time.Second
)

// Tasks is what the server needs to serve media tasks.
type Tasks struct {
	Service *tasks.Service
	// CallbackAllow lists the private addresses callbacks may reach (callbacks.allow_private).
	CallbackAllow *tasks.AllowList
	holds         sync.Map // task id -> *billing.Reservation, until the task is billed
}

// SetTasks turns the video endpoints on; the service's Price and Bill are the server's, and
// it charges accounts when billing is on.
func (s *Server) SetTasks(t *Tasks) {
	t.Service.Price = s.taskPrice
	t.Service.Bill = s.billTask
	t.Service.Charge = s.billing != nil
	s.tasks = t
}

// videoHeaders admits a request to the video endpoints; it returns nil to go on to the body.
func (x *exchange) videoHeaders(method, path, auth, contentType string) *extprocv3.ProcessingResponse {
	if x.s.tasks == nil {
		return x.fail(apiErr(http.StatusNotFound, "not_found", "video tasks are not enabled on this gateway"))
	}
	if e := x.authenticate(auth); e != nil {
		return x.fail(e)
	}
	if path == videosPath {
		if method != http.MethodPost {
			return x.fail(apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; use POST to create a video task", clip(method), videosPath))
		}
		if mt, _, err := mime.ParseMediaType(contentType); contentType != "" && (err != nil || (mt != "application/json" && mt != "multipart/form-data")) {
			return x.fail(apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type",
				"content-type %s is not supported: send JSON (application/json) or a form (multipart/form-data)", clip(contentType)))
		}
		x.video, x.contentType = true, contentType
		return nil
	}
	id := strings.TrimPrefix(path, videosPath+"/")
	if method != http.MethodGet || id == "" || strings.Contains(id, "/") {
		return x.fail(apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; use GET %s/{id}", clip(method), clip(path), videosPath))
	}
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	t, err := x.s.tasks.Service.Get(ctx, x.key.Account, id)
	if err != nil {
		return x.fail(taskAPIError(err))
	}
	body, _ := json.Marshal(tasks.ObjectOf(t, time.Now()))
	return x.reply(http.StatusOK, body)
}

// videoBody creates a task from the request body and answers with its object.
func (x *exchange) videoBody(raw []byte) *extprocv3.ProcessingResponse {
	rt := x.rt
	if mt, _, _ := mime.ParseMediaType(x.contentType); mt == "multipart/form-data" {
		var err error
		if raw, err = formBody(x.contentType, raw); err != nil {
			return x.fail(apiErr(http.StatusBadRequest, "invalid_request", "%v", err))
		}
	}
	req, err := provider.ParseRequest(raw)
	if err != nil {
		return x.fail(apiErr(http.StatusBadRequest, "invalid_json", "the body must be one JSON object: %v", err))
	}
	var modelID string
	if json.Unmarshal(req["model"], &modelID) != nil || modelID == "" {
		return x.fail(apiErr(http.StatusBadRequest, "missing_model", "model is required: a video model id from GET /v1/models"))
	}
	m := rt.models[modelID]
	if m == nil || m.Family == "" || !strings.HasPrefix(m.Family, "V") {
		return x.fail(apiErr(http.StatusBadRequest, "model_not_found", "model %q is not a video model of the catalog; GET /v1/models lists them (output_modalities video)", clip(modelID)))
	}
	if !x.key.allows(m.ID) {
		return x.fail(apiErr(http.StatusForbidden, "model_not_allowed", "this API key may not use model %q", m.ID))
	}
	var pin string
	if r := req["route"]; r != nil {
		var route struct {
			Provider string `json:"provider"`
		}
		if json.Unmarshal(r, &route) != nil {
			return x.fail(apiErr(http.StatusBadRequest, "invalid_request", `route must be an object like {"provider": "name"}`))
		}
		pin = route.Provider
	}
	var attempts []tasks.Attempt
	var adapter provider.TaskAdapter
	for _, t := range m.Targets {
		p := rt.providers[t.Provider]
		if p == nil || (pin != "" && pin != p.Name) || !p.Ready() || x.s.refusals.has(p.Name) {
			continue
		}
		if adapter == nil {
			adapter, _ = provider.TaskFor(p.Type)
		}
		attempts = append(attempts, tasks.Attempt{Provider: p, Model: t.Model})
	}
	if len(attempts) == 0 || adapter == nil {
		if pin != "" {
			return x.fail(apiErr(http.StatusBadRequest, "provider_not_available", "provider %q does not serve model %q or cannot take traffic; remove route.provider or choose another", clip(pin), m.ID))
		}
		return x.fail(rt.unavailable(m))
	}
	tr, err := adapter.Validate(&m.Model, req)
	if err != nil {
		return x.fail(apiErr(http.StatusBadRequest, "invalid_request", "%s", strings.TrimPrefix(err.Error(), provider.ErrBadRequest.Error()+": ")))
	}
	if tr.CallbackURL != "" {
		if err := tasks.CheckCallbackURL(context.Background(), tr.CallbackURL, x.s.tasks.CallbackAllow.Prefixes(), nil); err != nil {
			return x.fail(apiErr(http.StatusBadRequest, "invalid_callback_url", "%v", err))
		}
	}
	price := m.Pricing.TierFor(0).Price
	worst := price.Request.Add(price.Duration.Mul(decimal.NewFromInt(tr.MaxSeconds)))
	var hold *billing.Reservation
	if b := x.s.billing; b != nil {
		h, err := b.Ledger.Reserve(x.key.Account, x.key.ID, x.key.MonthlyLimit, worst, b.Now())
		if e := x.holdRefused(err, worst, "ask for a shorter duration"); e != nil {
			return x.fail(e)
		}
		hold = h
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	t, err := x.s.tasks.Service.Create(ctx, tasks.NewTask{
		Kind: "video", Account: x.key.Account, KeyID: x.key.ID, RequestID: x.requestID,
		Model: &m.Model, Attempts: attempts, Body: req, Request: tr, Hold: worst,
	})
	if err != nil {
		if hold != nil {
			x.s.billing.Ledger.Release(hold)
		}
		return x.fail(taskAPIError(err))
	}
	if hold != nil {
		x.s.tasks.holds.Store(t.ID, hold)
	}
	body, _ := json.Marshal(tasks.ObjectOf(t, time.Now()))
	return x.reply(http.StatusOK, body)
}

// taskAPIError maps the task service's failures to the spec's errors, at the boundary.
func taskAPIError(err error) *APIError {
	var te *tasks.Error
	if !errors.As(err, &te) {
		return apiErr(http.StatusInternalServerError, "internal_error", "the task failed inside the gateway; retry")
	}
	status := map[tasks.Kind]int{tasks.KindBadRequest: 400, tasks.KindNotFound: 404, tasks.KindUnavailable: 503, tasks.KindInternal: 500}[te.Kind]
	return apiErr(status, te.Code, "%s", te.Message)
}

// taskPrice is what a completed task costs: the request price plus the duration price for
// every second produced, at the model's first tier (tiers count prompt tokens).
func (s *Server) taskPrice(t *store.Task) decimal.Decimal {
	m := s.runtime.Load().models[t.Model]
	if m == nil {
		return decimal.Zero
	}
	price := m.Pricing.TierFor(0).Price
	return price.Request.Add(price.Duration.Mul(tasks.Seconds(t)))
}

// billTask settles the ledger's hold of a task that ended, once: a completed one at t.Cost
// (whose usage record the store settled with the completion), a failed one released.
func (s *Server) billTask(t *store.Task) {
	b := s.billing
	if b == nil {
		return
	}
	var hold *billing.Reservation
	if v, ok := s.tasks.holds.LoadAndDelete(t.ID); ok {
		hold = v.(*billing.Reservation)
	} else if hold, _ = b.Ledger.Reserve(t.Account, t.KeyID, nil, decimal.Zero, b.Now()); hold == nil {
		s.log.Error("TASK NOT BILLED: its account is gone", "task", t.ID, "account", t.Account)
		return
	}
	if t.Status != string(provider.TaskCompleted) {
		b.Ledger.Release(hold)
		return
	}
	b.Ledger.Settle(hold, t.Cost)
}

// formStrings are the task fields that stay strings when a form sends them (a prompt of
// "42", a resolution of "1080"); other values read as numbers and booleans where they look so.
var formStrings = map[string]bool{
	"model": true, "prompt": true, "negative_prompt": true, "first_frame_image": true, "image": true,
	"resolution": true, "ratio": true, "mode": true, "aspect_ratio": true, "callback_url": true,
	"route_mode": true, "route.provider": true, "input.prompt": true, "input.img_url": true,
	"input.media.type": true, "input.media.url": true, "parameters.resolution": true, "parameters.ratio": true,
}

// formBody reads a multipart create request (as the OpenAI SDKs send videos.create) into JSON.
func formBody(contentType string, raw []byte) ([]byte, error) {
	return tasks.FormToJSON(contentType, raw, ir.MaxBodyBytes, func(path string) bool { return formStrings[path] })
}

// TaskCatalog is the configuration tasks run under now.
func (s *Server) TaskCatalog() tasks.Catalog { return s.runtime.Load() }

// RestoreTaskHolds holds again, after a start, what running tasks held before: their credits
// stay reserved until they are billed. A hold the balance no longer covers is kept at zero (the
// task is still billed when it completes).
func (s *Server) RestoreTaskHolds(st *store.Store) (int, error) {
	b := s.billing
	if b == nil || s.tasks == nil {
		return 0, nil
	}
	n, after := 0, ""
	for {
		open, err := st.OpenTasks(500, after)
		if err != nil {
			return n, err
		}
		for _, t := range open {
			after = t.ID
			h, err := b.Ledger.Reserve(t.Account, t.KeyID, nil, t.Hold, b.Now())
			if err != nil {
				h, _ = b.Ledger.Reserve(t.Account, t.KeyID, nil, decimal.Zero, b.Now())
			}
			if h != nil {
				s.tasks.holds.Store(t.ID, h)
				n++
			}
		}
		if len(open) < 500 {
			return n, nil
		}
	}
}
