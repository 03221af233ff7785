package store

// Retention: raw usage records, finished tasks, expired images and used payment credentials are
// deleted in the background, in small transactions, oldest first, so that settlement is never
// held up for long; daily aggregates, month spend, route usage and balances are kept for good.

import (
	"context"
	"log/slog"
	"time"
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

// StartPruning prunes p in the background until the returned stop is called (it waits for the
// pass under way to stop between two transactions).
func StartPruning(p Pruner, o PruneOptions) (stop func()) {
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
			prunePass(ctx, p, o)
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
// leaves the store free for at least as long as a chunk held it, so settlement keeps at least
// half of the store's time however much there is to prune.
func prunePass(ctx context.Context, s Pruner, o PruneOptions) {
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
