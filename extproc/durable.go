package extproc

// Durability at the edge: new billable work is refused while the store cannot make records
// durable (fail closed), and an admitted request's hold is made durable with the settler's
// next batch, a long stream's progress checkpointed as it goes, so that a gateway stopped by a
// crash leaves every request it served with a record at its next start (store/holds.go).

import (
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// checkpointEvery is the least time between two checkpoints of one stream's progress.
const checkpointEvery = time.Second

// SetStoreCheck makes the server refuse billable requests, task creates and paid requests
// while check reports the store's outage (nil: healthy). It is called on each of them, so it
// must be as cheap as an atomic load (store.Health.Unavailable).
func (s *Server) SetStoreCheck(check func() error) { s.storeCheck.Store(&check) }

// storeRefusal is the answer to new billable work while the store cannot record it; nil while
// it can.
func (s *Server) storeRefusal() *core.APIError {
	check := s.storeCheck.Load()
	if check == nil {
		return nil
	}
	err := (*check)()
	if err == nil {
		return nil
	}
	e := core.Errorf(http.StatusServiceUnavailable, "store_unavailable",
		"%v, so it refuses requests it would bill, task creates and paid requests until its operator fixes that; nothing was charged; retry later", err)
	e.Headers = map[string]string{"retry-after": "10"}
	return e
}

// holdDurable queues the request's hold for the settler's next batch: the record a restart
// bills if the request never settles, its prompt at the bound the hold was sized with until a
// checkpoint counts it. A request that settles before that batch is written leaves no row.
func (x *exchange) holdDurable() {
	b := x.s.billing
	if b.Hold == nil {
		return
	}
	now := b.Now()
	x.checkpointed = now
	u := ir.Usage{PromptTokens: min(x.promptEstimate, store.MaxTokens)}
	m := x.plan.model // priced by the writer, for the few holds it writes
	b.Hold(x.usageRecord(u, decimal.Zero, true, now), func() decimal.Decimal { return m.Pricing.Cost(u) })
}

// checkpoint records how far a streaming answer has come, at most every checkpointEvery: its
// prompt counted and the completion passed so far (or the provider's usage, once sent), what
// a restart bills if the stream is cut with the gateway.
func (x *exchange) checkpoint() {
	b := x.s.billing
	if x.hold == nil || b.Hold == nil {
		return
	}
	now := b.Now()
	if now.Sub(x.checkpointed) < checkpointEvery {
		return
	}
	x.checkpointed = now
	u := storable(x.meter.progress(x.promptTokens))
	b.Hold(x.usageRecord(u, x.plan.model.Pricing.Cost(u), true, now), nil)
}

// endHold drops the durable hold of a request released unbilled.
func (x *exchange) endHold() {
	if end := x.s.billing.End; end != nil {
		end(x.billingID())
	}
}

// usageRecord is the request's usage record for u at cost.
func (x *exchange) usageRecord(u ir.Usage, cost decimal.Decimal, estimated bool, at time.Time) store.UsageRecord {
	rec := store.UsageRecord{
		RequestID: x.billingID(), KeyID: x.key.ID, Account: x.key.Account, Model: x.plan.model.ID,
		Provider: x.provider, Route: x.plan.routeID(), PromptTokens: u.PromptTokens,
		CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens, Cost: cost, Estimated: estimated,
	}
	if !at.IsZero() {
		rec.Time = at.UTC()
	}
	return rec
}
