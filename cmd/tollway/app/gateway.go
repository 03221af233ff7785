package app

import (
	"context"
	"errors"
	"fmt"
	"github.com/tollway/tollway/envoy"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// ackWait bounds how long a configuration change waits for Envoy to accept it.
const ackWait = 10 * time.Second

// gateway ties the store to its two consumers: Envoy (through xDS) and ext_proc (through a
// compiled runtime). Every change goes store -> IR -> both, serialized by mu.
type gateway struct {
	log    *slog.Logger
	store  store.Store
	xds    *xds.Server
	ext    *extproc.Server
	ledger *billing.Ledger // nil when billing is off
	// settler writes usage records and holds; nil when billing is off.
	settler store.Recorder
	demo    *demoServer // the in-process demo model, started when a provider of type demo is applied

	// internal is Envoy's loopback listener for the gateway's own task requests.
	internal *ir.Listener
	// callbacks decides where task callbacks may go: its allow-list (callbacks.allow_private)
	// and the public listener follow each applied configuration.
	callbacks *tasks.Guard

	// health is Envoy's view of each provider (name -> healthy), as pollHealth last read it;
	// nil before the first reading. The console's provider list shows it.
	health atomic.Pointer[map[string]bool]
	// envoy is the Envoy process serving this gateway, once started (`tollway status`).
	envoy atomic.Pointer[envoy.Process]
	// supervisor restarts the child Envoy; nil until it runs.
	supervisor atomic.Pointer[envoy.Supervisor]
	// metrics serves GET /metrics and /metrics/envoy (admin_metrics.go); nil: metrics are off.
	metrics *metricsEndpoint
	// settlements resolves x402 settlements whose outcome was unknown (nil: billing is off,
	// so there are no paid endpoints).
	settlements *extproc.Settlements

	mu     sync.Mutex
	cfg    *Config
	lastIR *ir.Gateway
}

// adminListen checks listen.admin: a loopback address, or any address when admin.token (the
// reference as written, or TOLLWAY_ADMIN_TOKEN) protects the admin API and console there.
func adminListen(addr, tokenRef string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen.admin %q: want host:port, e.g. 127.0.0.1:9090", addr)
	}
	if loopbackHost(host) || tokenRef != "" {
		return nil
	}
	return fmt.Errorf("listen.admin %q is not a loopback address, and without a token the admin API and console would be open to anyone who reaches it: "+
		"set admin: {token: \"${TOLLWAY_ADMIN_TOKEN}\"} (with TOLLWAY_ADMIN_TOKEN=$(openssl rand -hex 32) in the gateway's environment), "+
		"or listen on 127.0.0.1 and reach it through an SSH tunnel to the same port", addr)
}

// loopbackHost reports whether a listen address's host is loopback only.
func loopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// applyConfig writes the config's providers and models to the store and applies the result.
func (g *gateway) applyConfig(ctx context.Context, c *Config) error {
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
	before, err := g.store.Catalog()
	if err != nil {
		return err
	}
	cat, err := c.catalog()
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
	if allow, err := c.callbackAllow(); err == nil && g.callbacks != nil { // Validate checked it
		g.callbacks.Allow.Set(allow)
		g.callbacks.Own.Set(ownPublic, listenAddrs(c.Listen.Public)...)
	}
	g.ext.SetPayments(g.payments(c))
	return nil
}

// payments compiles the x402: section for ext_proc (nil: no paid endpoints).
func (g *gateway) payments(c *Config) *extproc.Payments {
	if len(c.X402.Endpoints) == 0 {
		return nil
	}
	offers, err := c.X402.NewOffers()
	if err != nil { // Validate checked it
		g.log.Error("x402 endpoints not served", "error", err)
		return nil
	}
	for _, w := range c.X402.ShortWindows() {
		g.log.Warn("x402: a settlement whose answer times out cannot be asked again before its credential expires, so it would end unpaid even if it settled; raise max_timeout_seconds or lower facilitator_timeout", "option", w)
	}
	fac := x402.NewFacilitator(c.X402.FacilitatorURL)
	fac.Timeout = c.X402.FacilitatorTimeout
	go g.checkFacilitator(fac, offers)
	if g.settlements != nil {
		// Pending settlements are asked of the facilitator configured now; with no x402:
		// section they keep the last one.
		g.settlements.SetFacilitator(fac)
	}
	return &extproc.Payments{Offers: offers, Facilitator: fac, Credentials: g.store, Settlements: g.settlements}
}

// checkFacilitator warns when the facilitator cannot settle an option the endpoints offer
// (a wrong network, or an upto facilitatorAddress that is not its signer): clients would pay
// with credentials it refuses. A facilitator down now is no error: requests get 503 until it
// is back.
func (g *gateway) checkFacilitator(fac *x402.Facilitator, offers map[string]*x402.Offer) {
	sup, err := fac.Supported(context.Background()) // within x402.facilitator_timeout
	if err != nil {
		g.log.Warn("x402 facilitator not reachable now; paid requests get 503 facilitator_unavailable until it is", "facilitator", fac.URL, "error", err)
		return
	}
	for slug, o := range offers {
		offered, err := o.Requirements(decimal.New(1, -2)) // any quote: only scheme, network and extra matter
		if err != nil {
			continue
		}
		for i, r := range offered {
			if err := sup.Check(r); err != nil {
				g.log.Warn("x402 facilitator cannot settle an offered option", "endpoint", slug, "accept", i, "error", err)
			}
		}
	}
}

// apply rebuilds from the store (after an admin API change).
func (g *gateway) apply(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.applyLocked(ctx)
}

// applyLocked builds the IR, pushes it to Envoy and, once Envoy accepted it, swaps the ext_proc
// runtime, so ext_proc never routes to a cluster Envoy does not have yet. On rejection both keep
// the last good configuration.
func (g *gateway) applyLocked(ctx context.Context) error {
	cat, err := g.store.Catalog()
	if err != nil {
		return err
	}
	gw, err := catalog.Build(g.cfg.Listen.Public, cat, g.cfg.buildEnv(g.demo.addr))
	if err != nil {
		return err
	}
	gw.AttemptTimeout = g.cfg.Routing.AttemptTimeout
	gw.Limits = g.cfg.limits()
	gw.AccessLog = g.cfg.accessLog()
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

// keysChanged recompiles the ext_proc runtime after a key was created, revoked or rotated.
func (g *gateway) keysChanged() error {
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
