// Package gateway applies configuration to what runs: every change goes store -> IR -> Envoy
// (through the xDS server) and ext_proc (a compiled runtime), serialized, and is undone when
// the result is invalid or Envoy rejects it. It also holds what the running gateway reports
// (the applied configuration, provider health, the Envoy process) and what an applied
// configuration starts: the demo model server, the x402 facilitator's client, the callback
// guard's view of the gateway's own listeners.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// ackWait bounds how long a configuration change waits for Envoy to accept it.
const ackWait = 10 * time.Second

// Options are what a Gateway applies to and works with.
type Options struct {
	Log   *slog.Logger
	Store store.Store
	XDS   *xds.Server
	Ext   *extproc.Server
	// Internal is Envoy's loopback listener for the gateway's own task requests; nil with
	// external Envoys.
	Internal *ir.Listener
	// Callbacks decides where task callbacks may go: its allow-list (callbacks.allow_private)
	// and the public listener follow each applied configuration. Nil: no callbacks (tests).
	Callbacks *tasks.Guard
	// Settlements resolves x402 settlements whose outcome was unknown; nil when billing is
	// off, so there are no paid endpoints.
	Settlements *paid.Settlements
}

// Gateway ties the store to its two consumers: Envoy (through xDS) and ext_proc (through a
// compiled runtime). Every change goes store -> IR -> both, serialized by mu.
type Gateway struct {
	log         *slog.Logger
	store       store.Store
	xds         *xds.Server
	ext         *extproc.Server
	internal    *ir.Listener
	callbacks   *tasks.Guard
	settlements *paid.Settlements
	demo        *demoServer // the in-process demo model, started when a provider of type demo is applied

	// health is Envoy's view of each provider (name -> healthy), as last read; nil before the
	// first reading. The console's provider list shows it.
	health atomic.Pointer[map[string]bool]
	// envoy is the Envoy process serving this gateway, once started (`tollway status`).
	envoy atomic.Pointer[envoy.Process]
	// supervisor restarts the child Envoy; nil until it runs.
	supervisor atomic.Pointer[envoy.Supervisor]

	checks checks // of the x402 facilitator, one at a time

	mu     sync.Mutex
	cfg    *config.Config
	lastIR *ir.Gateway
	// fac is the x402 facilitator's client, made for facURL and kept while the configured
	// facilitator stays the same (payments.go).
	fac    *x402.Facilitator
	facURL string
}

// New is a gateway with nothing applied yet.
func New(o Options) *Gateway {
	g := &Gateway{log: o.Log, store: o.Store, xds: o.XDS, ext: o.Ext, internal: o.Internal, callbacks: o.Callbacks,
		settlements: o.Settlements, demo: &demoServer{log: o.Log.With("component", "demo")}}
	if o.Callbacks != nil {
		g.demo.own = o.Callbacks.Own
	}
	g.checks.ctx, g.checks.cancel = context.WithCancel(context.Background())
	return g
}

// Close stops what applied configurations started: the facilitator checks under way, the
// facilitator client's idle connections, the demo model server. Call it once nothing applies
// any more (after the servers stopped).
func (g *Gateway) Close() {
	g.checks.stop()
	g.mu.Lock()
	if g.fac != nil {
		g.fac.HTTP.CloseIdleConnections()
	}
	g.mu.Unlock()
	g.demo.close()
}

// ApplyConfig writes the config's providers, models and routes to the store and applies the
// result; the store is left as it was when that fails.
func (g *Gateway) ApplyConfig(ctx context.Context, c *config.Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg != nil && c.Listen.Admin != g.cfg.Listen.Admin {
		g.log.Warn("listen.admin changed; it takes effect on restart", "from", g.cfg.Listen.Admin, "to", c.Listen.Admin)
	}
	if g.cfg != nil && c.Limits != g.cfg.Limits {
		g.log.Warn("limits.max_concurrent_requests changed; provider clusters follow now, the ext_proc and client connection limits on restart",
			"from", g.cfg.Limits.MaxConcurrentRequests, "to", c.Limits.MaxConcurrentRequests)
	}
	if g.cfg != nil && c.Envoy.Concurrency != g.cfg.Envoy.Concurrency {
		g.log.Warn("envoy.concurrency changed; Envoy's workers follow on restart", "from", g.cfg.Envoy.Concurrency, "to", c.Envoy.Concurrency)
	}
	if g.cfg != nil && c.Tasks != g.cfg.Tasks {
		g.log.Warn("tasks.max_age or tasks.unknown_grace changed; they take effect on restart",
			"max_age", c.Tasks.MaxAge.String(), "unknown_grace", c.Tasks.UnknownGrace.String())
	}
	if g.cfg != nil && c.Admin.Token != g.cfg.Admin.Token {
		g.log.Warn("admin.token changed; it takes effect on restart") // never the token itself
	}
	if g.cfg != nil && c.Routing.FastLane != g.cfg.Routing.FastLane {
		// Envoy takes the listener and the routes in two pushes: a request between them would
		// have its answer handed to a filter its route does not run, and go unbilled.
		g.log.Warn("routing.fast_lane changed; it takes effect on restart", "running", g.cfg.Routing.FastLane)
		c.Routing.FastLane = g.cfg.Routing.FastLane
	}
	if g.cfg != nil && c.Tracing != g.cfg.Tracing {
		// ext_proc's exporter is made once, at start: Envoy's and ext_proc's spans go to one
		// collector, at one rate.
		g.log.Warn("tracing changed; it takes effect on restart", "running_endpoint", g.cfg.Tracing.OTLPEndpoint)
		c.Tracing = g.cfg.Tracing
	}
	before, err := g.store.Catalog()
	if err != nil {
		return err
	}
	cat, err := c.Catalog()
	if err != nil {
		return err
	}
	if err := g.store.ReplaceConfig(cat); err != nil {
		return err
	}
	prev := g.cfg
	g.cfg = c
	if err := g.applyLocked(ctx); err != nil {
		// Keep the store matching what runs: invalid or rejected config changes nothing.
		g.cfg = prev
		if rerr := g.store.RestoreCatalog(before); rerr != nil {
			g.log.Error("could not undo a rejected configuration", "error", rerr)
		}
		return err
	}
	if allow, err := c.CallbackAllow(); err == nil && g.callbacks != nil { // Validate checked it
		g.callbacks.Allow.Set(allow)
		g.callbacks.Own.Set(ownPublic, listenAddrs(c.Listen.Public)...)
	}
	g.ext.SetPayments(g.payments(c))
	return nil
}

// Apply rebuilds from the store.
func (g *Gateway) Apply(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.applyLocked(ctx)
}

// applyLocked builds the IR, pushes it to Envoy and, once Envoy accepted it, swaps the ext_proc
// runtime, so ext_proc never routes to a cluster Envoy does not have yet. On rejection both keep
// the last good configuration.
func (g *Gateway) applyLocked(ctx context.Context) error {
	cat, err := g.store.Catalog()
	if err != nil {
		return err
	}
	gw, err := catalog.Build(g.cfg.Listen.Public, cat, g.cfg.BuildEnv(g.demo.addr))
	if err != nil {
		return err
	}
	gw.AttemptTimeout = g.cfg.Routing.AttemptTimeout
	gw.FastLane = g.cfg.Routing.FastLane
	gw.Limits = g.cfg.IRLimits()
	gw.KeyRateLimits = g.cfg.KeyRateDefaults()
	gw.AccessLog = g.cfg.AccessLog()
	gw.Tracing = g.cfg.IRTracing()
	gw.Listener.XFFTrustedHops = uint32(g.cfg.Listen.XFFNumTrustedHops)
	gw.Internal = g.internal
	res, err := translator.Translate(gw)
	if err != nil {
		return err
	}
	keys, err := g.store.Keys()
	if err != nil {
		return err
	}
	v, err := g.xds.PushFor(ctx, nodeRender(gw, res), ackWait)
	if err != nil {
		return err
	}
	g.lastIR = gw
	g.ext.Swap(extproc.Compile(gw, keys))
	g.log.Info("configuration applied", "snapshot", v, "providers", len(gw.Providers), "models", len(gw.Models))
	for _, p := range gw.Providers {
		if !p.Ready() {
			g.log.Warn("provider has no credential; its models skip it: set the environment variable its credential names and restart tollway",
				append([]any{"provider", p.Name}, credentialRefs(cat, p.Name)...)...)
		}
		if p.Type == ir.ProviderTypeDemo {
			g.log.Warn("DEMO PROVIDER "+p.Name+": answers are canned by Tollway, not from a language model", "provider", p.Name, "addr", p.Authority())
		}
	}
	return nil
}

// credentialRefs are the credential references of provider name as log attributes
// (api_key=${OPENAI_API_KEY}): variable names, never secrets (literals are stored as
// "(inline secret)").
func credentialRefs(cat store.Catalog, name string) []any {
	for _, sp := range cat.Providers {
		if sp.Name != name {
			continue
		}
		var attrs []any
		for _, r := range []struct{ field, ref string }{{"api_key", sp.APIKeyRef}, {"access_key", sp.AccessKeyRef}, {"secret_key", sp.SecretKeyRef}} {
			if r.ref != "" {
				attrs = append(attrs, r.field, r.ref)
			}
		}
		return attrs
	}
	return nil
}

// nodeRender gives each Envoy node the gateway's resources: res, or for a node with its own
// public listener (tollway bootstrap --listen), the gateway translated with that listener.
func nodeRender(gw *ir.Gateway, res *translator.Resources) xds.Render {
	return func(n xds.Node) (*translator.Resources, error) {
		if n.Listen == "" {
			return res, nil
		}
		l, err := ir.ParseListen(n.Listen)
		if err != nil {
			return nil, fmt.Errorf("its listen metadata %q: %w", n.Listen, err)
		}
		own := *gw
		own.Listener.Address, own.Listener.Port = l.Address, l.Port
		return translator.Translate(&own)
	}
}

// KeysChanged recompiles the ext_proc runtime after a key was created, revoked, rotated or
// limited.
func (g *Gateway) KeysChanged() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	keys, err := g.store.Keys()
	if err != nil {
		return err
	}
	if g.lastIR == nil {
		return errors.New("gateway has no configuration yet")
	}
	g.ext.Swap(extproc.Compile(g.lastIR, keys))
	return nil
}

// Change runs write (a store change) and applies the result; if the result is invalid or Envoy
// rejects it, the write is undone so the store keeps matching what runs. It returns the
// delivery status once applied.
func (g *Gateway) Change(ctx context.Context, write func() error) (xds.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	before, err := g.store.Catalog()
	if err != nil {
		return xds.Status{}, err
	}
	if err := write(); err != nil {
		return xds.Status{}, err
	}
	if err := g.applyLocked(ctx); err != nil {
		if rerr := g.store.RestoreCatalog(before); rerr != nil {
			g.log.Error("could not undo a rejected change", "error", rerr)
		}
		return xds.Status{}, err
	}
	return g.xds.Status(), nil
}
