package store

import (
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
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
type Settler struct {
	settle func([]UsageRecord) []error // the store's SettleBatch; tests put faults in front
	probe  func() error                // an empty write transaction: can the store commit at all?
	window time.Duration
	hooks  SettlerHooks
	ch     chan UsageRecord
	done   chan struct{}
	close  sync.Once
	closed atomic.Bool

	later []retry // records that failed alone while the store worked; only the writer uses it

	records, commits atomic.Int64
}

// SettlerHooks tell the gateway what it must log loudly. Either may be nil.
type SettlerHooks struct {
	// NotStored is called for each record that could not be stored: the caller's books and the
	// store's then disagree.
	NotStored func(UsageRecord, error)
	// Stalled is called each time the store cannot commit anything (a lone record and a probe
	// write failed): the writer holds its records and tries again after retryIn; queued records
	// wait (then Record blocks), none is dropped.
	Stalled func(err error, queued int, retryIn time.Duration)
}

// retry is a record that failed alone, to be tried again alone at due.
type retry struct {
	rec     UsageRecord
	attempt int
	due     time.Time
	err     error
}

const (
	// SettleWindow is how long the writer waits for more records after the first before
	// committing: bbolt's own default batch delay. A record is durable within about this plus
	// one commit after it is queued.
	SettleWindow = 10 * time.Millisecond
	// settleMaxBatch bounds one transaction, so the writer lock is never held for long.
	settleMaxBatch = 4096
	// settleQueue is how many records may wait; a full queue makes Record wait (backpressure,
	// never loss).
	settleQueue = 65536
	// maxLater bounds the records waiting for a retry of their own; past it a record that
	// fails alone is reported at once.
	maxLater = 1024
)

// settleRetries are the pauses before a record that failed alone is tried again (about 25 s in
// all, then it is reported), and before a store that cannot commit anything is tried again (the
// last pause repeating until it can: records are held, not dropped).
var settleRetries = []time.Duration{
	50 * time.Millisecond, 200 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second,
}

// NewSettler starts the writer.
func NewSettler(st *Store, window time.Duration, hooks SettlerHooks) *Settler {
	q := &Settler{settle: st.SettleBatch, probe: st.probe, window: window, hooks: hooks,
		ch: make(chan UsageRecord, settleQueue), done: make(chan struct{})}
	go q.run()
	return q
}

var bucketProbe = []byte("settler_probe")

// probe commits a write at least as demanding as settling one record: a value of four pages,
// rewritten each time. A disk that is full, failing or read-only fails it; one that still has
// room for a record passes, so a record that fails alone then is at fault itself.
func (s *Store) probe() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketProbe)
		if err != nil {
			return err
		}
		return b.Put([]byte("probe"), make([]byte, 4*s.db.Info().PageSize))
	})
}

// Record queues rec to be settled.
func (q *Settler) Record(rec UsageRecord) { q.ch <- rec }

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
	batch := make([]UsageRecord, 0, 256)
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
			window.Reset(q.window)
		gather:
			for len(batch) < settleMaxBatch {
				select {
				case rec, ok := <-q.ch:
					if !ok {
						break gather
					}
					batch = append(batch, rec)
				case <-window.C:
					break gather
				}
			}
			window.Stop()
			q.commit(batch)
		case <-dueC:
		}
		due.Stop()
		q.retryDue(time.Now())
	}
}

// try settles recs in one transaction: it counts what is done, reports what is wrong in itself,
// and returns the records that failed for another reason, with that reason.
func (q *Settler) try(recs []UsageRecord) (failed []UsageRecord, err error) {
	errs := q.settle(recs)
	q.commits.Add(1)
	for i, e := range errs {
		switch {
		case e == nil:
			q.records.Add(1)
		case wrongRecord(e):
			q.notStored(recs[i], e)
		default:
			failed, err = append(failed, recs[i]), e
		}
	}
	return failed, err
}

func (q *Settler) notStored(rec UsageRecord, err error) {
	q.records.Add(1)
	if q.hooks.NotStored != nil {
		q.hooks.NotStored(rec, err)
	}
}

// commit settles batch; records whose transaction failed are sorted out by bisect.
func (q *Settler) commit(batch []UsageRecord) {
	if failed, err := q.try(batch); len(failed) > 0 {
		q.bisect(failed, err)
	}
}

// bisect finds, in records that failed together, those that fail on their own: it settles each
// half in its own transaction and splits again what still fails. About 2·log2(n) transactions
// per culprit; the innocent records are stored on the way.
func (q *Settler) bisect(recs []UsageRecord, err error) {
	if len(recs) == 1 {
		q.failedAlone(recs[0], 0, err)
		return
	}
	h := len(recs) / 2
	for _, half := range [][]UsageRecord{recs[:h], recs[h:]} {
		if failed, err := q.try(half); len(failed) > 0 {
			q.bisect(failed, err)
		}
	}
}

// failedAlone handles a record whose own transaction failed: if the store can commit nothing,
// everything waits for it; otherwise the record is tried again later, on its own.
func (q *Settler) failedAlone(rec UsageRecord, attempt int, err error) {
	if perr := q.probe(); perr != nil {
		q.stall(rec, perr)
		return
	}
	if attempt >= len(settleRetries) || len(q.later) >= maxLater {
		q.notStored(rec, err)
		return
	}
	q.later = append(q.later, retry{rec: rec, attempt: attempt, due: time.Now().Add(settleRetries[attempt]), err: err})
}

// stall holds rec while the store cannot commit anything, trying again with growing pauses;
// the writer waits with it, new records wait in the queue and, once it is full, in Record
// (backpressure). It gives up, reporting rec, only once Close was called and the pauses ran out.
func (q *Settler) stall(rec UsageRecord, err error) {
	for attempt := 0; ; attempt++ {
		if attempt >= len(settleRetries) && q.closed.Load() {
			q.notStored(rec, err)
			return
		}
		pause := settleRetries[min(attempt, len(settleRetries)-1)]
		if q.hooks.Stalled != nil {
			q.hooks.Stalled(err, len(q.ch), pause)
		}
		time.Sleep(pause)
		failed, ferr := q.try([]UsageRecord{rec})
		if len(failed) == 0 {
			return
		}
		if perr := q.probe(); perr == nil { // the store works again: the record's own doing
			q.failedAlone(rec, 0, ferr)
			return
		}
		err = ferr
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
		if failed, err := q.try([]UsageRecord{r.rec}); len(failed) > 0 {
			q.failedAlone(r.rec, r.attempt+1, err)
		}
	}
}

// lastTries gives each record waiting for a retry one last try, at Close.
func (q *Settler) lastTries() {
	later := q.later
	q.later = nil
	for _, r := range later {
		if failed, err := q.try([]UsageRecord{r.rec}); len(failed) > 0 {
			q.failedAlone(r.rec, len(settleRetries), err) // reported, unless the store is down
		}
	}
}

// SettlerStats count what the writer has done: records done with (stored, already stored or
// reported as failed) and the transactions that carried them (retries included).
type SettlerStats struct {
	Records int64 `json:"records"`
	Commits int64 `json:"commits"`
}

// Stats reports the writer's counters.
func (q *Settler) Stats() SettlerStats {
	return SettlerStats{Records: q.records.Load(), Commits: q.commits.Load()}
}
