package admin

import (
	"fmt"
	"net/http"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// decodeRouteStatus decodes the body of PUT /admin/v1/routes/{id}/status.
func decodeRouteStatus(raw []byte) (adminapi.RouteStatus, error) {
	var req adminapi.RouteStatus
	if err := decodeJSON(raw, &req, `{"status": "paused"}`); err != nil {
		return req, err
	}
	if req.Status != ir.RouteActive && req.Status != ir.RoutePaused {
		return req, faultf("status", "%s: want %q or %q", ir.QuoteShort(req.Status), ir.RouteActive, ir.RoutePaused)
	}
	return req, nil
}

// routeStatusRoutes: PUT /admin/v1/routes/{id}/status pauses or resumes a route created through
// the admin API (the console's pause and resume). A route from the config file is refused with
// 409 config_route: the next config apply replaces it, which would silently undo the change.
// (POST .../pause and .../resume, the CLI's, still pause a config route until that apply: a
// stop for emergencies.)
func (s *api) routeStatusRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /admin/v1/routes/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		var req adminapi.RouteStatus
		if err == nil {
			req, err = decoded(r, decodeRouteStatus)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		s.change(w, r, func() error {
			routes, err := s.store.Routes()
			if err != nil {
				return err
			}
			for _, rt := range routes {
				if rt.ID != id {
					continue
				}
				if rt.Source == store.SourceConfig {
					return configRouteRefusal(rt.ID)
				}
				_, err := s.store.SetRouteStatus(id, req.Status)
				return err
			}
			return fmt.Errorf("route %s: %w", ir.QuoteShort(id), store.ErrNotFound)
		})
	})
}

// configRouteRefusal says why a config route is not edited here, and how to edit it.
func configRouteRefusal(id string) error {
	return &adminRefusal{http.StatusConflict, "config_route",
		"route " + ir.QuoteShort(id) + " is defined in the config file (routes:), and the next config apply would undo a change made here: " +
			"edit its entry there (status: paused or active, its models, its rate_limits) and run `tollway reload`; routes created in the console or with `tollway routes create` can be changed here"}
}
