package gateway

import (
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/envoy"
)

// What the running gateway reports (the admin API's status, health and metrics endpoints).

// Config is the configuration applied last; nil before the first.
func (g *Gateway) Config() *config.Config {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg
}

// Credentials says, by provider name, whether its credential resolved (or it needs none) in the
// catalog applied last.
func (g *Gateway) Credentials() map[string]bool {
	g.mu.Lock()
	gw := g.lastIR
	g.mu.Unlock()
	ready := map[string]bool{}
	if gw != nil {
		for i := range gw.Providers {
			ready[gw.Providers[i].Name] = gw.Providers[i].Ready()
		}
	}
	return ready
}

// Health is Envoy's health check of each provider as last read; nil before the first reading.
func (g *Gateway) Health() map[string]bool {
	if h := g.health.Load(); h != nil {
		return *h
	}
	return nil
}

// SetHealth records a reading of Envoy's health checks: ext_proc's (for the catalog's is_ready)
// and the admin API's view.
func (g *Gateway) SetHealth(h map[string]bool) {
	g.ext.SetHealth(h)
	g.health.Store(&h)
}

// Envoy is the Envoy process serving the gateway and its supervisor; nil until they run.
func (g *Gateway) Envoy() (*envoy.Process, *envoy.Supervisor) {
	return g.envoy.Load(), g.supervisor.Load()
}

// SetEnvoy records the Envoy process serving the gateway (a restarted one too).
func (g *Gateway) SetEnvoy(p *envoy.Process) { g.envoy.Store(p) }

// SetSupervisor records the supervisor that restarts the child Envoy.
func (g *Gateway) SetSupervisor(s *envoy.Supervisor) { g.supervisor.Store(s) }
