package app

import "net/http"

// consoleAPIRoutes are the admin endpoints the web console needs beyond the CLI's: a key's
// limits changed in place (admin_keylimits.go), usage grouped any way and exported as CSV,
// key activity (admin_usage_views.go), a route's status that a config apply would not undo
// (admin_route_status.go), providers' health and the public catalog (admin_health.go). The
// CLI and scripts may use them as well.
func (g *gateway) consoleAPIRoutes(mux *http.ServeMux) {
	g.keyLimitRoutes(mux)
	g.usageViewRoutes(mux)
	g.routeStatusRoutes(mux)
	g.healthRoutes(mux)
}
