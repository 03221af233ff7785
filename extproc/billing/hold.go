package billing

// A request's hold from admission to its end: taken against the Ledger, made durable with the
// settler's next batch, a long stream's progress checkpointed as it goes, then settled (billed,
// its record handed over) or released (unbilled), exactly once. A gateway stopped by a crash
// thus leaves every request it served with a record at its next start (store/holds.go).

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Books is the money path: the Ledger holds are taken against, and where settled requests and
// durable holds go. The server is given one (extproc.Billing); nil turns billing off.
type Books struct {
	Ledger *Ledger
	// Record hands a settled request to durable storage; it must not block for long. It ends
	// the request's durable hold.
	Record func(store.UsageRecord)
	// Hold makes an admitted request's hold durable with the next batch: the record a restart
	// bills if the request never settles, its cost from price when price is not nil (asked for
	// only if the hold is written); a later Hold of the same request id is its progress. End
	// drops the hold of a request released unbilled. Nil: holds are not recorded.
	Hold func(rec store.UsageRecord, price func() decimal.Decimal)
	End  func(requestID string)
	Now  func() time.Time
}

// CheckpointEvery is the least time between two checkpoints of one stream's progress.
const CheckpointEvery = time.Second

// Owner is whom a hold bills: the account and key it is taken against (the key limited to
// Limit a month; nil: no limit), and the fixed fields of the request's usage record.
type Owner struct {
	Account, KeyID string
	Limit          *decimal.Decimal
	RequestID      string // the usage record's id
	Route          string // the route asked for ("" : a model asked for directly)
}

// Metered is what a request used as its usage record says it: the fields that change as the
// answer comes (the model and provider that answered, the tokens, the cost).
type Metered struct {
	Model, Provider string
	Usage           ir.Usage
	Cost            decimal.Decimal
	Estimated       bool
}

// Record is o's usage record of m at time at (zero: left for the writer to set).
func (o Owner) Record(m Metered, at time.Time) store.UsageRecord {
	rec := store.UsageRecord{
		RequestID: o.RequestID, KeyID: o.KeyID, Account: o.Account, Model: m.Model,
		Provider: m.Provider, Route: o.Route, PromptTokens: m.Usage.PromptTokens,
		CompletionTokens: m.Usage.CompletionTokens, CachedTokens: m.Usage.CachedTokens, Cost: m.Cost, Estimated: m.Estimated,
	}
	if !at.IsZero() {
		rec.Time = at.UTC()
	}
	return rec
}

// Hold is one admitted request's hold. Its methods are called from the request's own stream.
type Hold struct {
	b            *Books
	res          *Reservation
	o            Owner
	durable      bool      // admitted (Admit): its release ends the durable record
	checkpointed time.Time // the last durable progress
}

// Reserve holds worst for o in one atomic step against both the account's credits and the
// key's limit; the error is the Ledger's refusal. The hold is kept in memory only: a media
// task's durable record is the task itself.
func (b *Books) Reserve(o Owner, worst decimal.Decimal) (*Hold, error) {
	res, err := b.Ledger.Reserve(o.Account, o.KeyID, o.Limit, worst, b.Now())
	if err != nil {
		return nil, err
	}
	return &Hold{b: b, res: res, o: o}, nil
}

// Admit is Reserve for a request whose hold is then queued durable: first is the record a
// restart bills (its cost priced at pricing when the hold is written).
func (b *Books) Admit(o Owner, worst decimal.Decimal, first Metered, pricing ir.Pricing) (*Hold, error) {
	h, err := b.Reserve(o, worst)
	if err != nil {
		return nil, err
	}
	h.durable = true
	if b.Hold != nil {
		now := b.Now()
		h.checkpointed = now
		b.Hold(o.Record(first, now), func() decimal.Decimal { return pricing.Cost(first.Usage) })
	}
	return h, nil
}

// Amount is what the hold holds.
func (h *Hold) Amount() decimal.Decimal { return h.res.Amount() }

// Due reports whether a streaming answer's progress is due for a checkpoint: at most every
// CheckpointEvery, and never for a hold that is not recorded.
func (h *Hold) Due() bool {
	return h != nil && h.durable && h.b.Hold != nil && h.b.Now().Sub(h.checkpointed) >= CheckpointEvery
}

// Progress records how far a streaming answer has come (m: what a restart bills if the stream
// is cut with the gateway); the caller asks Due first.
func (h *Hold) Progress(m Metered) {
	now := h.b.Now()
	h.checkpointed = now
	h.b.Hold(h.o.Record(m, now), nil)
}

// Settle bills the request metered (m.Cost), at most its hold, and hands its usage record
// over, with what was metered beyond the hold as its overage. It returns the cost billed.
func (h *Hold) Settle(m Metered) decimal.Decimal {
	metered := m.Cost
	m.Cost = h.b.Ledger.Settle(h.res, metered)
	r := h.o.Record(m, h.b.Now())
	r.Overage = metered.Sub(m.Cost)
	h.b.Record(r)
	return m.Cost
}

// Charge bills a hold kept in memory only (Reserve) at cost, at most its hold: a media
// task's usage record was settled with its completion in the store.
func (h *Hold) Charge(cost decimal.Decimal) { h.b.Ledger.Settle(h.res, cost) }

// Release drops the hold unbilled (the request was refused or its provider failed), and its
// durable record.
func (h *Hold) Release() {
	h.b.Ledger.Release(h.res)
	if h.durable && h.b.End != nil {
		h.b.End(h.o.RequestID)
	}
}
