package core

import (
	"cmp"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/tollway/tollway/xds/ir"
)

// RouteModels resolves a route id (any endpoint's model field) to its models in the order
// they are tried: a priority route's list, or the one model route_mode maps to (balanced
// when mode is empty).
func (rt *Runtime) RouteModels(id, mode string) (*ir.Route, []string, *APIError) {
	r, ok := rt.Routes[id]
	if !ok {
		return nil, nil, Errorf(http.StatusBadRequest, "route_not_found",
			"route %q does not exist; check the route id with the gateway's operator, or send a model id (GET /v1/models lists them)", Clip(id))
	}
	if r.Status != ir.RouteActive {
		e := Errorf(http.StatusConflict, "route_paused",
			"route %s is paused by the gateway's operator; send another route or a model id (GET /v1/models lists them), or ask the operator to resume it", id)
		e.Operator = fmt.Sprintf("route %s is paused and requests still name it: resume it with `tollway routes resume %s`, or tell its clients to move", id, id)
		return nil, nil, e
	}
	if r.Rule != ir.RuleModeMapping {
		return r, r.Models, nil
	}
	mode = cmp.Or(mode, "balanced")
	mid, ok := r.Modes[mode]
	if !ok {
		return nil, nil, Errorf(http.StatusBadRequest, "invalid_route_mode",
			"route %s has no %q mode; it maps %s", id, Clip(mode), strings.Join(SortedKeys(r.Modes), ", "))
	}
	return r, []string{mid}, nil
}

// Unavailable is the answer for model m when none of its providers can take traffic; refused
// says why a provider refusing the gateway's credential is passed over ("" when it is not).
func (rt *Runtime) Unavailable(m *Model, refused func(provider string) string) *APIError {
	var reasons []string
	for _, t := range m.Targets {
		p := rt.Providers[t.Provider]
		switch why := refused(t.Provider); {
		case p == nil || !p.Ready():
			reasons = append(reasons, "provider "+t.Provider+" has no API key configured")
		case why != "":
			reasons = append(reasons, why)
		default:
			reasons = append(reasons, "provider "+t.Provider+" cannot take traffic now")
		}
	}
	return Errorf(http.StatusServiceUnavailable, "model_unavailable",
		"model %q has no provider that can take traffic (%s); try another model", m.ID, strings.Join(reasons, "; "))
}

// NoRefusal: chat never passes over a provider for a refused credential (Envoy's chain keeps
// it, so each request tries it); only one without a credential is missing from the chain.
func NoRefusal(string) string { return "" }

func SortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
