package billing

// A request's hold from admission to its end: taken against the Ledger, made durable with the
// settler's next batch, a long stream's progress checkpointed as it goes, then settled (billed,
// its record handed over) or released (unbilled), exactly once. A gateway stopped by a crash
// thus leaves every request it served with a record at its next start (store/holds.go).

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
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

// Hold is one admitted request's hold. Its methods are called from the request's own stream.
type Hold struct {
	b            *Books
	res          *Reservation
	id           string    // the usage record's request id
	checkpointed time.Time // the last durable progress
}

// Admit holds worst for key keyID of account (limited to limit a month) in one atomic step
// against both the account's credits and the key's limit; the error is the Ledger's refusal.
// The hold is then queued durable: draft(at) is the record a restart bills, id its request
// id, priced by price when it is written.
func (b *Books) Admit(account, keyID string, limit *decimal.Decimal, worst decimal.Decimal, id string,
	draft func(at time.Time) store.UsageRecord, price func() decimal.Decimal) (*Hold, error) {
	res, err := b.Ledger.Reserve(account, keyID, limit, worst, b.Now())
	if err != nil {
		return nil, err
	}
	h := &Hold{b: b, res: res, id: id}
	if b.Hold != nil {
		now := b.Now()
		h.checkpointed = now
		b.Hold(draft(now), price)
	}
	return h, nil
}

// Amount is what the hold holds.
func (h *Hold) Amount() decimal.Decimal { return h.res.Amount() }

// Progress records how far a streaming answer has come, at most every CheckpointEvery: rec(at)
// is what a restart bills if the stream is cut with the gateway (asked for only when due).
func (h *Hold) Progress(rec func(at time.Time) store.UsageRecord) {
	if h == nil || h.b.Hold == nil {
		return
	}
	now := h.b.Now()
	if now.Sub(h.checkpointed) < CheckpointEvery {
		return
	}
	h.checkpointed = now
	h.b.Hold(rec(now), nil)
}

// Settle bills the request metered, at most its hold, and hands rec(cost, at) over as its usage
// record, with what was metered beyond the hold as its overage. It returns the cost billed.
func (h *Hold) Settle(metered decimal.Decimal, rec func(cost decimal.Decimal, at time.Time) store.UsageRecord) decimal.Decimal {
	cost := h.b.Ledger.Settle(h.res, metered)
	r := rec(cost, h.b.Now())
	r.Overage = metered.Sub(cost)
	h.b.Record(r)
	return cost
}

// Release drops the hold unbilled (the request was refused or its provider failed), and its
// durable record.
func (h *Hold) Release() {
	h.b.Ledger.Release(h.res)
	if h.b.End != nil {
		h.b.End(h.id)
	}
}
