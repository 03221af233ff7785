package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const routePatchExample = `{"rate_limits": {"requests_per_minute": 600, "tokens_per_minute": 1000000}}`

// decodeRoutePatch decodes the body of PATCH /admin/v1/routes/{id}: the change its
// rate_limits makes (null: both rates unset).
func decodeRoutePatch(raw []byte) (store.RatesChange, error) {
	var req adminapi.RoutePatch
	if err := decodeJSON(raw, &req, routePatchExample); err != nil {
		return store.RatesChange{}, err
	}
	var named map[string]json.RawMessage
	_ = json.Unmarshal(raw, &named) // decodeJSON took it: one JSON object
	rawRates, ok := named["rate_limits"]
	if !ok {
		return store.RatesChange{}, faultf("body", "names no rate_limits; send the rates to change, e.s. %s, or null for no limit", routePatchExample)
	}
	return patchRates(rawRates, req.RateLimits), errors.Join(rateFaults(req.RateLimits)...)
}

// routeLimitRoutes: GET /admin/v1/routes/{id} is one route as the list shows it; PATCH
// changes its rate_limits (every request through it, all keys together), as a key's PATCH
// does: a rate named changes, null removes it, the others are kept. The next request through
// the route is admitted under them. A config route is refused with 409 config_route (the next
// apply would undo the change).
func (s *api) routeLimitRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/routes/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		if err != nil {
			writeErr(w, err)
			return
		}
		s.writeRoute(w, id)
	})
	mux.HandleFunc("PATCH /admin/v1/routes/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		var change store.RatesChange
		if err == nil {
			change, err = decoded(r, decodeRoutePatch)
		}
		if err == nil {
			_, err = s.apply.Change(r.Context(), func() error {
				rt, err := s.route(id)
				if err != nil {
					return err
				}
				if rt.Source == store.SourceConfig {
					return configRouteRefusal(rt.ID)
				}
				// The store merges the change in its own transaction: another replica's
				// concurrent change of the other rate is kept.
				_, err = s.store.ChangeRouteRateLimits(id, change)
				return err
			})
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		s.writeRoute(w, id)
	})
}

// route is the stored route id (ErrNotFound if absent).
func (s *api) route(id string) (store.Route, error) {
	routes, err := s.store.Routes()
	if err != nil {
		return store.Route{}, err
	}
	for _, rt := range routes {
		if rt.ID == id {
			return rt, nil
		}
	}
	return store.Route{}, fmt.Errorf("route %s: %w", ir.QuoteShort(id), store.ErrNotFound)
}

// writeRoute answers with route id as GET /admin/v1/routes lists it.
func (s *api) writeRoute(w http.ResponseWriter, id string) {
	rt, err := s.route(id)
	var usage map[string][]store.UsageRow
	if err == nil {
		usage, err = s.store.RouteUsage()
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.routeView(rt, usage))
}
