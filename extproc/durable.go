package extproc

// Durability at the edge: new billable work is refused while the store cannot make records
// durable (fail closed); a long stream's progress is checkpointed on its hold (billing.Hold,
// which makes holds durable), with the request's usage record.

import (
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

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

// checkpoint records how far a streaming answer has come (billing.Hold.Progress): its prompt
// counted and the completion passed so far (or the provider's usage, once sent), what a restart
// bills if the stream is cut with the gateway.
func (x *exchange) checkpoint() {
	x.hold.Progress(func(at time.Time) store.UsageRecord {
		u := storable(x.meter.progress(x.promptTokens))
		return x.usageRecord(u, x.plan.model.Pricing.Cost(u), true, at)
	})
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
