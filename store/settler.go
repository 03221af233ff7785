package store

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Settler makes usage records durable off the request path, with group commit: one writer
// gathers the records queued within a window after the first and settles them in one
// transaction and one fsync (SettleBatch). A commit costs two fsyncs and the rewrite of the
// pages it touches whatever it carries, so fewer, fuller transactions are what keeps the
// gateway's CPU for serving requests.
type Settler struct {
	settle  func([]UsageRecord) []error // the store's SettleBatch; tests put faults in front
	window  time.Duration
	onError func(UsageRecord, error)
	ch      chan UsageRecord
	done    chan struct{}
	close   sync.Once

	records, commits atomic.Int64
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
)

// settleRetries are the pauses before settling again records whose transaction failed (a full
// or failing disk): about 25 s in all, during which new records wait in the queue. Records that
// are themselves wrong (invalid, unknown account) are not retried.
var settleRetries = []time.Duration{
	50 * time.Millisecond, 200 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second,
}

// NewSettler starts the writer. onError is called for each record that could not be stored
// (the caller's books and the store's would then disagree: it must be loud).
func NewSettler(st *Store, window time.Duration, onError func(UsageRecord, error)) *Settler {
	q := &Settler{settle: st.SettleBatch, window: window, onError: onError,
		ch: make(chan UsageRecord, settleQueue), done: make(chan struct{})}
	go q.run()
	return q
}

// Record queues rec to be settled.
func (q *Settler) Record(rec UsageRecord) { q.ch <- rec }

// Close settles everything queued, then stops. Record must not be called after Close.
func (q *Settler) Close() {
	q.close.Do(func() { close(q.ch) })
	<-q.done
}

func (q *Settler) run() {
	defer close(q.done)
	batch := make([]UsageRecord, 0, 256)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for first := range q.ch {
		batch = append(batch[:0], first)
		timer.Reset(q.window)
	gather:
		for len(batch) < settleMaxBatch {
			select {
			case rec, ok := <-q.ch:
				if !ok {
					break gather
				}
				batch = append(batch, rec)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		q.commit(batch)
	}
}

// commit settles batch, retrying what failed for a reason other than the record itself, and
// reports what could not be stored.
func (q *Settler) commit(batch []UsageRecord) {
	for attempt := 0; len(batch) > 0; attempt++ {
		errs := q.settle(batch)
		q.commits.Add(1)
		var again []UsageRecord
		for i, err := range errs {
			switch {
			case err == nil:
				q.records.Add(1)
			case attempt < len(settleRetries) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound):
				again = append(again, batch[i])
			default:
				q.records.Add(1)
				if q.onError != nil {
					q.onError(batch[i], err)
				}
			}
		}
		if len(again) > 0 {
			time.Sleep(settleRetries[attempt])
		}
		batch = again
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
