package chat

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/core"
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
		case m.Kind() == ir.KindEmbeddings:
			return core.Errorf(http.StatusBadRequest, "model_not_found",
				"model %q is an embeddings model, not a chat model: send it to POST %s", m.ID, core.EmbeddingsPath)
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

// allowsPlan: a route is allowed when the key lists the route itself or every model it may use.
func allowsPlan(k *core.KeyInfo, p *chatPlan) bool { return k.AllowsModels(p.route, p.models) }
