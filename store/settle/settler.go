// Package settle is the group-commit writer every store implementation records through: usage
// records and the holds of requests in flight queued off the request path and written in few,
// full transactions of the implementation's own (Target), with retries that never lose a record.
package settle

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// Settler makes usage records durable off the request path, with group commit: one writer
// gathers the records queued within a window after the first and settles them in one
// transaction and one fsync (SettleBatch). A commit costs two fsyncs and the rewrite of the
// pages it touches whatever it carries, so fewer, fuller transactions are what keeps the
// gateway's CPU for serving requests.
//
// No record can hold back or lose another: a record wrong in itself fails alone inside the
// transaction (SettleBatch); a transaction that fails for any other reason is split in halves
// until the records that fail on their own are found, the rest being stored at once; those are
// tried again on their own, later, while the writer goes on with new records. Only when the
// store cannot commit anything (a full or failing disk) does everything wait.
//
// Holds (holds.go) ride in the same transactions: a hold queued with Hold is written with the
// next commit unless its request settled (Record) or was released (End) in the meantime, and
// the record of a request whose hold row is on disk deletes it as it settles.
type Settler struct {
	target  Target
	window  time.Duration
	retries []time.Duration
	hooks   store.SettlerHooks
	ch      chan entry
	done    chan struct{}
	close   sync.Once
	closed  atomic.Bool

	// Only the writer uses these.
	later  []retry          // records that failed alone while the store worked
	pend   map[string]entry // holds to write with the next commit, by request id
	drop   []string         // hold rows to delete with the next commit
	onDisk map[string]bool  // requests whose hold row is on disk

	records, commits atomic.Int64
	// inBatch counts the changes the writer took from the queue and has not written yet: the
	// batch it gathers and commits, or the records it holds while the store cannot commit.
	inBatch atomic.Int64
}

// entry is one queued change: a settled record, a hold (or its progress), or a hold's end.
type entry struct {
	kind entryKind
	rec  store.UsageRecord // for endEntry, only RequestID
	// price, when set, is a hold's cost, worked out by the writer only for a hold it writes.
	price func() decimal.Decimal
}

type entryKind uint8

const (
	settleEntry entryKind = iota
	holdEntry
	endEntry
)

// retry is a record that failed alone, to be tried again alone at due.
type retry struct {
	rec     store.UsageRecord
	attempt int
	due     time.Time
	err     error
}

const (
	// Window is how long the writer waits for more records after the first before
	// committing: bbolt's own default batch delay. A record is durable within about this plus
	// one commit after it is queued.
	Window = 10 * time.Millisecond
	// settleMaxBatch bounds one transaction, so the writer lock is never held for long.
	settleMaxBatch = 4096
	// settleQueue is how many records may wait; a full queue makes Record wait (backpressure,
	// never loss).
	settleQueue = 65536
	// maxLater bounds the records waiting for a retry of their own; past it a record that
	// fails alone is reported at once.
	maxLater = 1024
)

// defaultRetries are the pauses before a record that failed alone is tried again (about 25 s in
// all, then it is reported), and before a store that cannot commit anything is tried again (the
// last pause repeating until it can: records are held, not dropped).
var defaultRetries = []time.Duration{
	50 * time.Millisecond, 200 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second,
}

var _ store.Recorder = (*Settler)(nil)

// Target is a store a Settler writes to: each implementation's own transactions, with the same
// group commit, hold rows and retries over them.
type Target interface {
	// SettleWith settles recs and writes hc in one transaction: one error per record, and
	// the transaction's own (wrapping store.ErrUnavailable when the store cannot commit).
	SettleWith(recs []store.UsageRecord, hc HoldChanges) ([]error, error)
	// Probe commits a small write: nil when the store can commit at all.
	Probe() error
	// Recovery is closed when the store's current outage ends (nil: none going on).
	Recovery() <-chan struct{}
}

// Funcs is a Target made of functions (an implementation's unexported methods; tests put
// faults in front of them).
type Funcs struct {
	SettleFn   func([]store.UsageRecord, HoldChanges) ([]error, error)
	ProbeFn    func() error
	RecoveryFn func() <-chan struct{} // nil: the store has no outages to wait out
}

func (f Funcs) SettleWith(recs []store.UsageRecord, hc HoldChanges) ([]error, error) {
	return f.SettleFn(recs, hc)
}
func (f Funcs) Probe() error { return f.ProbeFn() }
func (f Funcs) Recovery() <-chan struct{} {
	if f.RecoveryFn == nil {
		return nil
	}
	return f.RecoveryFn()
}

// Options tune a Settler.
type Options struct {
	// Window is how long the writer waits for more records after the first (Window, the
	// default, when zero).
	Window time.Duration
	Hooks  store.SettlerHooks
	// Retries are the pauses before a record that failed alone is tried again, and before a
	// store that cannot commit is tried again (the last repeating); nil: the defaults.
	Retries []time.Duration
}

// New starts the writer over t.
func New(t Target, o Options) *Settler {
	if o.Window == 0 {
		o.Window = Window
	}
	if o.Retries == nil {
		o.Retries = defaultRetries
	}
	q := &Settler{target: t, window: o.Window, hooks: o.Hooks, retries: o.Retries,
		ch: make(chan entry, settleQueue), done: make(chan struct{}),
		pend: map[string]entry{}, onDisk: map[string]bool{}}
	go q.run()
	return q
}

func (q *Settler) Record(rec store.UsageRecord) { q.ch <- entry{kind: settleEntry, rec: rec} }

// Hold queues the hold of an admitted request, or its progress: rec is the record a restart
// bills if the request never settles (SettleHolds). It is written with the next commit, unless
// the request settles or ends before. price, when not nil, is rec's cost, asked for only if
// the hold is written (most requests settle first).
func (q *Settler) Hold(rec store.UsageRecord, price func() decimal.Decimal) {
	q.ch <- entry{kind: holdEntry, rec: rec, price: price}
}

// End queues the end of the hold of a request released unbilled.
func (q *Settler) End(requestID string) {
	q.ch <- entry{kind: endEntry, rec: store.UsageRecord{RequestID: requestID}}
}

// Queued is the number of changes waiting to be written: queued, and held by the writer while
// the store cannot commit.
func (q *Settler) Queued() int { return len(q.ch) + int(q.inBatch.Load()) }

// Close settles everything queued, gives each record waiting for a retry one last try, then
// stops. A store that cannot commit anything is waited for through the retry pauses once
// more, then what it holds is reported. Record must not be called after Close.
func (q *Settler) Close() {
	q.close.Do(func() {
		q.closed.Store(true)
		close(q.ch)
	})
	<-q.done
}

func (q *Settler) run() {
	defer close(q.done)
	batch := make([]entry, 0, 256)
	window := time.NewTimer(time.Hour)
	window.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	for {
		var dueC <-chan time.Time
		if next, ok := q.nextDue(); ok {
			due.Reset(time.Until(next))
			dueC = due.C
		}
		select {
		case first, ok := <-q.ch:
			if !ok {
				q.lastTries()
				return
			}
			batch = append(batch[:0], first)
			q.inBatch.Store(1)
			window.Reset(q.window)
		gather:
			for len(batch) < settleMaxBatch {
				select {
				case e, ok := <-q.ch:
					if !ok {
						break gather
					}
					batch = append(batch, e)
					q.inBatch.Add(1)
				case <-window.C:
					break gather
				}
			}
			window.Stop()
			q.commit(batch)
			q.inBatch.Store(0)
		case <-dueC:
		}
		due.Stop()
		q.retryDue(time.Now())
	}
}

// sort files a batch's entries: holds to write or drop go to the writer's pending changes (a
// hold whose request ended in the meantime is never written), settled records come back.
func (q *Settler) sort(batch []entry) []store.UsageRecord {
	recs := make([]store.UsageRecord, 0, len(batch))
	for _, e := range batch {
		id := e.rec.RequestID
		switch e.kind {
		case holdEntry:
			q.pend[id] = e
		case settleEntry:
			delete(q.pend, id)
			recs = append(recs, e.rec)
		case endEntry:
			delete(q.pend, id)
			if q.onDisk[id] {
				q.drop = append(q.drop, id)
			}
		}
	}
	return recs
}

// holdChanges are the pending hold changes, for the next transaction.
func (q *Settler) holdChanges() HoldChanges {
	hc := HoldChanges{Drop: q.drop, Held: func(id string) bool { return q.onDisk[id] }}
	for id, e := range q.pend {
		if e.price != nil {
			e.rec.Cost, e.price = e.price(), nil
			q.pend[id] = e
		}
		hc.Put = append(hc.Put, e.rec)
	}
	return hc
}

// holdsWritten notes that hc committed.
func (q *Settler) holdsWritten(hc HoldChanges) {
	for _, rec := range hc.Put {
		q.onDisk[rec.RequestID] = true
		delete(q.pend, rec.RequestID)
	}
	for _, id := range hc.Drop {
		delete(q.onDisk, id)
	}
	q.drop = q.drop[:0]
}

// try settles recs in one transaction with the pending hold changes: it counts what is done,
// reports what is wrong in itself, and returns the records that failed for another reason,
// with the transaction's error (nil: it committed).
func (q *Settler) try(recs []store.UsageRecord) (failed []store.UsageRecord, err error) {
	hc := q.holdChanges()
	if len(recs) == 0 && hc.Empty() {
		return nil, nil
	}
	errs, txErr := q.target.SettleWith(recs, hc)
	q.commits.Add(1)
	if txErr != nil && !errors.Is(txErr, store.ErrUnavailable) && len(hc.Put) > 0 {
		// Holds are provisional bills: one the store refuses must not hold back a record.
		clear(q.pend)
		hc.Put = nil
		errs, txErr = q.target.SettleWith(recs, hc)
		q.commits.Add(1)
	}
	if txErr == nil {
		q.holdsWritten(hc)
	}
	for i, e := range errs {
		switch {
		case e == nil:
			q.records.Add(1)
			delete(q.onDisk, recs[i].RequestID) // its row went with it
		case store.RecordFault(e):
			q.notStored(recs[i], e)
		default:
			failed, err = append(failed, recs[i]), e
		}
	}
	return failed, cmpErr(txErr, err)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (q *Settler) notStored(rec store.UsageRecord, err error) {
	q.records.Add(1)
	if q.onDisk[rec.RequestID] {
		q.drop = append(q.drop, rec.RequestID) // reported: a restart must not bill it again
	}
	if q.hooks.NotStored != nil {
		q.hooks.NotStored(rec, err)
	}
}

// commit settles batch; records whose transaction failed wait for the store when it cannot
// commit anything, and are sorted out by bisect otherwise.
func (q *Settler) commit(batch []entry) {
	recs := q.sort(batch)
	failed, err := q.try(recs)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrUnavailable):
		q.stall(failed, err)
	case len(failed) > 0:
		q.bisect(failed, err)
	}
}

// bisect finds, in records that failed together, those that fail on their own: it settles each
// half in its own transaction and splits again what still fails. About 2·log2(n) transactions
// per culprit; the innocent records are stored on the way.
func (q *Settler) bisect(recs []store.UsageRecord, err error) {
	if len(recs) == 1 {
		q.failedAlone(recs[0], 0, err)
		return
	}
	h := len(recs) / 2
	for _, half := range [][]store.UsageRecord{recs[:h], recs[h:]} {
		switch failed, err := q.try(half); {
		case errors.Is(err, store.ErrUnavailable):
			q.stall(failed, err)
		case len(failed) > 0:
			q.bisect(failed, err)
		}
	}
}

// failedAlone handles a record whose own transaction failed: if the store can commit nothing,
// everything waits for it; otherwise the record is tried again later, on its own.
func (q *Settler) failedAlone(rec store.UsageRecord, attempt int, err error) {
	if perr := q.target.Probe(); perr != nil {
		q.stall([]store.UsageRecord{rec}, perr)
		return
	}
	if attempt >= len(q.retries) || len(q.later) >= maxLater {
		q.notStored(rec, err)
		return
	}
	q.later = append(q.later, retry{rec: rec, attempt: attempt, due: time.Now().Add(q.retries[attempt]), err: err})
}

// stall holds recs (and the pending hold changes) while the store cannot commit anything,
// trying again with growing pauses, at once when the store's outage ends; the writer waits with
// them, new records wait in the queue and, once it is full, in Record (backpressure). It gives
// up, reporting recs, only once Close was called and the pauses ran out.
func (q *Settler) stall(recs []store.UsageRecord, err error) {
	q.inBatch.Store(int64(len(recs)))
	for attempt := 0; ; attempt++ {
		if attempt >= len(q.retries) && q.closed.Load() {
			for _, rec := range recs {
				q.notStored(rec, err)
			}
			return
		}
		pause := q.retries[min(attempt, len(q.retries)-1)]
		if q.hooks.Stalled != nil {
			q.hooks.Stalled(err, len(q.ch)+len(recs), pause)
		}
		q.pause(pause)
		failed, ferr := q.try(recs)
		if ferr == nil {
			return
		}
		if !errors.Is(ferr, store.ErrUnavailable) && q.target.Probe() == nil { // the store works: the records' own doing
			if len(failed) > 0 {
				q.bisect(failed, ferr)
			}
			return
		}
		recs, err = failed, ferr
		q.inBatch.Store(int64(len(recs)))
	}
}

// pause waits d, or until the store's outage ends.
func (q *Settler) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	var recovered <-chan struct{}
	recovered = q.target.Recovery()
	select {
	case <-t.C:
	case <-recovered:
	}
}

func (q *Settler) nextDue() (time.Time, bool) {
	if len(q.later) == 0 {
		return time.Time{}, false
	}
	next := q.later[0].due
	for _, r := range q.later[1:] {
		if r.due.Before(next) {
			next = r.due
		}
	}
	return next, true
}

// retryDue tries again, each alone, the records whose pause is over.
func (q *Settler) retryDue(now time.Time) {
	var due, wait []retry
	for _, r := range q.later {
		if r.due.After(now) {
			wait = append(wait, r)
		} else {
			due = append(due, r)
		}
	}
	q.later = wait
	for _, r := range due {
		if failed, err := q.try([]store.UsageRecord{r.rec}); len(failed) > 0 {
			q.failedAlone(r.rec, r.attempt+1, err)
		}
	}
}

// lastTries gives each record waiting for a retry one last try, at Close.
func (q *Settler) lastTries() {
	later := q.later
	q.later = nil
	for _, r := range later {
		if failed, err := q.try([]store.UsageRecord{r.rec}); len(failed) > 0 {
			q.failedAlone(r.rec, len(q.retries), err) // reported, unless the store is down
		}
	}
}

// Stats reports the writer's counters.
func (q *Settler) Stats() store.SettlerStats {
	return store.SettlerStats{Records: q.records.Load(), Commits: q.commits.Load()}
}
