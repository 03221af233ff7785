package chat

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
	adapters "github.com/tollway/tollway/extproc/provider/chat"
	"github.com/tollway/tollway/xds/ir"
)

// chatPlan is the router-level decision for one chat request: which chain of attempts Envoy
// walks. The body is rewritten per attempt by the upstream ext_proc (see attempt).
type chatPlan struct {
	model    *core.Model // the catalog model asked for (for a route: the first of its chain)
	route    *ir.Route
	models   []*core.Model // every model the chain may use, for the worst-case hold
	cluster  string        // the Envoy cluster: a chain, or a provider for a pinned request
	attempts int           // how many attempts the chain has
	pinned   string        // provider name when route.provider pins the request

	fields      []string // the request's top-level fields, to say which were removed
	stream      bool
	clientUsage bool  // the client asked for stream usage itself
	maxTokens   int64 // the client's output cap (max_completion_tokens or max_tokens); 0 if none
	answers     int64 // n: how many answers the client asked for, each up to the output cap
	promptBound int64 // a strict bound of the prompt's tokens, read with the request
}

// target names what the request asked for, for messages.
func (p *chatPlan) target() string {
	if p.route != nil {
		return "route " + p.route.ID
	}
	return "model " + strconv.Quote(p.model.ID)
}

func (p *chatPlan) routeID() string {
	if p.route == nil {
		return ""
	}
	return p.route.ID
}

// removedFor lists the request's fields that provider does not accept for m: what the attempt
// on that provider removed.
func (p *chatPlan) removedFor(m *core.Model, provider string) []string {
	return m.Unsupported(provider, p.fields)
}

// Check is the refusal of a chat request body as the router-level filter validates it (nil:
// it is valid), before any catalog lookup.
func Check(body []byte) *core.APIError {
	_, e := parseChat(body)
	return e
}

// planChat validates a chat request body and decides where it goes.
func planChat(rt *core.Runtime, body []byte) (*chatPlan, *core.APIError) {
	req, e := parseChat(body)
	if e != nil {
		return nil, e
	}
	plan := &chatPlan{
		fields: req.fields, stream: req.stream, clientUsage: req.stream && req.includeUsage,
		maxTokens: req.maxTokens, answers: req.n, promptBound: req.promptBound,
	}
	modelID, mode, pin := req.model, req.routeMode, req.routeProvider
	if strings.HasPrefix(modelID, ir.RoutePrefix) {
		// The route chooses models and providers itself: route.provider is ignored.
		if e := planRoute(rt, plan, modelID, mode); e != nil {
			return plan, e
		}
		return plan, plan.mediaRules()
	}
	m, ok := rt.Models[modelID]
	if !ok {
		return nil, core.Errorf(http.StatusBadRequest, "model_not_found",
			"model %q is not in the catalog; GET /v1/models lists the model ids you can use", core.Clip(modelID))
	}
	plan.model, plan.models = m, []*core.Model{m}
	if e := plan.mediaRules(); e != nil {
		return nil, e
	}
	if pin != "" {
		return plan, planPinned(rt, plan, pin)
	}
	ch := rt.Chains[ir.ModelChainCluster(m.ID)]
	if len(ch) == 0 {
		return nil, rt.Unavailable(m, core.NoRefusal)
	}
	plan.cluster, plan.attempts = ir.ModelChainCluster(m.ID), len(ch)
	return plan, nil
}

// mediaRules refuses, before any hold, what the plan's media models cannot do here: a video
// model, or an image model of another family, has its own endpoint; an I3 answer carries its
// images whole, so it is not streamed (a stream would only hold them back to its end).
func (p *chatPlan) mediaRules() *core.APIError {
	for _, m := range p.models {
		f, media := ir.MediaFamilies[m.Family]
		switch {
		case !media:
		case m.Family != ir.ChatImageFamily:
			return core.Errorf(http.StatusBadRequest, "model_not_found",
				"model %q is a%s %s model, not a chat model: create its tasks with POST %s", m.ID, core.Article(f.Kind), f.Kind, core.MediaPaths[f.Kind])
		case p.stream:
			return core.Errorf(http.StatusBadRequest, "invalid_request",
				"stream is not supported for image model %q: its answer carries whole images; send stream false (or leave it out)", m.ID)
		}
	}
	return nil
}

func planRoute(rt *core.Runtime, plan *chatPlan, id, mode string) *core.APIError {
	r, ids, e := rt.RouteModels(id, mode)
	if e != nil {
		return e
	}
	plan.route = r
	for _, mid := range ids {
		plan.models = append(plan.models, rt.Models[mid])
	}
	plan.model = plan.models[0]
	if r.Rule == ir.RuleModeMapping {
		ch := rt.Chains[ir.ModelChainCluster(plan.model.ID)]
		if len(ch) == 0 {
			return rt.Unavailable(plan.model, core.NoRefusal)
		}
		plan.cluster, plan.attempts = ir.ModelChainCluster(plan.model.ID), len(ch)
		return nil
	}
	ch := rt.Chains[ir.RouteChainCluster(r)]
	if len(ch) == 0 {
		return core.Errorf(http.StatusServiceUnavailable, "route_unavailable",
			"no model of route %s has a provider that can take traffic; check their providers' credentials", id)
	}
	plan.cluster, plan.attempts = ir.RouteChainCluster(r), len(ch)
	return nil
}

func planPinned(rt *core.Runtime, plan *chatPlan, pin string) *core.APIError {
	m := plan.model
	for _, t := range m.Targets {
		if t.Provider != pin {
			continue
		}
		if p := rt.Providers[pin]; p == nil || !p.Ready() {
			return core.Errorf(http.StatusServiceUnavailable, "provider_not_available",
				"provider %q has no API key configured; remove route.provider or choose another provider", pin)
		}
		plan.pinned, plan.cluster, plan.attempts = pin, ir.ClusterPrefix+pin, 1
		return nil
	}
	names := make([]string, len(m.Targets))
	for i, t := range m.Targets {
		names[i] = t.Provider
	}
	return core.Errorf(http.StatusBadRequest, "provider_not_available",
		"provider %q does not serve model %q (it is served by %s): remove route.provider or choose one of those",
		core.Clip(pin), m.ID, strings.Join(names, ", "))
}

// AttemptRequest builds the upstream request of one attempt: the client's body for catalog model m on
// provider p, without the gateway's own fields and the parameters m does not support, with the
// model's output cap and stream usage requested, in p's API.
func AttemptRequest(rt *core.Runtime, body []byte, m *core.Model, p *ir.Provider) (*provider.Upstream, []string, error) {
	req, err := provider.SplitValidated(body) // the router-level filter validated it
	if err != nil {
		return nil, nil, err
	}
	var target string
	for _, t := range m.Targets {
		if t.Provider == p.Name {
			target = t.Model
		}
	}
	if target == "" {
		return nil, nil, errors.New("provider " + p.Name + " does not serve model " + m.ID)
	}
	for _, f := range core.GatewayFields {
		delete(req, f)
	}
	asked, _ := maxTokensOf(req) // read before removal: the hold was sized from it
	removed := m.Unsupported(p.Name, slices.Collect(maps.Keys(req)))
	for _, f := range removed {
		delete(req, f)
	}
	capOutput(req, m, asked, func(f string) bool { return m.Carries(p.Name, f) })
	removed = slices.DeleteFunc(removed, func(f string) bool { _, kept := req[f]; return kept })
	var stream *bool
	if raw, ok := req["stream"]; ok && json.Unmarshal(raw, &stream) == nil && stream != nil && *stream {
		// Streams are billed from the provider's final usage chunk, so always ask for it; the
		// router-level ext_proc removes it again for clients that did not ask.
		if _, e := requestUsage(req); e != nil {
			return nil, nil, errors.New(e.Message)
		}
	}
	adapter, err := adapters.For(p.Type, m.Family)
	if err != nil {
		return nil, nil, err
	}
	up, err := adapter.Chat(p, &m.Model, target, req)
	return up, removed, err
}

// capOutput writes the answer's bound into the attempt: the client's cap (asked; 0 for none),
// lowered to the model's max_output_length, under a cap field the provider carries (the
// client's own field when carried, else the other: o-series models take only
// max_completion_tokens, many servers only max_tokens). The hold was sized from this bound, so
// the provider must see it; only when it carries neither field is the hold sized without the
// client's cap (see capCarried).
func capOutput(req provider.Request, m *core.Model, asked int64, carried func(string) bool) {
	bound := asked
	if m.MaxOutputLength > 0 && (bound <= 0 || bound > m.MaxOutputLength) {
		bound = m.MaxOutputLength
	}
	if bound <= 0 {
		return // nothing to bound: no client cap, no model cap
	}
	fields := []string{"max_tokens", "max_completion_tokens"}
	if _, ok := req["max_completion_tokens"]; ok {
		fields[0], fields[1] = fields[1], fields[0]
	}
	for _, f := range fields {
		if carried(f) {
			delete(req, "max_tokens")
			delete(req, "max_completion_tokens")
			req[f] = json.RawMessage(strconv.FormatInt(bound, 10))
			return
		}
	}
}

// maxTokensOf reads the client's output cap; max_completion_tokens wins over the older max_tokens.
func maxTokensOf(req provider.Request) (int64, *core.APIError) {
	var out int64
	for _, f := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := req[f]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 {
			return 0, core.Errorf(http.StatusBadRequest, "invalid_request", "%s must be a positive integer", f)
		}
		out = n
	}
	return out, nil
}

// requestUsage sets stream_options.include_usage on a streamed request and reports whether the
// client had set it. Other stream_options are kept.
func requestUsage(req provider.Request) (bool, *core.APIError) {
	opts := map[string]json.RawMessage{}
	if raw, ok := req["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			return false, core.Errorf(http.StatusBadRequest, "invalid_request", `stream_options must be an object like {"include_usage": true}`)
		}
	}
	asked := string(opts["include_usage"]) == "true"
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	req["stream_options"] = raw
	return asked, nil
}

// allowsPlan: a route is allowed when the key lists the route itself or every model it may use.
func allowsPlan(k *core.KeyInfo, p *chatPlan) bool { return k.AllowsModels(p.route, p.models) }
