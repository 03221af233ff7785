package tasks

// A media task's create (POST /v1/videos, /v1/images): the body read (JSON or a form), the
// model or route resolved to the models and providers that may run it, the worst case held
// (or paid), and the task created through the Service with fallback.

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
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// create creates a task from the request body and answers with its object.
func (md *Media) create(raw []byte) *extprocv3.ProcessingResponse {
	x, e, kind := md.x, md.e, md.kind
	rt := x.RT
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
	x.RequestModel = modelID
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
	models, route, refused := mediaModels(rt, kind, modelID, mode)
	if refused != nil {
		return x.Fail(refused)
	}
	if route != nil {
		pin = "" // the route chooses providers itself (docs/api.md#routes)
	}
	if !x.Key.AllowsModels(route, models) {
		if md.pay != nil {
			if e := md.pay.Refuses(route, models, fmt.Sprintf("model %q", core.Clip(modelID))); e != nil {
				return x.Fail(e)
			}
		}
		return x.Fail(core.Errorf(http.StatusForbidden, "model_not_allowed", "this API key may not use %s", core.Clip(modelID)))
	}
	// The candidates, in order: each model the body is valid for, with its providers that can
	// take traffic. A route's later model of another family checks the body its own way; one
	// that refuses it is passed over, and the first refusal is the answer when none takes it.
	var (
		attempts []Attempt
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
		var ready []Attempt
		for _, t := range m.Targets {
			p := rt.Providers[t.Provider]
			// A provider refusing the gateway's credential is tried again now and then (refusals.go).
			if p == nil || (pin != "" && pin != p.Name) || !p.Ready() || !e.Refusals.MayTry(p.Name, now) {
				continue
			}
			ready = append(ready, Attempt{Provider: p, Model: t.Model, Spec: &m.Model})
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
	case pin != "" && e.Refusals.Reason(pin) != "":
		return x.Fail(core.Errorf(http.StatusServiceUnavailable, "provider_not_available", "%s; remove route.provider or choose another", e.Refusals.Reason(pin)))
	case pin != "":
		return x.Fail(core.Errorf(http.StatusBadRequest, "provider_not_available", "provider %q does not serve model %q or cannot take traffic; remove route.provider or choose another", core.Clip(pin), models[0].ID))
	case route != nil:
		return x.Fail(core.Errorf(http.StatusServiceUnavailable, "route_unavailable", "no model of route %s has a provider that can take traffic; check their providers' credentials", route.ID))
	default:
		return x.Fail(rt.Unavailable(models[0], e.Refusals.Reason))
	}
	m := first
	if tr.CallbackURL != "" {
		if err := e.Callbacks.CheckURL(x.Context(), tr.CallbackURL); err != nil {
			return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_callback_url", "%v", err))
		}
	}
	// A task the store cannot record must not be created: the provider would run (and bill)
	// a task nobody can see. The task is written to the shared database itself (with
	// store.driver postgres, not the spool).
	if refused := x.SharedStoreRefusal(); refused != nil {
		return x.Fail(refused)
	}
	hold, refused := md.hold(worst, route)
	if refused != nil {
		return x.Fail(refused)
	}
	x.EndAdmission()
	// The client going away stops the create before its next provider; one already sent runs
	// to its answer (Service.Create).
	ctx, cancel := context.WithTimeout(x.Context(), createTimeout)
	defer cancel()
	t, err := e.Service.Create(ctx, NewTask{
		Kind: kind, Account: x.Key.Account, KeyID: x.Key.ID, RequestID: x.RequestID, Route: routeID(route),
		Model: &m.Model, Attempts: attempts, Body: req, Request: tr, Hold: worst, Paid: md.pay != nil,
		Trace: spans.Traceparent(x.Trace),
	})
	if err != nil {
		if hold != nil {
			hold.Release()
		}
		return x.Fail(apiError(err))
	}
	x.TaskModel, x.Provider = t.Model, t.Provider // for the access log
	if hold != nil {
		e.holds.Store(t.ID, hold)
		if t.Terminal() { // the provider answered with the finished task
			md.settle(t)
		}
	}
	body, _ := json.Marshal(ObjectOf(t, time.Now()))
	var resp *extprocv3.ProcessingResponse
	if md.pay != nil {
		resp = md.pay.Created(t, worst, body)
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

// settle bills a task that ended with its create, under a settlement span (one that ends
// later, found by the poller, is settled in its create's trace: Endpoints.BillLater).
func (md *Media) settle(t *store.Task) {
	x := md.x
	span := x.StartSpan(spans.Settlement)
	md.e.Bill(t)
	if span.Recording() {
		span.Set(x.SpanAttrs()...)
		taskSettled(span, t)
	}
	span.End()
}

// hold takes the hold of a create whose worst case is worst, made through route (nil: none),
// after its rates: a paid one's payment is admitted instead (it covers the task, never the account's credits). Nil without billing.
func (md *Media) hold(worst decimal.Decimal, route *ir.Route) (*billing.Hold, *core.APIError) {
	x := md.x
	// Rate limits first (requests per minute; a task's tokens are not counted): a refused
	// create holds nothing and reaches no facilitator.
	if e := x.AdmitRates(0, nil, route); e != nil {
		return nil, e
	}
	if md.pay != nil {
		return nil, md.pay.AdmitTask(worst)
	}
	b := x.Books
	if b == nil {
		return nil, nil
	}
	fix := "ask for a shorter duration"
	if md.kind == ir.KindImage {
		fix = "ask for fewer images"
	}
	h, err := b.Reserve(billing.Owner{Account: x.Key.Account, KeyID: x.Key.ID, Limit: x.Key.MonthlyLimit}, worst)
	if e := core.HoldRefused(err, x.Key, worst, fix); e != nil {
		return nil, e
	}
	return h, nil
}

// removedOf is what the create of task t left out of the client's body: the Removed of the
// attempt whose model took it.
func removedOf(attempts []Attempt, t *store.Task) []string {
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
	return FormToJSON(contentType, raw, ir.MaxBodyBytes, func(path string) bool {
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
