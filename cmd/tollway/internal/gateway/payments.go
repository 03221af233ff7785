package gateway

// The x402: section as ext_proc takes it, and the facilitator's client: one kept for as long
// as the configured facilitator stays, and its configuration checked against the facilitator
// after each apply, one check at a time.

import (
	"context"
	"log/slog"
	"sync"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/extproc/x402/paid"
)

// payments compiles the x402: section for ext_proc (nil: no paid endpoints).
func (g *Gateway) payments(c *config.Config) *paid.Payments {
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
	fac := g.facilitator(c.X402)
	g.checks.request(check{fac: fac, offers: offers, log: g.log})
	if g.settlements != nil {
		// Pending settlements are asked of the facilitator configured now; with no x402:
		// section they keep the last one.
		g.settlements.SetFacilitator(fac)
	}
	return &paid.Payments{Offers: offers, Facilitator: fac, Credentials: g.store, Settlements: g.settlements}
}

// facilitator is the client of the configured x402 facilitator: the one in use while the
// facilitator's URL and timeout stay, so an apply builds no second HTTP transport; a replaced
// one has its idle connections closed (calls in flight finish on it). Called with mu held.
func (g *Gateway) facilitator(c x402.Config) *x402.Facilitator {
	if g.fac != nil && g.facURL == c.FacilitatorURL && g.fac.Timeout == c.FacilitatorTimeout {
		return g.fac
	}
	if g.fac != nil {
		g.fac.HTTP.CloseIdleConnections()
	}
	g.fac, g.facURL = x402.NewFacilitator(c.FacilitatorURL), c.FacilitatorURL
	g.fac.Timeout = c.FacilitatorTimeout
	return g.fac
}

// check is one check of the facilitator against the offers of an applied configuration.
type check struct {
	fac    *x402.Facilitator
	offers map[string]*x402.Offer
	log    *slog.Logger
}

// run warns when the facilitator cannot settle an option the endpoints offer (a wrong
// network, or an upto facilitatorAddress that is not its signer): clients would pay with
// credentials it refuses. A facilitator down now is no error: requests get 503 until it
// is back.
func (c check) run(ctx context.Context) {
	fac, offers := c.fac, c.offers
	sup, err := fac.Supported(ctx) // within x402.facilitator_timeout; ctx ends with Close
	if ctx.Err() != nil {
		return // the gateway stops: nothing to warn about
	}
	if err != nil {
		c.log.Warn("x402 facilitator not reachable now; paid requests get 503 facilitator_unavailable until it is", "facilitator", fac.URL, "error", err)
		return
	}
	for slug, o := range offers {
		offered, err := o.Requirements(decimal.New(1, -2)) // any quote: only scheme, network and extra matter
		if err != nil {
			continue
		}
		for i, r := range offered {
			if err := sup.Check(r); err != nil {
				c.log.Warn("x402 facilitator cannot settle an offered option", "endpoint", slug, "accept", i, "error", err)
			}
		}
	}
}

// checks run the checks one at a time on one goroutine: a check asked for while one runs
// replaces any still waiting (only the configuration applied last matters), so a burst of
// reloads makes neither a goroutine nor a connection per reload.
type checks struct {
	ctx    context.Context // ends with stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	next   *check
	active bool // a goroutine runs checks
}

func (cs *checks) request(c check) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.next = &c
	if !cs.active {
		cs.active = true
		cs.wg.Go(cs.runAll)
	}
}

func (cs *checks) runAll() {
	for {
		cs.mu.Lock()
		c := cs.next
		cs.next = nil
		if c == nil || cs.ctx.Err() != nil {
			cs.active = false
			cs.mu.Unlock()
			return
		}
		cs.mu.Unlock()
		c.run(cs.ctx)
	}
}

// stop ends the check under way and drops the one waiting.
func (cs *checks) stop() {
	cs.cancel()
	cs.wg.Wait()
}
