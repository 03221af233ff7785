package adminapi

import (
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Route is a route as an operator writes it, one shape for both ways of writing one: the body
// of POST /admin/v1/routes and an entry of the config file's routes:. Its id is route:<slug of
// name>; the IR checks it against the catalog.
type Route struct {
	Name   string            `json:"name" mapstructure:"name"`
	Rule   string            `json:"rule" mapstructure:"rule"`
	Models []string          `json:"models" mapstructure:"models"`
	Modes  map[string]string `json:"modes" mapstructure:"modes"`
	Status string            `json:"status" mapstructure:"status"` // active when omitted
	// RateLimits caps the requests and tokens per minute of every request through the route.
	RateLimits *store.RateLimits `json:"rate_limits,omitempty" mapstructure:"rate_limits"`
}

// StoreRoute is the route as the store keeps it; its id comes from the name once.
func (r Route) StoreRoute() store.Route {
	status := r.Status
	if status == "" {
		status = ir.RouteActive
	}
	return store.Route{ID: ir.RoutePrefix + ir.Slug(r.Name), Name: r.Name, Rule: r.Rule, Models: r.Models, Modes: r.Modes, Status: status, RateLimits: r.RateLimits.Norm()}
}
