package spool

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// Status is the journal as status and /metrics show it: the lag (records spooled and not
// shipped, the oldest's time), this replica's open holds, and what was shipped or refused.
func (s *Spool) Status() store.SpoolStatus {
	st := store.SpoolStatus{Path: s.opts.Path, Records: s.pending.Load(), Holds: s.holds.Load(),
		Shipped: s.shipped.Load(), Batches: s.batches.Load(), Rejected: s.rejected.Load(), Outage: s.Outage()}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if _, v := tx.Bucket(bucketRecords).Cursor().First(); v != nil {
			var rec struct {
				Time time.Time `json:"time"`
			}
			if json.Unmarshal(v, &rec) == nil {
				st.Oldest = rec.Time
			}
		}
		return nil
	})
	return st
}
