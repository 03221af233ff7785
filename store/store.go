package store

import (
	"context"
	"time"

	"github.com/shopspring/decimal"
)

// The interfaces below are what the gateway needs of durable state, one per concern; each
// consumer takes the smallest that covers what it uses. Store is all of them: what an
// implementation provides, and what storetest.Run proves. Every method is safe for concurrent
// use; a method that writes returns once what it wrote is durable (committed, fsynced), and
// fails with an error wrapping one of this package's sentinels, never an engine's own.

// CatalogStore holds the providers and models, and the routes, that the config file and the
// admin API write (the xDS and ext_proc configuration is compiled from them).
type CatalogStore interface {
	// Catalog reads every provider, model and route at one point in time, sorted.
	Catalog() (Catalog, error)
	// ReplaceConfig makes the config-owned records equal to c at once: records the file no
	// longer names are deleted, admin-owned ones are left alone unless the file names them. A
	// stored route keeps its creation time (and so its id).
	ReplaceConfig(c Catalog) error
	// RestoreCatalog puts every provider, model and route back exactly as c has them (undoing
	// a change the gateway rejected).
	RestoreCatalog(c Catalog) error
	PutProvider(p Provider) error
	DeleteProvider(name string) error // ErrNotFound if absent
	PutModel(m Model) error
	DeleteModel(id string) error // ErrNotFound if absent
}

// Routes are the model routes, which the admin API also lists, writes and pauses on their own.
type Routes interface {
	Routes() ([]Route, error) // sorted by id
	// PutRoute creates or replaces a route; an existing route keeps its creation time.
	PutRoute(r Route) error
	// SetRouteStatus pauses or resumes a route (ErrNotFound if absent).
	SetRouteStatus(id, status string) (Route, error)
	// ChangeRouteRateLimits changes the rates c names of a route inside the store's own
	// transaction, so a concurrent change of another rate, by any replica, is kept (ErrNotFound
	// if absent, ErrInvalid for a rate out of range).
	ChangeRouteRateLimits(id string, c RatesChange) (Route, error)
}

// Keys are the API keys, stored by the hash of their secret.
type Keys interface {
	GetKey(id string) (Key, error) // ErrNotFound if absent
	Keys() ([]Key, error)          // oldest first
	// PutKey stores a key record as it is (a copy of another store's, say).
	PutKey(k Key) error
	// CreateKey makes a key for an existing account (else ErrNotFound, saying how to create
	// it) and returns its record and its secret, which is shown once and never stored.
	CreateKey(account string, opts KeyOptions) (Key, string, error)
	RevokeKey(id string) (Key, error)
	// RotateKey replaces a key's secret (ErrInvalid once revoked); the old one stops working.
	RotateKey(id string) (Key, string, error)
	// ChangeKeyLimits changes the limits c names at once, so a change of one never undoes a
	// concurrent change of another (ErrInvalid once revoked).
	ChangeKeyLimits(id string, c KeyLimitsChange) (Key, error)
	// SetKeysUsed records when keys were last used (key id -> time, to the second): a time
	// older than the stored one and an unknown id are ignored.
	SetKeysUsed(used map[string]time.Time) error
}

// Accounts are the prepaid balances keys draw on.
type Accounts interface {
	// CreateAccount creates an account holding credits (ErrExists, ErrInvalid).
	CreateAccount(id string, credits decimal.Decimal) (Account, error)
	// CreditAccount adds a positive amount to a balance.
	CreditAccount(id string, amount decimal.Decimal) (Account, error)
	GetAccount(id string) (Account, error) // ErrNotFound if absent
	Accounts() ([]Account, error)          // sorted by id
}

// Ledger settles served requests: each usage record once per request id, with its account's
// debit, its key's month spend and its aggregates, at once.
type Ledger interface {
	// SettleBatch settles recs and returns one error per record (nil: settled now or before).
	// A record wrong in itself (ErrInvalid, an unknown account: ErrNotFound) writes nothing
	// and does not stop the others. No settlement takes a balance below zero or a key past its
	// monthly limit: what they cannot take is kept as the record's Overage (CapDebit). A paid
	// record (Payment set) debits nothing.
	SettleBatch(recs []UsageRecord) []error
	// SettleHolds bills every hold a Recorder left that never settled (the gateway stopped
	// first) as an estimated record with EstimateReason reason, and reports how many; a hold
	// whose record cannot be stored is dropped and its failure returned.
	SettleHolds(reason string) (settled int, failed []error, err error)
	// OpenHolds is the number of holds written and not settled or ended yet.
	OpenHolds() (int, error)
	// MonthSpend is each key's spend in month ("2006-01", UTC): key id -> cost.
	MonthSpend(month string) (map[string]decimal.Decimal, error)
}

// Usage reads the usage records and their aggregates.
type Usage interface {
	// Usage sums the daily aggregates f selects, rows sorted by day, account, key, model.
	Usage(f UsageFilter) (UsageSummary, error)
	// UsageRecords returns the records f selects, newest first, at most limit (<= 0: all).
	UsageRecords(f UsageFilter, limit int) ([]UsageRecord, error)
	// UsageByRecords sums the records f (and route, when not "") selects per day, route, key,
	// account and model.
	UsageByRecords(f UsageFilter, route string) ([]RecordRow, error)
	// RouteUsage is each route's usage since it was first used, by model.
	RouteUsage() (map[string][]UsageRow, error)
	// KeysLastUsed is when each key last settled a request, exact from the newest scanLimit
	// records, else to the day.
	KeysLastUsed(scanLimit int) (map[string]LastUsed, error)
}

// Tasks are the media tasks (videos, images).
type Tasks interface {
	// PutTaskChange records a new task (ErrExists if its id is taken) with what ch writes
	// beside it, at once; errors as UpdateTask's.
	PutTaskChange(t *Task, ch TaskChange) error
	// GetTask reads a task with the images still kept (ErrTaskNotFound).
	GetTask(id string) (*Task, error)
	// UpdateTask changes a task with fn and writes what fn returns beside it, at once; fn may
	// run again and must only change t. A usage record wrong in itself does not hold back the
	// task: it commits and the error wraps ErrUsageNotSettled.
	UpdateTask(id string, fn func(t *Task) (TaskChange, error)) (*Task, error)
	// OpenTasks lists up to limit unfinished tasks in id order, after the id after.
	OpenTasks(limit int, after string) ([]Task, error)
	TaskLeases
}

// Callbacks are the outbox of task callbacks (written by Tasks with the change they announce).
type Callbacks interface {
	// ScanDueCallbacks reads the callbacks due at now, the longest waiting first, at most scan
	// of them: those skip(id) passes over are not decoded; the others go to take until it
	// returns false.
	ScanDueCallbacks(now time.Time, scan int, skip func(id string) bool, take func(Callback) bool) error
	CallbackLeases
	// AckCallback removes a delivered (or given up) callback.
	AckCallback(c Callback) error
	// RetryCallback puts a callback back for its next attempt (Attempt + 1) at next.
	RetryCallback(c Callback, next time.Time) error
	// CallbackSecret is the account's callback signing secret, made on first use.
	CallbackSecret(account string) (string, error)
}

// Payments are the x402 settlements whose outcome was unknown when their result went out.
type Payments interface {
	// AddPendingPayment keeps p until ResolvePayment (its record is settled separately).
	AddPendingPayment(p PendingPayment) error
	// PendingPayments lists those not resolved; a damaged entry is left out and reported in
	// the error (ErrInvalid) with the others listed.
	PendingPayments() ([]PendingPayment, error)
	// ResolvePayment ends the pending settlement of record requestID: its payment takes r's
	// status, its aggregates move the amount from pending, the entry goes, at once.
	// ErrNotFound when the record is not stored yet; a record already resolved is kept.
	ResolvePayment(requestID string, r PaymentResolution) error
}

// Credentials are x402's single-use payment credentials (their nonces).
type Credentials interface {
	// ClaimCredential records key as used until until, and fails with an error wrapping
	// ErrExists when it already is: of any number of concurrent claims, one wins.
	ClaimCredential(key string, until time.Time) error
}

// Pruner deletes what is past its retention, up to limit items a call (fewer: none is left).
type Pruner interface {
	PruneUsage(before time.Time, limit int) (PruneResult, error)       // records older than before
	PruneTasks(before time.Time, limit int) (PruneResult, error)       // tasks finished before before
	PruneImages(before time.Time, limit int) (PruneResult, error)      // images expired before before
	PruneCredentials(before time.Time, limit int) (PruneResult, error) // claims kept until before
}

// Health says whether what the gateway writes can be made durable now; request paths read it
// on every request, so it must cost no store round trip.
type Health interface {
	// Unavailable is the current outage as an error, nil while records can be made durable.
	Unavailable() error
	Outage() *Outage // nil while healthy
	// ReserveState is "held", "released" (spent on what was answered when the disk filled)
	// or "none" (no reserve is kept).
	ReserveState() string
}

// Changes tells of committed changes to the records every gateway sharing the store must follow:
// the catalog, keys and accounts.
type Changes interface {
	// Subscribe delivers, in commit order, each change committed after it returns, by any
	// process sharing the store, until ctx ends (then the channel closes). A subscriber that
	// falls behind gets one Change per topic without an ID: re-read that topic.
	Subscribe(ctx context.Context) <-chan Change
}

// Store is every concern at once: what an implementation provides.
type Store interface {
	CatalogStore
	Routes
	Keys
	Accounts
	Ledger
	Usage
	Tasks
	Callbacks
	Payments
	Credentials
	Pruner
	Health
	Changes
	Replicas
	// Close releases the store; nothing may be called after it.
	Close() error
}
