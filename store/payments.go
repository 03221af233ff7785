package store

// Pending x402 settlements: a paid request whose settlement's outcome was unknown (the
// facilitator's answer was lost after it was sent) got its result anyway; what is needed to
// settle it again is kept here, durably, until the outcome is known, so that a restart
// resumes it. Its usage record says payment.status pending until ResolvePayment changes it
// to settled or unpaid, together with the aggregates that count it.

import (
	"encoding/json"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketPendingPayments maps a usage record's request id to its PendingPayment (JSON).
var bucketPendingPayments = []byte("x402_pending")

func init() { allBuckets = append(allBuckets, bucketPendingPayments) }

// PendingPayment is a settlement to learn the outcome of.
type PendingPayment struct {
	// Record is the paid request's usage record as known when the settlement was deferred
	// (status pending): written at resume when the request's own record never was (a crash).
	Record UsageRecord `json:"record"`
	// Payload is the client's PaymentPayload JSON, as it sent it; Requirements what was
	// settled (for upto the charge): the same settlement is asked for again.
	Payload      json.RawMessage `json:"payload"`
	Requirements json.RawMessage `json:"requirements"`
	// Until is when the credential expires (validBefore or deadline): past it, it can no
	// longer settle.
	Until time.Time `json:"until"`
}

// maxPendingPayment bounds a stored entry: a credential is at most 16 KiB of base64.
const maxPendingPayment = 64 << 10

// AddPendingPayment keeps p, committed and fsynced, until ResolvePayment. Its record is not
// written here: the request's own record follows through the settler.
func (s *Store) AddPendingPayment(p PendingPayment) error {
	rec := p.Record
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	if err := validateUsage(&rec); err != nil {
		return err
	}
	if rec.Payment == nil || rec.Payment.Status != PaymentPending {
		return errorOf(ErrInvalid, "pending payment %q: its record's payment must be pending", ShortID(rec.RequestID))
	}
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if len(v) > maxPendingPayment {
		return errorOf(ErrInvalid, "pending payment %q is %d bytes, over %d", ShortID(rec.RequestID), len(v), maxPendingPayment)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPendingPayments).Put([]byte(rec.RequestID), v)
	})
}

// PendingPayments lists the settlements not resolved yet (at start, to resume them). An entry
// that does not decode is left out and reported in the error (ErrInvalid), with the others
// listed.
func (s *Store) PendingPayments() ([]PendingPayment, error) {
	var out []PendingPayment
	var bad []error
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPendingPayments).ForEach(func(k, v []byte) error {
			var p PendingPayment
			if err := json.Unmarshal(v, &p); err != nil {
				bad = append(bad, errorOf(ErrInvalid, "store: pending payment %q is damaged (%v)", ShortID(string(k)), err))
				return nil
			}
			out = append(out, p)
			return nil
		})
	})
	return out, errors.Join(append(bad, err)...)
}

// PaymentResolution is how a pending settlement ended.
type PaymentResolution struct {
	Status      string // PaymentSettled or PaymentUnpaid
	Transaction string // when the facilitator gave it
	Reason      string
}

// ResolvePayment ends the pending settlement of the record requestID: its payment takes the
// resolution's status, transaction and reason, the daily and route aggregates move its amount
// from pending to paid or unpaid, and the pending entry goes, in one transaction. It fails
// with ErrNotFound when no such record is stored yet (nothing changed); a record already
// resolved is left as it is.
func (s *Store) ResolvePayment(requestID string, r PaymentResolution) error {
	if r.Status != PaymentSettled && r.Status != PaymentUnpaid {
		return errorOf(ErrInvalid, "resolve payment %q: status %q is not settled or unpaid", ShortID(requestID), r.Status)
	}
	r.Reason = clipBytes(r.Reason, maxNameBytes)
	return s.db.Update(func(tx *bolt.Tx) error {
		rec, uKey, err := recordByRequest(tx, requestID)
		if err != nil {
			return err
		}
		if rec.Payment == nil {
			return errorOf(ErrInvalid, "resolve payment %q: the record has no payment", ShortID(requestID))
		}
		if rec.Payment.Status == PaymentPending {
			if err := resolveRecord(tx, &rec, uKey, r); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketPendingPayments).Delete([]byte(requestID))
	})
}

// recordByRequest reads the usage record of requestID and its key.
func recordByRequest(tx *bolt.Tx, requestID string) (UsageRecord, []byte, error) {
	var rec UsageRecord
	at := tx.Bucket(bucketUsageByRequest).Get([]byte(requestID))
	if len(at) < 8 {
		return rec, nil, errorOf(ErrNotFound, "usage record %q: not found", ShortID(requestID))
	}
	uKey := append(append([]byte{}, at[:8]...), requestID...)
	v := tx.Bucket(bucketUsage).Get(uKey)
	if v == nil {
		return rec, nil, errorOf(ErrNotFound, "usage record %q: not found (pruned)", ShortID(requestID))
	}
	err := decodeUsage(uKey, v, &rec)
	return rec, uKey, err
}

// resolveRecord rewrites rec's payment as r says and moves its amount in the aggregates it
// was counted in.
func resolveRecord(tx *bolt.Tx, rec *UsageRecord, uKey []byte, r PaymentResolution) error {
	p := rec.Payment
	p.Status, p.Reason = r.Status, r.Reason
	if r.Transaction != "" {
		p.Transaction = r.Transaction
	}
	if err := validateUsage(rec); err != nil {
		return err
	}
	if err := tx.Bucket(bucketUsage).Put(uKey, encodeUsage(rec)); err != nil {
		return err
	}
	aggs := jsonRows[UsageTotals](tx.Bucket(bucketUsageAgg))
	routes := jsonRows[UsageTotals](tx.Bucket(bucketUsageRoute))
	move := func(rows *foldedRows[UsageTotals], key []byte) error {
		t, err := rows.row(string(key), true)
		if err == nil {
			t.movePayment(p.AmountUSD, PaymentPending, r.Status)
		}
		return err
	}
	if err := move(&aggs, aggKey(rec.Time.Format(dayLayout), rec.KeyID, rec.Account, rec.Model)); err != nil {
		return err
	}
	if rec.Route != "" {
		if err := move(&routes, routeAggKey(rec.Route, rec.Model)); err != nil {
			return err
		}
	}
	return errors.Join(aggs.flush(), routes.flush())
}

// clipBytes cuts s to at most n bytes, on a rune boundary.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
