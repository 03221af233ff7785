package server

// Rate limits shared by replicas on one store (store.RateShares; docs/money.md#rate-limits):
// ext_proc's limiter holds this replica's share of each limited owner's rates, renewed every
// ratelimit.RenewEvery.

import (
	"context"
	"time"

	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/store"
)

// rateSharer is ratelimit.Sharer over the store's rate shares, as this replica.
type rateSharer struct {
	st   store.RateShares
	name string
}

func (r rateSharer) ShareRates(wants map[string]int64, now, expires time.Time) (map[string]int64, error) {
	return r.st.ShareRates(r.name, wants, now, expires)
}

// shareRates makes ext_proc's rate limits shares of the whole when the store is shared by
// replicas; it reports whether it does.
func (p *process) shareRates() bool {
	rs, ok := p.st.(store.RateShares)
	if ok {
		p.ext.ShareRates(rateSharer{st: rs, name: p.replica.me.Name})
	}
	return ok
}

// runRateShares renews this replica's shares of the rate limits until ctx ends (nothing
// without shared rates).
func (p *process) runRateShares(ctx context.Context) {
	if !p.sharedRates {
		return
	}
	t := time.NewTicker(ratelimit.RenewEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.ext.RenewRates()
		}
	}
}
