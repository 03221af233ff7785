package bbolt

// Pending x402 settlements: a paid request whose settlement's outcome was unknown (the
// facilitator's answer was lost after it was sent) got its result anyway; what is needed to
// settle it again is kept here, durably, until the outcome is known, so that a restart
// resumes it. Its usage record says payment.status pending until ResolvePayment changes it
// to settled or unpaid, together with the aggregates that count it.

import (
	"encoding/json"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// bucketPendingPayments maps a usage record's request id to its PendingPayment (JSON).
var bucketPendingPayments = []byte("x402_pending")

func init() { allBuckets = append(allBuckets, bucketPendingPayments) }

// AddPendingPayment keeps p, committed and fsynced, until ResolvePayment. Its record is not
// written here: the request's own record follows through the settler.
func (s *Store) AddPendingPayment(p store.PendingPayment) error {
	if err := p.Validate(); err != nil {
		return err
	}
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPendingPayments).Put([]byte(p.Record.RequestID), v)
	})
}

// PendingPayments lists the settlements not resolved yet (at start, to resume them). An entry
// that does not decode is left out and reported in the error (ErrInvalid), with the others
// listed.
func (s *Store) PendingPayments() ([]store.PendingPayment, error) {
	var out []store.PendingPayment
	var bad []error
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPendingPayments).ForEach(func(k, v []byte) error {
			var p store.PendingPayment
			if err := json.Unmarshal(v, &p); err != nil {
				bad = append(bad, store.Errorf(store.ErrInvalid, "store: pending payment %q is damaged (%v)", store.ShortID(string(k)), err))
				return nil
			}
			out = append(out, p)
			return nil
		})
	})
	return out, errors.Join(append(bad, err)...)
}

// ResolvePayment ends the pending settlement of the record requestID: its payment takes the
// resolution's status, transaction and reason, the daily and route aggregates move its amount
// from pending to paid or unpaid, and the pending entry goes, in one transaction. It fails
// with ErrNotFound when no such record is stored yet (nothing changed); a record already
// resolved is left as it is.
func (s *Store) ResolvePayment(requestID string, r store.PaymentResolution) error {
	if err := r.Check(requestID); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		rec, uKey, err := recordByRequest(tx, requestID)
		if err != nil {
			return err
		}
		if pending, err := r.Resolve(&rec); err != nil {
			return err
		} else if pending {
			if err := resolveRecord(tx, &rec, uKey, r.Status); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketPendingPayments).Delete([]byte(requestID))
	})
}

// recordByRequest reads the usage record of requestID and its key.
func recordByRequest(tx *bolt.Tx, requestID string) (store.UsageRecord, []byte, error) {
	var rec store.UsageRecord
	at := tx.Bucket(bucketUsageByRequest).Get([]byte(requestID))
	if len(at) < 8 {
		return rec, nil, store.Errorf(store.ErrNotFound, "usage record %q: not found", store.ShortID(requestID))
	}
	uKey := append(append([]byte{}, at[:8]...), requestID...)
	v := tx.Bucket(bucketUsage).Get(uKey)
	if v == nil {
		return rec, nil, store.Errorf(store.ErrNotFound, "usage record %q: not found (pruned)", store.ShortID(requestID))
	}
	err := decodeUsage(uKey, v, &rec)
	return rec, uKey, err
}

// resolveRecord writes rec, its payment resolved to status, and moves its amount in the
// aggregates it was counted in from pending to status.
func resolveRecord(tx *bolt.Tx, rec *store.UsageRecord, uKey []byte, status string) error {
	p := rec.Payment
	if err := tx.Bucket(bucketUsage).Put(uKey, encodeUsage(rec)); err != nil {
		return err
	}
	aggs := jsonRows[store.UsageTotals](tx.Bucket(bucketUsageAgg))
	routes := jsonRows[store.UsageTotals](tx.Bucket(bucketUsageRoute))
	move := func(rows *foldedRows[store.UsageTotals], key []byte) error {
		t, err := rows.row(string(key), true)
		if err == nil {
			t.MovePayment(p.AmountUSD, store.PaymentPending, status)
		}
		return err
	}
	if err := move(&aggs, aggKey(rec.Time.Format(store.DayLayout), rec.KeyID, rec.Account, rec.Model)); err != nil {
		return err
	}
	if rec.Route != "" {
		if err := move(&routes, routeAggKey(rec.Route, rec.Model)); err != nil {
			return err
		}
	}
	return errors.Join(aggs.flush(), routes.flush())
}
