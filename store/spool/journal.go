package spool

// The journal's side of the local group commit: bbolt's Settler writes through SettleWith here
// (records appended in the order they came, holds put and dropped, in one bbolt transaction),
// and the journal's health is whether that transaction commits.

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// SettleWith appends recs to the journal and writes hc, in one transaction: one error per record
// (ErrInvalid for a record wrong in itself, which is not spooled), and the transaction's own,
// wrapping store.ErrUnavailable, when the journal cannot commit (settle.Target).
func (s *Spool) SettleWith(recs []store.UsageRecord, hc settle.HoldChanges) ([]error, error) {
	errs := make([]error, len(recs))
	now := time.Now()
	added, holds := 0, int64(0)
	err := s.update(func(tx *bolt.Tx) error {
		added, holds = 0, 0
		rb, hb := tx.Bucket(bucketRecords), tx.Bucket(bucketHolds)
		for i := range recs {
			rec := recs[i]
			rec.Normalize(now)
			if errs[i] = rec.Validate(); errs[i] != nil {
				continue
			}
			seq, err := rb.NextSequence()
			if err != nil {
				return err
			}
			if err := rb.Put(seqKey(seq), encode(rec)); err != nil {
				return err
			}
			added++
			if hb.Get([]byte(rec.RequestID)) != nil {
				holds--
				if err := hb.Delete([]byte(rec.RequestID)); err != nil {
					return err
				}
			}
		}
		for i := range hc.Put {
			rec := hc.Put[i]
			rec.Normalize(now)
			if rec.Validate() != nil {
				continue // only the provisional bill of a request that settles on its own
			}
			if hb.Get([]byte(rec.RequestID)) == nil {
				holds++
			}
			if err := hb.Put([]byte(rec.RequestID), encode(rec)); err != nil {
				return err
			}
		}
		for _, id := range hc.Drop {
			if hb.Get([]byte(id)) != nil {
				holds--
				if err := hb.Delete([]byte(id)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs, err
	}
	s.pending.Add(int64(added))
	s.holds.Add(holds)
	if added > 0 {
		s.wake()
	}
	return errs, nil
}

// Probe commits an empty write: nil when the journal can commit at all.
func (s *Spool) Probe() error {
	return s.update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketRecords)
		return err
	})
}

// Recovery is closed when the journal's current outage ends (nil: none going on).
func (s *Spool) Recovery() <-chan struct{} { return s.health.Recovery() }

// update runs fn in a journal transaction and keeps the journal's health: a failed commit
// starts an outage (its cause read from the filesystem's error), a commit ends it.
func (s *Spool) update(fn func(tx *bolt.Tx) error) error {
	err := s.db.Update(fn)
	if err == nil {
		s.health.OK()
		return nil
	}
	s.health.Fail(&store.Outage{Cause: store.CauseOf(err), Err: fmt.Errorf("the spool %s: %w", s.opts.Path, err), Since: time.Now().UTC()})
	return fmt.Errorf("store.spool %s: %w: %w", s.opts.Path, store.ErrUnavailable, err)
}

// Unavailable is the journal's outage as an error, nil while it takes records: what the gateway
// refuses billable work on (store.Health). The database being down is not one.
func (s *Spool) Unavailable() error { return s.health.Err() }

// Outage is the journal's current outage, nil while it takes records.
func (s *Spool) Outage() *store.Outage { return s.health.Current() }

// ReserveState is "none": the spool keeps no reserve file.
func (s *Spool) ReserveState() string { return "none" }

// SettleHolds bills the holds a previous run of this replica left (requests it was serving when
// it stopped) as estimated records with EstimateReason reason, in the journal (shipped like any
// record), and reports how many.
func (s *Spool) SettleHolds(reason string) (int, error) {
	var recs []store.UsageRecord
	var bad []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(k, v []byte) error {
			var rec store.UsageRecord
			if json.Unmarshal(v, &rec) != nil {
				bad = append(bad, string(k))
				return nil
			}
			rec.Estimated, rec.EstimateReason = true, reason
			recs = append(recs, rec)
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	n, _, err := settle.Held(s.SettleWith, recs, bad, nil)
	return n, err
}
