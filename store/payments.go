package store

// x402 payments' records: pending settlements (a paid request whose settlement's outcome was
// unknown when its result went out, kept until it is known) and single-use credentials.

import (
	"encoding/json"
	"time"
)

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

// Validate refuses (ErrInvalid) a pending payment no store may keep: its record must be valid
// with its payment pending, and the whole at most 64 KiB of JSON. A zero record time counts as
// now.
func (p *PendingPayment) Validate() error {
	rec := p.Record
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	if err := rec.Validate(); err != nil {
		return err
	}
	if rec.Payment == nil || rec.Payment.Status != PaymentPending {
		return Errorf(ErrInvalid, "pending payment %q: its record's payment must be pending", ShortID(rec.RequestID))
	}
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if len(v) > maxPendingPayment {
		return Errorf(ErrInvalid, "pending payment %q is %d bytes, over %d", ShortID(rec.RequestID), len(v), maxPendingPayment)
	}
	return nil
}

// PaymentResolution is how a pending settlement ended.
type PaymentResolution struct {
	Status      string // PaymentSettled or PaymentUnpaid
	Transaction string // when the facilitator gave it
	Reason      string
}

// Check refuses a resolution that is not settled or unpaid (ErrInvalid) and cuts its reason to
// what a record's field holds.
func (r *PaymentResolution) Check(requestID string) error {
	if r.Status != PaymentSettled && r.Status != PaymentUnpaid {
		return Errorf(ErrInvalid, "resolve payment %q: status %q is not settled or unpaid", ShortID(requestID), r.Status)
	}
	r.Reason = clipBytes(r.Reason, MaxNameBytes)
	return nil
}

// Resolve rewrites rec's payment as r says when it is pending, and reports whether it did (one
// already resolved is left as it is); a record without a payment wraps ErrInvalid.
func (r PaymentResolution) Resolve(rec *UsageRecord) (bool, error) {
	p := rec.Payment
	if p == nil {
		return false, Errorf(ErrInvalid, "resolve payment %q: the record has no payment", ShortID(rec.RequestID))
	}
	if p.Status != PaymentPending {
		return false, nil
	}
	p.Status, p.Reason = r.Status, r.Reason
	if r.Transaction != "" {
		p.Transaction = r.Transaction
	}
	return true, rec.Validate()
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

// MaxCredentialKey bounds a credential key (x402's are under 200 bytes).
const MaxCredentialKey = 512

// CheckClaim refuses (ErrInvalid) a credential claim no store can keep: a key of 1 to
// MaxCredentialKey bytes, kept until a time after 1970 and before 2200.
func CheckClaim(key string, until time.Time) error {
	switch {
	case key == "" || len(key) > MaxCredentialKey:
		return Errorf(ErrInvalid, "store: a credential key must be 1 to %d bytes", MaxCredentialKey)
	case until.Unix() <= 0 || until.Year() > 2200:
		return Errorf(ErrInvalid, "store: credential %s kept until %v: not a time the index can order", key, until)
	}
	return nil
}

// ErrCredentialUsed is the error of a claim of a credential already used (it wraps ErrExists).
var ErrCredentialUsed = Errorf(ErrExists, "payment credential already used")
