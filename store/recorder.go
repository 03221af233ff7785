package store

import (
	"time"

	"github.com/shopspring/decimal"
)

// Recorder makes usage records durable off the request path: the gateway's in-memory ledger is
// debited when a record is handed over, so limits hold at once, and the Recorder writes it
// within a short window (how, group commit or a spool, is the implementation's). None of its
// methods fails: a record that cannot be stored is reported through SettlerHooks.NotStored, and
// a store that cannot commit anything holds records (Record then waits), never drops them.
type Recorder interface {
	// Record queues rec to be settled (Ledger.SettleBatch's rules); it ends the hold of the
	// same request id, if any.
	Record(rec UsageRecord)
	// Hold queues the hold of an admitted request, or its progress: rec is the record a restart
	// bills if the request never settles (Ledger.SettleHolds). It is written unless the request
	// settles or ends first. price, when not nil, is rec's cost, asked for only if the hold is
	// written.
	Hold(rec UsageRecord, price func() decimal.Decimal)
	// End queues the end of the hold of a request released unbilled.
	End(requestID string)
	// Queued is the number of changes waiting to be written.
	Queued() int
	// Stats reports what the Recorder has done.
	Stats() SettlerStats
	// Close writes everything queued, then stops; nothing may be queued after it.
	Close()
}

// SettlerHooks tell the gateway what it must log loudly. Either may be nil.
type SettlerHooks struct {
	// NotStored is called for each record that could not be stored: the caller's books and the
	// store's then disagree.
	NotStored func(UsageRecord, error)
	// Stalled is called each time the store cannot commit anything: the writer holds its
	// records and tries again after retryIn; queued records wait (then Record blocks), none is
	// dropped.
	Stalled func(err error, queued int, retryIn time.Duration)
}

// SettlerStats count what a Recorder has done: records done with (stored, already stored or
// reported as failed) and the transactions that carried them (retries included).
type SettlerStats struct {
	Records int64 `json:"records"`
	Commits int64 `json:"commits"`
}
