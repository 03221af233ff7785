package admin

import (
	"errors"
	"net/http"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// routeHealth: a fallback route is healthy when its first model can take traffic, degraded
// when only a later one can, down when none can; a mode-mapping route is healthy when every
// mapped model can, degraded when some can.
func (s *api) routeHealth(r store.Route) string {
	var models []string
	if r.Rule == ir.RuleModeMapping {
		for _, m := range r.Modes {
			models = append(models, m)
		}
	} else {
		models = r.Models
	}
	ready := 0
	firstReady := false
	for i, m := range models {
		if s.ext.ModelReady(m) {
			ready++
			firstReady = firstReady || i == 0
		}
	}
	switch {
	case ready == 0:
		return "down"
	case r.Rule == ir.RuleModeMapping && ready == len(models), r.Rule != ir.RuleModeMapping && firstReady:
		return "healthy"
	}
	return "degraded"
}

// routeView is rt as the admin API shows it: with its health and its usage (from usage).
func (s *api) routeView(rt store.Route, usage map[string][]store.UsageRow) adminapi.RouteView {
	u := usage[rt.ID]
	if u == nil {
		u = []store.UsageRow{}
	}
	return adminapi.RouteView{Route: rt, Health: s.routeHealth(rt), Usage: u}
}

const routeExample = `{"name": "support bot", "rule": "priority_fallback", "models": ["m1", "m2"], "rate_limits": {"requests_per_minute": 600}} or {"name": "tiers", "rule": "mode_mapping", "modes": {"fast": "m1", "balanced": "m2", "deep": "m3"}}`

// decodeRouteRequest decodes the body of POST /admin/v1/routes; the IR checks the route
// against the catalog.
func decodeRouteRequest(raw []byte) (adminapi.Route, error) {
	var req adminapi.Route
	if err := decodeJSON(raw, &req, routeExample); err != nil {
		return req, err
	}
	if ir.Slug(req.Name) == "" {
		return req, faultf("name", "%s: a route needs a name with letters or digits, e.s. %q (its id becomes route:support-bot)", ir.QuoteShort(req.Name), "support bot")
	}
	return req, errors.Join(rateFaults(req.RateLimits)...)
}

func (s *api) routeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/routes", func(w http.ResponseWriter, r *http.Request) {
		cat, err := s.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		usage, err := s.store.RouteUsage()
		if err != nil {
			writeErr(w, err)
			return
		}
		out := make([]adminapi.RouteView, 0, len(cat.Routes))
		for _, rt := range cat.Routes {
			out = append(out, s.routeView(rt, usage))
		}
		writeJSON(w, http.StatusOK, adminapi.List[adminapi.RouteView]{Data: out})
	})
	mux.HandleFunc("POST /admin/v1/routes", func(w http.ResponseWriter, r *http.Request) {
		req, err := decoded(r, decodeRouteRequest)
		if err != nil {
			writeErr(w, err)
			return
		}
		rt := req.StoreRoute()
		rt.Source = store.SourceAdmin
		cat, err := s.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		for _, old := range cat.Routes {
			if old.ID == rt.ID {
				writeErr(w, &adminRefusal{http.StatusConflict, "already_exists", "name: route " + ir.QuoteShort(rt.ID) + " already exists; a route's id comes from its name and never changes: choose another name"})
				return
			}
		}
		s.change(w, r, func() error { return s.store.PutRoute(rt) })
	})
	for _, action := range []struct{ path, status string }{{"pause", ir.RoutePaused}, {"resume", ir.RouteActive}} {
		mux.HandleFunc("POST /admin/v1/routes/{id}/"+action.path, func(w http.ResponseWriter, r *http.Request) {
			id, err := pathParam(r, "id", maxPathID)
			if err != nil {
				writeErr(w, err)
				return
			}
			s.change(w, r, func() error {
				_, err := s.store.SetRouteStatus(id, action.status)
				return err
			})
		})
	}
}
