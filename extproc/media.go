package extproc

// Media tasks at the edge (docs/media.md): POST /v1/videos and POST /v1/images create a task,
// GET /v1/{videos,images}/{id} reads it. Both are answered by ext_proc itself: creation and
// queries reach the provider through Envoy's internal listener (extproc/tasks), never through
// the client's connection, because the provider's task outlives the request.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Provider calls made while a client waits must end inside Envoy's ext_proc message timeout
// (5 s), or Envoy fails the request closed. A create extends that timeout once, by
// override_message_timeout (Envoy allows up to ir.MaxExtProcMessageTimeout), to createTimeout
// over all its attempts: providers that answer at once with the finished image (Gemini) take
// tens of seconds. A refresh on GET gets refreshTimeout, after which the stored state is
// answered (the poller keeps refreshing).
const (
	createTimeout  = 150 * time.Second
	refreshTimeout = 3 * time.Second
)

// Tasks is what the server needs to serve media tasks.
type Tasks struct {
	Service *tasks.Service
	// Callbacks decides where a callback_url may point (callbacks.allow_private, the gateway's
	// own listeners).
	Callbacks *tasks.Guard
	holds     sync.Map // task id -> *billing.Reservation, until the task is billed
}

// SetTasks turns the media endpoints on; the service's Price and Bill are the server's, it
// reports the providers' refusals of the gateway's credential, and it charges accounts when
// billing is on.
func (s *Server) SetTasks(t *Tasks) {
	t.Service.Price = s.taskPrice
	t.Service.Bill = s.billTask
	// Task calls bypass the response path the chat's refusals are read on: the service says.
	t.Service.Refused, t.Service.Answered = s.providerRefused, s.providerAnswered
	t.Service.Charge = s.sh.Books != nil
	s.tasks = t
}

// SetTasksOff says why the media task endpoints are off (their answer's message).
func (s *Server) SetTasksOff(reason string) { s.tasksOff.Store(&reason) }

// mediaProcessor is the processor of the media endpoints: a task created from the body (POST
// /v1/videos, /v1/images) or read (GET .../{id}), answered by ext_proc itself.
type mediaProcessor struct {
	answeredEarly
	x    *exchange
	kind string
}

func (m mediaProcessor) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x, hd := m.x, &m.x.Head
	if resp := x.mediaHeaders(m.kind, hd.Method, hd.Path, hd.Auth, hd.ContentType); resp != nil {
		return resp, nil
	}
	return x.ReadBody(h), nil
}

func (m mediaProcessor) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return m.x.mediaBody(b.GetBody()), nil
}

// mediaHeaders admits a request to the media endpoints; it returns nil to go on to the body.
func (x *exchange) mediaHeaders(kind, method, path, auth, contentType string) *extprocv3.ProcessingResponse {
	base := core.MediaPaths[kind]
	if x.s.tasks == nil {
		why := "they are not enabled"
		if r := x.s.tasksOff.Load(); r != nil {
			why = *r
		}
		return x.Fail(core.Errorf(http.StatusServiceUnavailable, "media_unavailable", "%s tasks are not available on this gateway: %s", kind, why))
	}
	if x.Key == nil { // a paid endpoint (payment.go) has settled who the caller is
		if e := x.Authenticate(auth); e != nil {
			return x.Fail(e)
		}
	}
	if path == base {
		if method != http.MethodPost {
			return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; create a%s %s task with POST %s (GET %s/{id} reads one)", core.Clip(method), base, core.Article(kind), kind, base, base))
		}
		if mt, _, err := mime.ParseMediaType(contentType); contentType != "" && (err != nil || (mt != "application/json" && mt != "multipart/form-data")) {
			return x.Fail(core.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
				"content-type %s is not supported: send JSON (application/json) or a form (multipart/form-data)", core.Clip(contentType)))
		}
		x.media = kind
		return nil
	}
	id := strings.TrimPrefix(path, base+"/")
	if method == http.MethodPost {
		// A create sent to a sub-path (the OpenAI SDK's images.generate posts to /images/generations).
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "POST %s is not supported; create a%s %s task with POST %s", core.Clip(path), core.Article(kind), kind, base))
	}
	if method != http.MethodGet || id == "" || strings.Contains(id, "/") {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; read a%s %s task with GET %s/{id} (POST %s creates one)", core.Clip(method), core.Clip(path), core.Article(kind), kind, base, base))
	}
	ctx, cancel := context.WithTimeout(x.Context(), refreshTimeout)
	defer cancel()
	t, err := x.s.tasks.Service.Get(ctx, x.Key.Account, id)
	if err == nil && t.Kind != kind {
		err = &tasks.Error{Kind: tasks.KindNotFound, Code: "not_found", Message: "no " + kind + " task " + core.Clip(id) + "; it is a " + t.Kind + " task: GET " + core.MediaPaths[t.Kind] + "/" + core.Clip(id)}
	}
	if err != nil {
		return x.Fail(taskAPIError(err))
	}
	x.TaskModel, x.Provider = t.Model, t.Provider
	body, _ := json.Marshal(tasks.ObjectOf(t, time.Now()))
	return x.Reply(http.StatusOK, body)
}

// mediaBody creates a task from the request body and answers with its object.
func (x *exchange) mediaBody(raw []byte) *extprocv3.ProcessingResponse {
	rt, kind := x.RT, x.media
	// Envoy would fail the request closed after its message timeout: reading a large body, its
	// checks and the create (a synchronous provider takes tens of seconds) may take longer.
	if err := x.Envoy.ExtendTimeout(createTimeout + 10*time.Second); err != nil {
		return x.Fail(core.ErrLostEnvoy)
	}
	if mt, _, _ := mime.ParseMediaType(x.Head.ContentType); mt == "multipart/form-data" {
		form := raw
		var err error
		if raw, err = formBody(x.Head.ContentType, form, nil); err != nil {
			return x.Fail(core.Malformed(core.Errorf(http.StatusBadRequest, "invalid_request", "%v", err)))
		}
		// The model's family may keep more fields as strings: read the form again with them.
		if more := familyStrings(rt, raw); len(more) > 0 {
			if raw, err = formBody(x.Head.ContentType, form, more); err != nil {
				return x.Fail(core.Malformed(core.Errorf(http.StatusBadRequest, "invalid_request", "%v", err)))
			}
		}
	}
	req, err := provider.ParseRequest(raw)
	if err != nil {
		problem := "it is not an object"
		if syntax := errors.Unwrap(err); syntax != nil {
			problem = core.JSONSyntax(syntax)
		}
		return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_json", `the body must be one JSON object (%s); send {"model": ..., ...} encoded in UTF-8`, problem))
	}
	var modelID, mode string
	if json.Unmarshal(req["model"], &modelID) != nil || modelID == "" {
		return x.Fail(core.Errorf(http.StatusBadRequest, "missing_model", "model is required: a%s %s model id from GET /v1/models, or a route id route:<name>", core.Article(kind), kind))
	}
	if v := req["route_mode"]; v != nil && (json.Unmarshal(v, &mode) != nil || !ir.ValidMode(mode)) {
		return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_route_mode", "route_mode must be one of %s (balanced when omitted)", strings.Join(ir.Modes, ", ")))
	}
	var pin string
	if r := req["route"]; r != nil {
		var route struct {
			Provider string `json:"provider"`
		}
		if json.Unmarshal(r, &route) != nil {
			return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_request", `route must be an object like {"provider": "name"}`))
		}
		pin = route.Provider
	}
	models, route, e := mediaModels(rt, kind, modelID, mode)
	if e != nil {
		return x.Fail(e)
	}
	if route != nil {
		pin = "" // the route chooses providers itself (docs/api.md#routes)
	}
	if !x.Key.AllowsModels(route, models) {
		if x.endpointRefuses(route, models) {
			return x.Fail(x.endpointModels(fmt.Sprintf("model %q", core.Clip(modelID))))
		}
		return x.Fail(core.Errorf(http.StatusForbidden, "model_not_allowed", "this API key may not use %s", core.Clip(modelID)))
	}
	// The candidates, in order: each model the body is valid for, with its providers that can
	// take traffic. A route's later model of another family checks the body its own way; one
	// that refuses it is passed over, and the first refusal is the answer when none takes it.
	var (
		attempts []tasks.Attempt
		refusal  error
		worst    decimal.Decimal
		first    *core.Model // the model of the first attempt: the task's, until a fallback moves on
		tr       task.Validated
	)
	now := time.Now()
	for _, m := range models {
		adapter, err := task.For(m.Family)
		if err != nil {
			continue
		}
		var ready []tasks.Attempt
		for _, t := range m.Targets {
			p := rt.Providers[t.Provider]
			// A provider refusing the gateway's credential is tried again now and then (refusals.go).
			if p == nil || (pin != "" && pin != p.Name) || !p.Ready() || !x.s.refusals.mayTry(p.Name, now) {
				continue
			}
			ready = append(ready, tasks.Attempt{Provider: p, Model: t.Model, Spec: &m.Model})
		}
		if len(ready) == 0 {
			continue
		}
		mtr, err := adapter.Validate(&m.Model, req)
		if err != nil {
			refusal = cmp.Or(refusal, err)
			continue
		}
		for i := range ready {
			ready[i].Request = &mtr
		}
		if first == nil {
			first, tr = m, mtr
		}
		worst = decimal.Max(worst, m.Pricing.TaskWorstCase(mtr.PromptTokens, mtr.MaxOutputTokens, mtr.MaxImages, mtr.MaxSeconds))
		attempts = append(attempts, ready...)
	}
	switch {
	case len(attempts) > 0:
	case refusal != nil:
		return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_request", "%s", strings.TrimPrefix(refusal.Error(), provider.ErrBadRequest.Error()+": ")))
	case pin != "" && x.s.refusals.has(pin):
		return x.Fail(core.Errorf(http.StatusServiceUnavailable, "provider_not_available", "%s; remove route.provider or choose another", x.s.refusals.reason(pin)))
	case pin != "":
		return x.Fail(core.Errorf(http.StatusBadRequest, "provider_not_available", "provider %q does not serve model %q or cannot take traffic; remove route.provider or choose another", core.Clip(pin), models[0].ID))
	case route != nil:
		return x.Fail(core.Errorf(http.StatusServiceUnavailable, "route_unavailable", "no model of route %s has a provider that can take traffic; check their providers' credentials", route.ID))
	default:
		return x.Fail(rt.Unavailable(models[0], x.s.refusals.reason))
	}
	m := first
	if tr.CallbackURL != "" {
		if err := x.s.tasks.Callbacks.CheckURL(x.Context(), tr.CallbackURL); err != nil {
			return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_callback_url", "%v", err))
		}
	}
	// A task the store cannot record must not be created: the provider would run (and bill)
	// a task nobody can see.
	if e := x.StoreRefusal(); e != nil {
		return x.Fail(e)
	}
	var hold *billing.Reservation
	if x.pay != nil {
		// Paid through x402: the payment covers it, never the account's credits.
		if e := x.payAdmit(worst); e != nil {
			return x.Fail(e)
		}
	} else if b := x.Books; b != nil {
		fix := "ask for a shorter duration"
		if kind == ir.KindImage {
			fix = "ask for fewer images"
		}
		h, err := b.Ledger.Reserve(x.Key.Account, x.Key.ID, x.Key.MonthlyLimit, worst, b.Now())
		if e := core.HoldRefused(err, x.Key, worst, fix); e != nil {
			return x.Fail(e)
		}
		hold = h
	}
	// The client going away stops the create before its next provider; one already sent runs
	// to its answer (tasks.Service.Create).
	ctx, cancel := context.WithTimeout(x.Context(), createTimeout)
	defer cancel()
	t, err := x.s.tasks.Service.Create(ctx, tasks.NewTask{
		Kind: kind, Account: x.Key.Account, KeyID: x.Key.ID, RequestID: x.RequestID, Route: routeID(route),
		Model: &m.Model, Attempts: attempts, Body: req, Request: tr, Hold: worst, Paid: x.pay != nil,
	})
	if err != nil {
		if hold != nil {
			x.Books.Ledger.Release(hold)
		}
		return x.Fail(taskAPIError(err))
	}
	x.TaskModel, x.Provider = t.Model, t.Provider // for the access log
	if hold != nil {
		x.s.tasks.holds.Store(t.ID, hold)
		if t.Terminal() { // the provider answered with the finished task
			x.s.billTask(t)
		}
	}
	body, _ := json.Marshal(tasks.ObjectOf(t, time.Now()))
	var resp *extprocv3.ProcessingResponse
	if x.pay != nil {
		resp = x.payTask(t, worst, body)
	} else {
		resp = x.Reply(http.StatusOK, body)
	}
	if answer := resp.GetImmediateResponse(); answer.GetStatus().GetCode() == http.StatusOK {
		if removed := removedOf(attempts, t); len(removed) > 0 {
			core.AddHeaders(answer.Headers, map[string]string{"x-tollway-removed-params": strings.Join(removed, ",")})
		}
	}
	return resp
}

// removedOf is what the create of task t left out of the client's body: the Removed of the
// attempt whose model took it.
func removedOf(attempts []tasks.Attempt, t *store.Task) []string {
	for _, a := range attempts {
		if a.Spec.ID == t.Model && a.Request != nil {
			return a.Request.Removed
		}
	}
	return nil
}

// mediaModels resolves a create's model field to the catalog models of this kind it may run, in
// order: the model itself, or a route's models (a priority route's list, or the one route_mode
// maps to), with the route.
func mediaModels(rt *core.Runtime, kind, id, mode string) ([]*core.Model, *ir.Route, *core.APIError) {
	if strings.HasPrefix(id, ir.RoutePrefix) {
		r, ids, e := rt.RouteModels(id, mode)
		if e != nil {
			return nil, nil, e
		}
		var out []*core.Model
		for _, mid := range ids {
			out = append(out, rt.Models[mid])
		}
		// A route's models answer one endpoint (ir.Gateway.Validate): the first one says which.
		if other := out[0].Kind(); other != kind {
			return nil, nil, core.Errorf(http.StatusBadRequest, "model_not_found", "route %s serves %s models, not %s models: POST %s", r.ID, other, kind, core.EndpointOf(other))
		}
		return out, r, nil
	}
	m := rt.Models[id]
	if m == nil || m.Kind() != kind {
		hint := ""
		if m != nil {
			hint = fmt.Sprintf("; it is a%s %s model: POST %s", core.Article(m.Kind()), m.Kind(), core.EndpointOf(m.Kind()))
		}
		return nil, nil, core.Errorf(http.StatusBadRequest, "model_not_found", "model %q is not a%s %s model of the catalog%s; GET /v1/models lists them (output_modalities %s)", core.Clip(id), core.Article(kind), kind, hint, kind)
	}
	return []*core.Model{m}, nil, nil
}

// routeID is a task's route: its id, or "" for a model named directly.
func routeID(r *ir.Route) string {
	if r == nil {
		return ""
	}
	return r.ID
}

// taskAPIError maps the task service's failures to the spec's errors, at the boundary.
func taskAPIError(err error) *core.APIError {
	var te *tasks.Error
	if !errors.As(err, &te) {
		return core.Errorf(http.StatusInternalServerError, "internal_error", "the task failed inside the gateway; retry")
	}
	status := map[tasks.Kind]int{tasks.KindBadRequest: 400, tasks.KindNotFound: 404, tasks.KindUnavailable: 503, tasks.KindInternal: 500}[te.Kind]
	return core.Errorf(status, te.Code, "%s", te.Message)
}

// taskPrice is what a finished task costs. Completed: the request price, the duration price
// for every second produced, the image price for every image, and the token prices for the
// tokens the provider reports (I3; its images' tokens priced per image where the model has an
// image price, see ir.Pricing.Cost), at the tier of its prompt tokens. Failed: only the tokens
// the provider reports it used anyway (Gemini bills a prompt that produced no image), never
// those of an image the client did not get.
func (s *Server) taskPrice(t *store.Task) decimal.Decimal {
	m := s.runtime.Load().Models[t.Model]
	if m == nil {
		return decimal.Zero
	}
	u := ir.Usage{PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens, ImageTokens: t.ImageTokens}
	if t.Status != string(task.Completed) {
		tier := m.Pricing.TierFor(u.PromptTokens)
		completion := u.CompletionTokens - min(max(u.ImageTokens, 0), u.CompletionTokens)
		return tier.Prompt.Mul(decimal.NewFromInt(u.PromptTokens)).Add(tier.Completion.Mul(decimal.NewFromInt(completion)))
	}
	u.Images = tasks.Images(t)
	return m.Pricing.TaskCost(u, tasks.Seconds(t))
}

// billTask settles the ledger's hold of a task that ended, once: a completed one at t.Cost
// (whose usage record the store settled with the completion), a failed one released.
func (s *Server) billTask(t *store.Task) {
	b := s.sh.Books
	if b == nil || t.Paid { // a paid task was settled through x402 when it was created
		return
	}
	var hold *billing.Reservation
	if v, ok := s.tasks.holds.LoadAndDelete(t.ID); ok {
		hold = v.(*billing.Reservation)
	} else if hold, _ = b.Ledger.Reserve(t.Account, t.KeyID, nil, decimal.Zero, b.Now()); hold == nil {
		s.sh.Log.Error("TASK NOT BILLED: its account is gone", "task", t.ID, "account", t.Account)
		return
	}
	if !t.Settled {
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

// formBody reads a multipart create request (as the OpenAI SDKs send videos.create) into JSON,
// keeping formStrings and more as strings.
func formBody(contentType string, raw []byte, more []string) ([]byte, error) {
	return tasks.FormToJSON(contentType, raw, ir.MaxBodyBytes, func(path string) bool {
		return formStrings[path] || slices.Contains(more, path)
	})
}

// familyStrings are the string fields beyond formStrings of the families body's model (or every
// model of its route) belongs to.
func familyStrings(rt *core.Runtime, body []byte) []string {
	var b struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &b) != nil {
		return nil
	}
	ids := []string{b.Model}
	if r := rt.Routes[b.Model]; r != nil {
		ids = slices.Concat(r.Models, slices.Collect(maps.Values(r.Modes)))
	}
	var out []string
	for _, id := range ids {
		if m := rt.Models[id]; m != nil {
			a, err := task.For(m.Family)
			if fs, ok := a.(task.FormStrings); err == nil && ok {
				out = append(out, fs.FormStrings()...)
			}
		}
	}
	return out
}

// TaskCatalog is the configuration tasks run under now.
func (s *Server) TaskCatalog() tasks.Catalog { return s.runtime.Load() }

// RestoreTaskHolds holds again, after a start, what running tasks held before: their credits
// stay reserved until they are billed. A hold the balance no longer covers is kept at zero (the
// task is still billed when it completes).
func (s *Server) RestoreTaskHolds(st store.Tasks) (int, error) {
	b := s.sh.Books
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
