package store

// Retention: raw usage records and their idempotency index entries are deleted once older than
// the retention window; daily aggregates, month spend, route usage and balances are kept for
// good. Deletion runs in the background in small transactions, oldest records first, so the
// writer lock the settler needs is never held for long. Each transaction deletes records with
// their index entries, so a kill -9 at any point leaves a consistent file, and there is no
// prune state to keep: the next pass starts again from the oldest record.

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	bolt "go.etcd.io/bbolt"
)

// PruneChunk is how many records one pruning transaction deletes by default. Deleting index
// entries rewrites about one random page each, so a transaction's cost grows with its chunk
// (about 0.1 ms a record measured, fsync included; store.md): 100 holds the writer lock about
// as long as one settlement window.
const PruneChunk = 100

// PruneResult says what one pruning transaction did.
type PruneResult struct {
	Deleted int
	// Held is how long the transaction held the writer lock, fsync included: the longest
	// settlement can have waited for it.
	Held time.Duration
}

// PruneUsage deletes, in one transaction, up to limit usage records older than before (by their
// time) with their idempotency index entries. Fewer than limit deleted means none is left.
func (s *Store) PruneUsage(before time.Time, limit int) (PruneResult, error) {
	var res PruneResult
	var start time.Time
	end := usageKey(before, "")
	err := s.update(func(tx *bolt.Tx) error {
		start = time.Now()
		usage, byReq := tx.Bucket(bucketUsage), tx.Bucket(bucketUsageByRequest)
		old := keysBefore(usage, end, limit)
		for _, k := range old {
			if err := usage.Delete(k); err != nil {
				return err
			}
			// The index entry goes with its record (one naming another time is not this
			// record's; a consistent file has none).
			id := k[8:]
			if v := byReq.Get(id); v != nil && indexPointsAt(v, k) {
				if err := byReq.Delete(id); err != nil {
					return err
				}
			}
		}
		res.Deleted = len(old)
		return nil
	})
	if !start.IsZero() {
		res.Held = time.Since(start)
	}
	return res, err
}

// keysBefore lists up to limit keys of b that sort before end, from the first.
func keysBefore(b *bolt.Bucket, end []byte, limit int) [][]byte {
	var out [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, end) < 0 && len(out) < limit; k, _ = c.Next() {
		out = append(out, bytes.Clone(k))
	}
	return out
}

// PruneOptions configure background pruning.
type PruneOptions struct {
	// Retention is how long raw usage records are kept; 0 keeps them for good (no pruning).
	Retention time.Duration
	// TaskRetention is how long finished media tasks are kept after they ended; 0 keeps them
	// for good.
	TaskRetention time.Duration
	// Every is the time between passes (default an hour); a pass also runs at start.
	Every time.Duration
	// Chunk is how many records one transaction deletes (default PruneChunk).
	Chunk int
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// StartPruning prunes in the background until the returned stop is called (it waits for the
// pass under way to stop between two transactions).
func (s *Store) StartPruning(o PruneOptions) (stop func()) {

	if o.Every <= 0 {
		o.Every = time.Hour
	}
	if o.Chunk <= 0 {
		o.Chunk = PruneChunk
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(o.Every)
		defer tick.Stop()
		for {
			s.prunePass(ctx, o)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// prunePass deletes everything older than the window, a chunk at a time. Between chunks it
// leaves the writer lock free for at least as long as it held it, so settlement keeps at least
// half of the store's time however much there is to prune.
func (s *Store) prunePass(ctx context.Context, o PruneOptions) {
	if o.Retention > 0 {
		pruneAll(ctx, o, "usage records", o.Now().Add(-o.Retention), s.PruneUsage)
	}
	if o.TaskRetention > 0 {
		pruneAll(ctx, o, "finished tasks", o.Now().Add(-o.TaskRetention), s.PruneTasks)
	}
	pruneAll(ctx, o, "expired images", o.Now(), s.PruneImages)                // kept until their own expiry
	pruneAll(ctx, o, "used payment credentials", o.Now(), s.PruneCredentials) // past the time they could be replayed
}

// pruneAll runs prune a chunk at a time until nothing before cutoff is left.
func pruneAll(ctx context.Context, o PruneOptions, what string, cutoff time.Time, prune func(time.Time, int) (PruneResult, error)) {
	start := time.Now()
	var total int
	var longest time.Duration
	for ctx.Err() == nil {
		res, err := prune(cutoff, o.Chunk)
		total += res.Deleted
		longest = max(longest, res.Held)
		if err != nil {
			o.Log.Error("pruning "+what+" failed; trying again at the next pass", "error", err)
			break
		}
		if res.Deleted < o.Chunk {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(max(res.Held, time.Millisecond)):
		}
	}
	if total > 0 {
		o.Log.Info("pruned "+what, "deleted", total, "older_than", cutoff.UTC().Format(time.RFC3339),
			"took", time.Since(start).Round(time.Millisecond), "longest_transaction", longest.Round(time.Microsecond))
	}
}
