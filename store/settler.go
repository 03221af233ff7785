package store

import (
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
	store   *Store
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

// NewSettler starts the writer. onError is called for each record that could not be stored
// (the caller's books and the store's would then disagree: it must be loud).
func NewSettler(st *Store, window time.Duration, onError func(UsageRecord, error)) *Settler {
	q := &Settler{store: st, window: window, onError: onError,
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
		errs := q.store.SettleBatch(batch)
		q.records.Add(int64(len(batch)))
		q.commits.Add(1)
		for i, err := range errs {
			if err != nil && q.onError != nil {
				q.onError(batch[i], err)
			}
		}
	}
}

// SettlerStats count what the writer has done: records handed to the store (stored, already
// stored or failed) and the transactions that carried them.
type SettlerStats struct {
	Records int64 `json:"records"`
	Commits int64 `json:"commits"`
}

// Stats reports the writer's counters.
func (q *Settler) Stats() SettlerStats {
	return SettlerStats{Records: q.records.Load(), Commits: q.commits.Load()}
}
