package bbolt

// Retention: raw usage records and their idempotency index entries are deleted once older than
// the retention window; daily aggregates, month spend, route usage and balances are kept for
// good. Deletion runs in the background in small transactions, oldest records first, so the
// writer lock the settler needs is never held for long. Each transaction deletes records with
// their index entries, so a kill -9 at any point leaves a consistent file, and there is no
// prune state to keep: the next pass starts again from the oldest record.

import (
	"bytes"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// PruneUsage deletes, in one transaction, up to limit usage records older than before (by their
// time) with their idempotency index entries. Fewer than limit deleted means none is left.
func (s *Store) PruneUsage(before time.Time, limit int) (store.PruneResult, error) {
	var res store.PruneResult
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

// StartPruning prunes the store in the background (store.StartPruning) until the returned stop
// is called.
func (s *Store) StartPruning(o store.PruneOptions) (stop func()) { return store.StartPruning(s, o) }
