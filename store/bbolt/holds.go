package bbolt

// Durable holds: a request admitted against its account's credits leaves a hold row, written
// with the settler's next batch (no transaction of its own), holding the record a restart bills
// if the request never settles: its prompt and the completion its stream had passed at its
// last checkpoint, estimated. Its usage record deletes it in the transaction that settles it;
// a request released unbilled deletes it too. A request settled before its hold's batch was
// written never had a row (the settler drops the pair), so quick requests add no write.
//
//	holds  request id → the record's 8-byte time ‖ its compact value (usage.go)
//
// At start, SettleHolds bills every row left by a gateway that stopped without settling it.

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

var bucketHolds = []byte("holds")

func init() { allBuckets = append(allBuckets, bucketHolds) }

// holdValue is a hold row's value: the record's time, then its compact form.
func holdValue(rec *store.UsageRecord) []byte {
	return append(usageKey(rec.Time, "")[:8:8], encodeUsage(rec)...)
}

func decodeHold(k, v []byte, rec *store.UsageRecord) error {
	if len(v) < 8 {
		return fmt.Errorf("store: hold %q: %w: too short", store.ShortID(string(k)), errUsageValue)
	}
	return decodeUsage(append(v[:8:8], k...), v[8:], rec)
}

// putHolds writes hc's rows in tx. A hold that is not a valid record is left out: it is only
// the provisional bill of a request that will settle on its own.
func putHolds(tx *bolt.Tx, hc *settle.HoldChanges) error {
	b := tx.Bucket(bucketHolds)
	for i := range hc.Put {
		rec := hc.Put[i]
		rec.Time = rec.Time.UTC().Round(0)
		if rec.Validate() != nil {
			continue
		}
		if err := b.Put([]byte(rec.RequestID), holdValue(&rec)); err != nil {
			return err
		}
	}
	for _, id := range hc.Drop {
		if err := b.Delete([]byte(id)); err != nil {
			return err
		}
	}
	return nil
}

// OpenHolds is the number of hold rows on disk.
func (s *Store) OpenHolds() (int, error) {
	var n int
	err := s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketHolds).Stats().KeyN
		return nil
	})
	return n, err
}

// SettleHolds bills every hold row left by a gateway that stopped before settling it, as an
// estimated record with EstimateReason reason, debited like any other; call it at start,
// before anything else settles. Each row goes with its record, in one transaction; a row
// whose record cannot be stored (its account was deleted, it does not decode) is deleted and
// its failure returned. It reports how many records were settled (now, or before the stop).
func (s *Store) SettleHolds(reason string) (settled int, failed []error, err error) {
	var recs []store.UsageRecord
	var bad []string
	err = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(k, v []byte) error {
			var rec store.UsageRecord
			if err := decodeHold(k, v, &rec); err != nil {
				bad = append(bad, string(k))
				failed = append(failed, err)
				return nil
			}
			rec.Estimated, rec.EstimateReason = true, reason
			recs = append(recs, rec)
			return nil
		})
	})
	if err != nil {
		return 0, failed, err
	}
	return s.settleHeld(recs, bad, failed)
}

// settleHeld settles the records of holds left unsettled (settle.Held).
func (s *Store) settleHeld(recs []store.UsageRecord, bad []string, failed []error) (int, []error, error) {
	return settle.Held(s.settleWith, recs, bad, failed)
}

// settleWith is SettleBatch with hold changes in the same transaction: one error per record,
// and err when the transaction itself failed (nothing was written).
func (s *Store) settleWith(recs []store.UsageRecord, hc settle.HoldChanges) (errs []error, err error) {
	errs = make([]error, len(recs))
	todo := prepareSettling(recs, errs)
	if len(todo) == 0 && hc.Empty() {
		return errs, nil
	}
	err = s.update(func(tx *bolt.Tx) error {
		if err := settleTx(tx, todo, errs, hc.Held); err != nil {
			return err
		}
		return putHolds(tx, &hc)
	})
	if err != nil {
		for _, st := range todo {
			if errs[st.at] == nil || !store.RecordFault(errs[st.at]) {
				errs[st.at] = err
			}
		}
	}
	return errs, err
}
