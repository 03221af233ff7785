// Package billing holds worst-case costs against account balances and per-key monthly spend
// limits (the Ledger) for each request from its admission to its bill (Books, Hold), and counts
// tokens for the estimates those holds and estimated bills need.
// Prices and the cost of a request under them belong to the catalog (xds/ir Pricing).
package billing

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// This file owns the ledger and its holds: the Ledger's reservations against balances and
// monthly limits, settled or released, and a request's Hold on it from admission to its end
// (Books, at the end of the file).

var (
	// ErrInsufficientCredits: the account's balance, less what in-flight requests hold, does not
	// cover the request's worst case (or the account does not exist).
	ErrInsufficientCredits = errors.New("insufficient credits")
	// ErrSpendLimit: the key's monthly spend limit would be exceeded by this request's worst case
	// on top of what the key spent this month and what its in-flight requests hold.
	ErrSpendLimit = errors.New("monthly spend limit reached")
)

const monthLayout = "2006-01"

// Ledger is the in-memory view that admission decisions are made against: account balances, each
// key's settled spend per calendar month (UTC), and the holds of requests still in flight.
//
// Concurrent requests cannot outrun a limit because every request first reserves its worst-case
// cost, and the check and the hold happen under one lock: a hold counts against the balance and
// the limit until it is settled or released. One mutex suffices: each call is a few map
// operations.
type Ledger struct {
	mu          sync.Mutex
	balances    map[string]decimal.Decimal   // account -> balance
	accountHeld map[string]decimal.Decimal   // account -> sum of outstanding holds
	spent       map[keyMonth]decimal.Decimal // settled spend
	keyHeld     map[keyMonth]decimal.Decimal // sum of outstanding holds
	month       string                       // latest month seen, for pruning
	obs         Observer                     // nil: nobody listens
	// With a budget (slices.go) balances are this replica's slices of the accounts' balances,
	// keySlice its slices of the keys' monthly limits, used when each slice was last used.
	budget   Budget
	keySlice map[keyMonth]decimal.Decimal
	used     map[store.BudgetRef]time.Time
}

// Observer hears of holds taken, refused and ended (metrics). Its methods are called after the
// ledger's lock is released and must be quick.
type Observer interface {
	// Held follows a Reserve: err is nil when the hold was taken, else why it was refused.
	Held(err error)
	// Ended follows the end of a hold: settled (billed), or released unbilled.
	Ended(settled bool)
}

// SetObserver makes o hear of every hold from now on; call it before the ledger is shared.
func (l *Ledger) SetObserver(o Observer) { l.obs = o }

type keyMonth struct{ key, month string }

// Reservation is a hold on an account's balance and a key's monthly limit for one request.
type Reservation struct {
	account, keyID, month string
	amount                decimal.Decimal
	limit                 *decimal.Decimal // the key's monthly limit when it was taken
	done                  bool             // guarded by the ledger's mutex
	sliced                bool             // held against budget slices (slices.go)
}

func (r *Reservation) Account() string         { return r.account }
func (r *Reservation) KeyID() string           { return r.keyID }
func (r *Reservation) Amount() decimal.Decimal { return r.amount }

// Month is the UTC calendar month ("2026-11") the reservation was made in; it settles into it.
func (r *Reservation) Month() string { return r.month }

// NewLedger starts from balances per account and the spend per key so far in month ("2026-11",
// UTC), as read from the store. It panics on a malformed month: spend filed under a month that
// never matches would silently lift every key's limit.
func NewLedger(balances, monthSpend map[string]decimal.Decimal, month string) *Ledger {
	if _, err := time.Parse(monthLayout, month); err != nil {
		panic(fmt.Sprintf("billing.NewLedger: month %q is not YYYY-MM", month))
	}
	l := &Ledger{
		balances:    make(map[string]decimal.Decimal, len(balances)),
		accountHeld: make(map[string]decimal.Decimal),
		spent:       make(map[keyMonth]decimal.Decimal, len(monthSpend)),
		keyHeld:     make(map[keyMonth]decimal.Decimal),
		month:       month,
	}
	for a, b := range balances {
		l.balances[a] = b
	}
	for k, s := range monthSpend {
		l.spent[keyMonth{k, month}] = s
	}
	return l
}

func monthOf(t time.Time) string { return t.UTC().Format(monthLayout) }

// Reserve holds amount (the request's worst-case cost) if the account's available balance covers
// it and, when monthlyLimit is set, the key's month spend plus its holds plus amount stays within
// the limit. Both checks and the hold are one atomic step.
//
// A free request (amount 0) always passes, even on an exhausted balance or limit: it cannot spend
// anything, so refusing it would only deny free service. The account must still exist.
func (l *Ledger) Reserve(account, keyID string, monthlyLimit *decimal.Decimal, amount decimal.Decimal, now time.Time) (*Reservation, error) {
	r, err := l.reserve(account, keyID, monthlyLimit, amount, now)
	if l.obs != nil {
		l.obs.Held(err)
	}
	return r, err
}

func (l *Ledger) reserve(account, keyID string, monthlyLimit *decimal.Decimal, amount decimal.Decimal, now time.Time) (*Reservation, error) {
	if amount.IsNegative() {
		return nil, fmt.Errorf("billing: reservation amount %s is negative", amount)
	}
	if l.budget != nil {
		return l.reserveSliced(account, keyID, monthlyLimit, amount, now)
	}
	month := monthOf(now)
	km := keyMonth{keyID, month}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollover(month)
	balance, ok := l.balances[account]
	if !ok {
		return nil, fmt.Errorf("%w: account %q does not exist", ErrInsufficientCredits, account)
	}
	if !amount.IsZero() {
		if available := balance.Sub(l.accountHeld[account]); available.LessThan(amount) {
			return nil, fmt.Errorf("%w: the request may cost up to $%s and $%s is available", ErrInsufficientCredits, amount, available)
		}
		if monthlyLimit != nil {
			used := l.spent[km].Add(l.keyHeld[km])
			if used.Add(amount).GreaterThan(*monthlyLimit) {
				return nil, fmt.Errorf("%w: the request may cost up to $%s; this key has used $%s of its $%s limit for %s",
					ErrSpendLimit, amount, used, *monthlyLimit, month)
			}
		}
		l.accountHeld[account] = l.accountHeld[account].Add(amount)
		l.keyHeld[km] = l.keyHeld[km].Add(amount)
	}
	r := &Reservation{account: account, keyID: keyID, month: month, amount: amount}
	if monthlyLimit != nil {
		lim := *monthlyLimit
		r.limit = &lim
	}
	return r, nil
}

// Cap is the bill of a request whose metered cost is metered and whose hold (the worst case
// computed at admission) is hold: no settlement exceeds its hold. overage is what the provider
// reported beyond it, kept for the operator to take up with the provider. A negative metered
// cost bills 0: a bug can never credit money.
func Cap(metered, hold decimal.Decimal) (bill, overage decimal.Decimal) {
	metered = decimal.Max(metered, decimal.Zero)
	bill = decimal.Min(metered, decimal.Max(hold, decimal.Zero))
	return bill, metered.Sub(bill)
}

// WarnOverage logs a bill capped at its hold (overage > 0): the provider reported more than the
// request's worst case, and the operator takes the difference up with it. requestID is cut
// short by the caller (a client chooses it).
func WarnOverage(log *slog.Logger, provider, model, requestID string, metered, held decimal.Decimal) {
	log.Warn("OVERAGE: the provider reported more than the request's worst case; billed the hold (take the difference up with the provider)",
		"provider", provider, "model", model, "request_id", requestID, "metered", metered.String(), "held", held.String(),
		"overage", metered.Sub(held).String())
}

// Settle ends a reservation with the request's metered cost and returns what it billed: the
// hold is released, and the bill is debited from the balance and added to the key's spend for
// the reservation's month. The bill is actual capped at the hold (Cap), and never more than
// leaves the balance at zero or the key at the monthly limit it was held under (which only a
// change of the books since the hold can make smaller): balances never go negative and keys
// never pass their limits through a provider's report. A second Settle or Release of the same
// reservation does nothing and returns 0.
func (l *Ledger) Settle(r *Reservation, actual decimal.Decimal) (bill decimal.Decimal) {
	l.mu.Lock()
	ended := l.unhold(r)
	if ended && r.sliced {
		bill, _ = Cap(actual, r.amount)
		l.settleSliced(r, bill)
	} else if ended {
		km := keyMonth{r.keyID, r.month}
		bill, _ = Cap(actual, r.amount)
		bill = decimal.Min(bill, decimal.Max(l.balances[r.account], decimal.Zero))
		if r.limit != nil {
			bill = decimal.Min(bill, decimal.Max(r.limit.Sub(l.spent[km]), decimal.Zero))
		}
		if !bill.IsZero() {
			l.balances[r.account] = l.balances[r.account].Sub(bill)
			l.spent[km] = l.spent[km].Add(bill)
		}
	}
	l.mu.Unlock()
	if ended && l.obs != nil {
		l.obs.Ended(true)
	}
	return bill
}

// Release ends a reservation that cost nothing (the request failed): the hold goes, nothing is
// debited. Idempotent, and a no-op after Settle.
func (l *Ledger) Release(r *Reservation) {
	l.mu.Lock()
	ended := l.unhold(r)
	l.mu.Unlock()
	if ended && l.obs != nil {
		l.obs.Ended(false)
	}
}

// unhold removes r's hold once; it reports false when r was already settled or released.
func (l *Ledger) unhold(r *Reservation) bool {
	if r == nil || r.done {
		return false
	}
	r.done = true
	if r.amount.IsZero() {
		return true
	}
	subOrDelete(l.accountHeld, r.account, r.amount)
	subOrDelete(l.keyHeld, keyMonth{r.keyID, r.month}, r.amount)
	return true
}

// subOrDelete drops zeroed entries so the hold maps only hold what is in flight.
func subOrDelete[K comparable](m map[K]decimal.Decimal, k K, amount decimal.Decimal) {
	if v := m[k].Sub(amount); v.IsZero() {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// rollover forgets settled spend older than the previous month when a new month is first seen, so
// a long-running process does not keep every month forever. The previous month stays for requests
// that started before midnight and settle after it.
func (l *Ledger) rollover(month string) {
	if month <= l.month {
		return
	}
	l.month = month
	t, _ := time.Parse(monthLayout, month)
	keep := t.AddDate(0, -1, 0).Format(monthLayout)
	for km := range l.spent {
		if km.month < keep {
			if _, held := l.keyHeld[km]; !held {
				delete(l.spent, km)
			}
		}
	}
}

// Credit adds amount to the account's balance (a negative amount debits), creating the account if
// it is new. With a budget the store's balance is the truth: a credit is leasable at once and
// only the account is made known here.
func (l *Ledger) Credit(account string, amount decimal.Decimal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budget != nil {
		amount = decimal.Zero
	}
	l.balances[account] = l.balances[account].Add(amount)
}

// SetAccount sets an account's balance, for a newly created account. Holds are left as they are.
// With a budget the account is made known and its slice left as it is.
func (l *Ledger) SetAccount(account string, balance decimal.Decimal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budget != nil {
		balance = l.balances[account]
	}
	l.balances[account] = balance
}

// Snapshot returns the account's balance less its outstanding holds, and the key's settled spend
// in now's month (holds not included). An unknown account has 0 available.
func (l *Ledger) Snapshot(account, keyID string, now time.Time) (available, monthSpent decimal.Decimal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	available = l.balances[account].Sub(l.accountHeld[account])
	monthSpent = l.spent[keyMonth{keyID, monthOf(now)}]
	return available, monthSpent
}

// KeyMonth returns the key's settled spend in now's month (UTC) and what the holds of its
// requests in flight take from its monthly limit: admission lets a request through while
// spent + held + its worst case stays within the limit.
func (l *Ledger) KeyMonth(keyID string, now time.Time) (spent, held decimal.Decimal) {
	km := keyMonth{keyID, monthOf(now)}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spent[km], l.keyHeld[km]
}

// A request's hold from admission to its end: taken against the Ledger, made durable with the
// settler's next batch, a long stream's progress checkpointed as it goes, then settled (billed,
// its record handed over) or released (unbilled), exactly once. A gateway stopped by a crash
// thus leaves every request it served with a record at its next start (store/holds.go).

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
