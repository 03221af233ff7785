package embeddings

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// plan is where an embeddings request goes: the chain of attempts Envoy walks (each attempt
// rewritten for its provider by the upstream ext_proc), or one provider it is pinned to.
type plan struct {
	model    *core.Model // the catalog model asked for (for a route: the first of its chain)
	route    *ir.Route
	models   []*core.Model // every model the chain may use, for the worst-case hold
	cluster  string        // the Envoy cluster: a chain, or a provider for a pinned request
	attempts int
	pinned   string // provider name when route.provider pins the request
}

// target names what the request asked for, for messages.
func (p *plan) target() string {
	if p.route != nil {
		return "route " + p.route.ID
	}
	return "model " + strconv.Quote(p.model.ID)
}

// requested is what the client asked for: the catalog model, or route:<name>.
func (p *plan) requested() string {
	if p.route != nil {
		return p.route.ID
	}
	return p.model.ID
}

func (p *plan) routeID() string {
	if p.route == nil {
		return ""
	}
	return p.route.ID
}

// planFor decides where a valid request goes: a route's chain (route:<name>, route_mode for a
// mode route), a model's chain, or the provider route.provider pins a model to; and refuses
// what every provider it may go to cannot take (fits) and an input over the model's
// context_length (fitsContext).
func planFor(rt *core.Runtime, req *request) (*plan, *core.APIError) {
	p, e := route(rt, req)
	if e != nil {
		return nil, e
	}
	if e := p.fits(rt, req); e != nil {
		return nil, e
	}
	return p, p.fitsContext(rt, req)
}

// route is planFor's choice of where the request goes.
func route(rt *core.Runtime, req *request) (*plan, *core.APIError) {
	p := &plan{}
	if strings.HasPrefix(req.model, ir.RoutePrefix) {
		r, ids, e := rt.RouteModels(req.model, req.routeMode)
		if e != nil {
			return nil, e
		}
		p.route = r
		for _, id := range ids {
			p.models = append(p.models, rt.Models[id])
		}
		p.model = p.models[0]
		if e := embeds(p.model, "route "+r.ID+"'s model"); e != nil {
			return nil, e
		}
		p.cluster = ir.RouteChainCluster(r)
		if r.Rule == ir.RuleModeMapping {
			p.cluster = ir.ModelChainCluster(p.model.ID)
		}
		return p, p.chain(rt)
	}
	m, ok := rt.Models[req.model]
	if !ok {
		return nil, core.Errorf(http.StatusBadRequest, "model_not_found",
			"model %q is not in the catalog; GET /v1/models lists the model ids you can use (embeddings models have output_modalities embeddings)", core.Clip(req.model))
	}
	if e := embeds(m, "model"); e != nil {
		return nil, e
	}
	p.model, p.models = m, []*core.Model{m}
	if req.routeProvider != "" {
		return p, p.pin(rt, req.routeProvider)
	}
	p.cluster = ir.ModelChainCluster(m.ID)
	return p, p.chain(rt)
}

// embeds refuses a model that makes no embeddings (a chat or media model).
func embeds(m *core.Model, what string) *core.APIError {
	if k := m.Kind(); k != ir.KindEmbeddings {
		return core.Errorf(http.StatusBadRequest, "model_not_found",
			"%s %q is a%s %s model, not an embeddings model: send it to POST %s, or use an embeddings model (GET /v1/models lists them with output_modalities embeddings)",
			what, m.ID, core.Article(k), k, core.EndpointOf(k))
	}
	return nil
}

// chain checks that the plan's cluster has a provider that can take traffic.
func (p *plan) chain(rt *core.Runtime) *core.APIError {
	ch := rt.Chains[p.cluster]
	switch {
	case len(ch) > 0:
		p.attempts = len(ch)
		return nil
	case p.route != nil && p.route.Rule != ir.RuleModeMapping:
		return core.Errorf(http.StatusServiceUnavailable, "route_unavailable",
			"no model of route %s has a provider that can take traffic; check their providers' credentials", p.route.ID)
	}
	return rt.Unavailable(p.model, core.NoRefusal)
}

// pin sends the request to provider name alone (route.provider), which must serve the model.
func (p *plan) pin(rt *core.Runtime, name string) *core.APIError {
	if p.model.UpstreamName(name) == "" {
		var names []string
		for _, t := range p.model.Targets {
			names = append(names, t.Provider)
		}
		return core.Errorf(http.StatusBadRequest, "provider_not_available",
			"provider %q does not serve model %q (it is served by %s): remove route.provider or choose one of those",
			core.Clip(name), p.model.ID, strings.Join(names, ", "))
	}
	if pr := rt.Providers[name]; pr == nil || !pr.Ready() {
		return core.Errorf(http.StatusServiceUnavailable, "provider_not_available",
			"provider %q has no API key configured; remove route.provider or choose another provider", name)
	}
	p.pinned, p.cluster, p.attempts = name, ir.ClusterPrefix+name, 1
	return nil
}

// fits refuses, before the request is admitted or any provider asked, what the plan's
// providers cannot take when every attempt is on Gemini's API: token ids (Gemini takes text
// only) and more than 100 inputs (batchEmbedContents takes at most 100). A chain with another
// provider is left to its attempts (the Gemini adapter refuses the same at its own).
func (p *plan) fits(rt *core.Runtime, req *request) *core.APIError {
	names := []string{p.pinned}
	if p.pinned == "" {
		names = names[:0]
		for _, a := range rt.Chains[p.cluster] {
			names = append(names, a.Provider)
		}
	}
	for _, n := range names {
		if pr := rt.Providers[n]; pr == nil || pr.Type != ir.ProviderTypeGemini {
			return nil
		}
	}
	who := "its provider (Gemini)"
	if p.pinned != "" {
		who = "provider " + p.pinned + " (Gemini)"
	}
	switch {
	case len(names) == 0:
	case len(req.tokens) > 0:
		return bad("invalid_request", "input as token arrays cannot be sent to %s: %s takes text only; send the text, or use a model on OpenAI's API", p.target(), who)
	case req.inputs() > gemini.MaxBatchEmbed:
		return bad("invalid_request", "input has %d items; %s on %s embeds at most %d per request: split them over several requests", req.inputs(), p.target(), who, gemini.MaxBatchEmbed)
	}
	return nil
}
