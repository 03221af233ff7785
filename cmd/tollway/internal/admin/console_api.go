package admin

import "net/http"

// consoleAPIRoutes are the admin endpoints the web console needs beyond the CLI's: a key's
// limits changed in place (keylimits.go), usage grouped any way and exported as CSV,
// key activity (usage_views.go), a route's status that a config apply would not undo
// (route_status.go), providers' health and the public catalog (health.go). The
// CLI and scripts may use them as well.
func (s *api) consoleAPIRoutes(mux *http.ServeMux) {
	s.keyLimitRoutes(mux)
	s.usageViewRoutes(mux)
	s.routeStatusRoutes(mux)
	s.healthRoutes(mux)
}
