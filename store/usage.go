package store

// Usage records: their shape, the bounds every field must keep before it may reach a
// transaction, and their stored form.
//
// A record is stored under usageKey (8-byte big-endian unix nanos ‖ request id), so its time and
// id are in the key; the value holds the rest. Values written before the compact form are the
// whole record as JSON and are still read (they start with '{'); compact values start with
// usageFormatV1 followed by protobuf-wire fields (protowire), so fields can be added later
// and old readers skip what they do not know. The idempotency index maps a request id to the
// record's 8-byte time (older files hold the whole usage key there; both start with the time).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/encoding/protowire"
)

// UsageRecord is one settled request.
type UsageRecord struct {
	RequestID        string          `json:"request_id"`
	KeyID            string          `json:"key_id"`
	Account          string          `json:"account"`
	Model            string          `json:"model"`
	Provider         string          `json:"provider"`
	Route            string          `json:"route,omitempty"`
	PromptTokens     int64           `json:"prompt_tokens"`
	CompletionTokens int64           `json:"completion_tokens"`
	CachedTokens     int64           `json:"cached_tokens,omitempty"`
	Cost             decimal.Decimal `json:"cost"`
	Estimated        bool            `json:"estimated"`
	// EstimateReason says why an estimated record was not billed from the provider's usage,
	// when the answer did not end in the gateway: EstimateGatewayRestart. Empty otherwise.
	EstimateReason string    `json:"estimate_reason,omitempty"`
	Time           time.Time `json:"time"`
	// Overage is what the provider's report metered beyond what was billed: no settlement
	// exceeds its hold (the worst case held at admission), and none takes a balance below zero
	// or a key past its monthly limit. The operator takes it up with the provider.
	Overage decimal.Decimal `json:"overage,omitzero"`
	// Payment is set on a request paid through x402: it was paid by its payer, not from the
	// account's credits (nothing is debited; Cost is the business cost).
	Payment *Payment `json:"payment,omitempty"`
}

// Payment is what an x402 payment settled (spec 4.6).
type Payment struct {
	Endpoint string `json:"endpoint"` // the paid endpoint's slug
	Scheme   string `json:"scheme"`   // exact | upto
	Network  string `json:"network"`
	Asset    string `json:"asset"`
	Payer    string `json:"payer"`
	// Amount is what was settled, in the asset's atomic units ("0": the credential was burned
	// locally, no transaction); AmountUSD the same in USD.
	Amount      string          `json:"amount"`
	AmountUSD   decimal.Decimal `json:"amount_usd"`
	Transaction string          `json:"transaction,omitempty"`
	// Status is the settlement's: settled, pending (the facilitator's answer was lost; it is
	// being settled again) or unpaid (it never settled: the result was served unpaid). Records
	// written before it existed read as settled.
	Status string `json:"status"`
	// Reason says how a pending or unpaid status came about, or how a settlement that was
	// pending was learned (at most 256 bytes).
	Reason string `json:"reason,omitempty"`
}

// Settlement states of a Payment.
const (
	PaymentSettled = "settled"
	PaymentPending = "pending"
	PaymentUnpaid  = "unpaid"
)

// EstimateGatewayRestart is the EstimateReason of a request the gateway stopped before it
// settled (a crash, kill -9): billed at the next start from its durable hold (holds.go).
const EstimateGatewayRestart = "gateway_restart"

// PaidAccountPrefix starts the account of requests paid through x402 without an API key
// ("x402.<slug>"); no account may be created with it.
const PaidAccountPrefix = "x402."

// Bounds of a usage record's fields. Every id has room for what real clients and providers
// send (a request id is the client's x-request-id plus a suffix); past that a record is refused
// alone with ErrInvalid, never handed to bbolt, whose keys stop at 32 KiB.
const (
	MaxRequestIDBytes = 512
	maxKeyIDBytes     = 128 // store key ids are "key_" + 16 hex digits
	maxNameBytes      = 256 // model, provider, route
	// MaxTokens bounds each token count (the gateway clamps to it before billing): no request
	// comes near it, and all-time sums of int64 counters cannot overflow before billions of
	// such records.
	MaxTokens = 1_000_000_000
	// maxCostChars bounds a cost's decimal string (digits, point), so sums stay small and exact.
	maxCostChars = 48
)

// maxCost is the largest cost one request may settle (USD).
var maxCost = decimal.New(1, 9)

// ShortID is id as logs and error messages show it: at most 64 bytes, with its full length when
// cut, so a client-chosen id cannot flood a log line.
func ShortID(id string) string {
	const keep = 64
	if len(id) <= keep {
		return id
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", id[:cut], len(id))
}

// checkID: ids are printable UTF-8 of at most max bytes; NUL also separates aggregate keys.
func checkID(rec *UsageRecord, field, v string, max int, required bool) error {
	switch {
	case v == "" && required:
		return errorOf(ErrInvalid, "usage record %q: %s is empty", ShortID(rec.RequestID), field)
	case len(v) > max:
		return errorOf(ErrInvalid, "usage record %q: %s is %d bytes, over the limit of %d", ShortID(rec.RequestID), field, len(v), max)
	case !utf8.ValidString(v):
		return errorOf(ErrInvalid, "usage record %q: %s is not valid UTF-8", ShortID(rec.RequestID), field)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errorOf(ErrInvalid, "usage record %q: %s %q contains a control character (NUL, newline ...)", ShortID(rec.RequestID), field, ShortID(v))
	}
	return nil
}

// validateUsage refuses, before any transaction, every record bbolt would refuse or that is
// unreasonable; what passes fits every key and value it is written to.
func validateUsage(rec *UsageRecord) error {
	ids := []struct {
		field, v string
		max      int
		required bool
	}{
		{"request id", rec.RequestID, MaxRequestIDBytes, true},
		{"key id", rec.KeyID, maxKeyIDBytes, true},
		{"model", rec.Model, maxNameBytes, false},
		{"provider", rec.Provider, maxNameBytes, false},
		{"route", rec.Route, maxNameBytes, false},
		{"estimate reason", rec.EstimateReason, maxNameBytes, false},
	}
	for _, f := range ids {
		if err := checkID(rec, f.field, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	if err := validAccountID(rec.Account); err != nil {
		return fmt.Errorf("usage record %q: %w", ShortID(rec.RequestID), err)
	}
	for _, n := range []int64{rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens} {
		if n < 0 || n > MaxTokens {
			return errorOf(ErrInvalid, "usage record %q: token count %d is out of range (0 to %d)", ShortID(rec.RequestID), n, MaxTokens)
		}
	}
	for _, m := range []struct {
		name string
		v    decimal.Decimal
	}{{"cost", rec.Cost}, {"overage", rec.Overage}} {
		switch {
		case m.v.Sign() < 0:
			return errorOf(ErrInvalid, "usage record %q: %s %s is negative", ShortID(rec.RequestID), m.name, ShortID(m.v.String()))
		case m.v.GreaterThan(maxCost):
			return errorOf(ErrInvalid, "usage record %q: %s %s is over %s", ShortID(rec.RequestID), m.name, ShortID(m.v.String()), maxCost)
		case len(m.v.String()) > maxCostChars:
			return errorOf(ErrInvalid, "usage record %q: %s %s has more than %d characters", ShortID(rec.RequestID), m.name, ShortID(m.v.String()), maxCostChars)
		}
	}
	if p := rec.Payment; p != nil {
		for _, f := range paymentFields {
			if f != nil && len(*f(p)) > maxNameBytes {
				return errorOf(ErrInvalid, "usage record %q: a payment field is over %d bytes", ShortID(rec.RequestID), maxNameBytes)
			}
		}
		if p.AmountUSD.Sign() < 0 || p.AmountUSD.GreaterThan(maxCost) || len(p.AmountUSD.String()) > maxCostChars {
			return errorOf(ErrInvalid, "usage record %q: payment amount %s is out of range", ShortID(rec.RequestID), ShortID(p.AmountUSD.String()))
		}
		if p.Status != PaymentSettled && p.Status != PaymentPending && p.Status != PaymentUnpaid && p.Status != "" {
			return errorOf(ErrInvalid, "usage record %q: payment status %q is not settled, pending or unpaid", ShortID(rec.RequestID), ShortID(p.Status))
		}
	}
	// Keys hold unix nanoseconds, which end in 2262.
	if y := rec.Time.Year(); y < 1970 || y > 2261 {
		return errorOf(ErrInvalid, "usage record %q: time %v is out of range (1970 to 2261)", ShortID(rec.RequestID), rec.Time)
	}
	return nil
}

// UsageTotals are the counters every usage aggregate keeps: a usage_agg or usage_route value,
// a row, a summary.
type UsageTotals struct {
	Requests          int64           `json:"requests"`
	PromptTokens      int64           `json:"prompt_tokens"`
	CompletionTokens  int64           `json:"completion_tokens"`
	CachedTokens      int64           `json:"cached_tokens"`
	EstimatedRequests int64           `json:"estimated_requests"`
	Cost              decimal.Decimal `json:"cost"`
	// Paid is what x402 payments settled for these requests, in USD (their Cost was not
	// debited from credits); nil when none was paid. Pending is what x402 payments whose
	// settlement is still being resolved amount to, Unpaid what never settled (those results
	// were served unpaid); nil when none.
	Paid    *decimal.Decimal `json:"paid,omitempty"`
	Pending *decimal.Decimal `json:"pending,omitempty"`
	Unpaid  *decimal.Decimal `json:"unpaid,omitempty"`
}

// Add adds o to t.
func (t *UsageTotals) Add(o UsageTotals) {
	t.Requests += o.Requests
	t.PromptTokens += o.PromptTokens
	t.CompletionTokens += o.CompletionTokens
	t.CachedTokens += o.CachedTokens
	t.EstimatedRequests += o.EstimatedRequests
	t.Cost = t.Cost.Add(o.Cost)
	addPaid(&t.Paid, o.Paid)
	addPaid(&t.Pending, o.Pending)
	addPaid(&t.Unpaid, o.Unpaid)
}

// addPaid adds d to *sum; nil is nothing. A sum that comes back to zero is nil again.
func addPaid(sum **decimal.Decimal, d *decimal.Decimal) {
	if d == nil {
		return
	}
	v := *d
	if *sum != nil {
		v = (*sum).Add(v)
	}
	*sum = &v
}

// paymentTotal is the field of t that counts payments in status.
func (t *UsageTotals) paymentTotal(status string) **decimal.Decimal {
	switch status {
	case PaymentPending:
		return &t.Pending
	case PaymentUnpaid:
		return &t.Unpaid
	}
	return &t.Paid
}

// movePayment moves usd from the payments in status from to those in status to (a pending
// payment that settled, or did not). A pending total that comes back to zero is dropped.
func (t *UsageTotals) movePayment(usd decimal.Decimal, from, to string) {
	neg := usd.Neg()
	f := t.paymentTotal(from)
	addPaid(f, &neg)
	if from == PaymentPending && *f != nil && (*f).IsZero() {
		*f = nil
	}
	addPaid(t.paymentTotal(to), &usd)
}

// totals is one record as totals.
func (rec *UsageRecord) totals() UsageTotals {
	t := UsageTotals{Requests: 1, PromptTokens: rec.PromptTokens, CompletionTokens: rec.CompletionTokens,
		CachedTokens: rec.CachedTokens, Cost: rec.Cost}
	if rec.Estimated {
		t.EstimatedRequests = 1
	}
	if rec.Payment != nil {
		paid := rec.Payment.AmountUSD
		*t.paymentTotal(rec.Payment.Status) = &paid
	}
	return t
}

func usageKey(t time.Time, requestID string) []byte {
	k := make([]byte, 8, 8+len(requestID))
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	return append(k, requestID...)
}

func usageKeyTime(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))).UTC()
}

func aggKey(day, keyID, account, model string) []byte {
	return []byte(day + "\x00" + keyID + "\x00" + account + "\x00" + model)
}

func spendKey(month, keyID string) []byte { return []byte(month + "\x00" + keyID) }

func routeAggKey(route, model string) []byte { return []byte(route + "\x00" + model) }

// usageFormatV1 starts a compact usage value; JSON values start with '{'.
const usageFormatV1 = 0x01

// Field numbers of the compact usage value. Never reuse a number.
const (
	fieldKeyID protowire.Number = iota + 1
	fieldAccount
	fieldModel
	fieldProvider
	fieldRoute
	fieldPromptTokens
	fieldCompletionTokens
	fieldCachedTokens
	fieldCost
	fieldEstimated
	fieldPayment        // a nested value: paymentFields
	fieldOverage        // a decimal string, left out when zero
	fieldEstimateReason // a string, left out when empty
)

// paymentFields are the field numbers inside fieldPayment, in Payment's order.
var paymentFields = []func(p *Payment) *string{
	func(p *Payment) *string { return &p.Endpoint }, func(p *Payment) *string { return &p.Scheme },
	func(p *Payment) *string { return &p.Network }, func(p *Payment) *string { return &p.Asset },
	func(p *Payment) *string { return &p.Payer }, func(p *Payment) *string { return &p.Amount },
	nil, // AmountUSD, a decimal string
	func(p *Payment) *string { return &p.Transaction },
	func(p *Payment) *string { return &p.Status }, func(p *Payment) *string { return &p.Reason },
}

// stringField and intField map field numbers to the record's fields; nil for other numbers.
func (rec *UsageRecord) stringField(n protowire.Number) *string {
	switch n {
	case fieldKeyID:
		return &rec.KeyID
	case fieldAccount:
		return &rec.Account
	case fieldModel:
		return &rec.Model
	case fieldProvider:
		return &rec.Provider
	case fieldRoute:
		return &rec.Route
	case fieldEstimateReason:
		return &rec.EstimateReason
	}
	return nil
}

func (rec *UsageRecord) intField(n protowire.Number) *int64 {
	switch n {
	case fieldPromptTokens:
		return &rec.PromptTokens
	case fieldCompletionTokens:
		return &rec.CompletionTokens
	case fieldCachedTokens:
		return &rec.CachedTokens
	}
	return nil
}

// encodeUsage is a record's stored value (time and request id are in its key). Empty strings
// and zero counts are left out.
func encodeUsage(rec *UsageRecord) []byte {
	b := make([]byte, 1, 96)
	b[0] = usageFormatV1
	for n := fieldKeyID; n <= fieldRoute; n++ {
		if v := *rec.stringField(n); v != "" {
			b = protowire.AppendString(protowire.AppendTag(b, n, protowire.BytesType), v)
		}
	}
	for n := fieldPromptTokens; n <= fieldCachedTokens; n++ {
		if v := *rec.intField(n); v != 0 {
			b = protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), uint64(v))
		}
	}
	b = protowire.AppendString(protowire.AppendTag(b, fieldCost, protowire.BytesType), rec.Cost.String())
	if rec.Estimated {
		b = protowire.AppendVarint(protowire.AppendTag(b, fieldEstimated, protowire.VarintType), 1)
	}
	if rec.EstimateReason != "" {
		b = protowire.AppendString(protowire.AppendTag(b, fieldEstimateReason, protowire.BytesType), rec.EstimateReason)
	}
	if !rec.Overage.IsZero() {
		b = protowire.AppendString(protowire.AppendTag(b, fieldOverage, protowire.BytesType), rec.Overage.String())
	}
	if p := rec.Payment; p != nil {
		var pb []byte
		for i, f := range paymentFields {
			v := p.AmountUSD.String()
			if f != nil {
				v = *f(p)
			}
			pb = protowire.AppendString(protowire.AppendTag(pb, protowire.Number(i+1), protowire.BytesType), v)
		}
		b = protowire.AppendBytes(protowire.AppendTag(b, fieldPayment, protowire.BytesType), pb)
	}
	return b
}

// decodePayment reads a nested payment value.
func decodePayment(b []byte) (*Payment, error) {
	p := &Payment{AmountUSD: decimal.Zero}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		i := int(num) - 1
		if typ != protowire.BytesType || i < 0 || i >= len(paymentFields) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		s, n := protowire.ConsumeString(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if f := paymentFields[i]; f != nil {
			*f(p) = s
		} else if d, err := decimal.NewFromString(s); err == nil {
			p.AmountUSD = d
		} else {
			return nil, err
		}
	}
	if p.Status == "" {
		p.Status = PaymentSettled // written before statuses existed
	}
	return p, nil
}

var errUsageValue = errors.New("malformed usage value")

// decodeUsage reads the record stored at k with value v, in either form.
func decodeUsage(k, v []byte, rec *UsageRecord) error {
	if len(k) < 8 {
		return fmt.Errorf("store: malformed usage key %q", ShortID(string(k)))
	}
	if len(v) > 0 && v[0] == '{' {
		err := jsonUnmarshal(v, rec) // written before the compact form
		if err == nil && rec.Payment != nil && rec.Payment.Status == "" {
			rec.Payment.Status = PaymentSettled
		}
		return err
	}
	*rec = UsageRecord{RequestID: string(k[8:]), Time: usageKeyTime(k), Cost: decimal.Zero}
	bad := func(why error) error {
		return fmt.Errorf("store: usage record %q: %w: %w", ShortID(rec.RequestID), errUsageValue, why)
	}
	if len(v) == 0 || v[0] != usageFormatV1 {
		return bad(errors.New("unknown format"))
	}
	for b := v[1:]; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return bad(protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (rec.stringField(num) != nil || num == fieldCost || num == fieldOverage):
			var s string
			if s, n = protowire.ConsumeString(b); n < 0 {
				break
			}
			if f := rec.stringField(num); f != nil {
				*f = s
			} else if d, err := decimal.NewFromString(s); err != nil {
				return bad(err)
			} else if num == fieldCost {
				rec.Cost = d
			} else {
				rec.Overage = d
			}
		case typ == protowire.BytesType && num == fieldPayment:
			var pb []byte
			if pb, n = protowire.ConsumeBytes(b); n < 0 {
				break
			}
			p, err := decodePayment(pb)
			if err != nil {
				return bad(err)
			}
			rec.Payment = p
		case typ == protowire.VarintType && (rec.intField(num) != nil || num == fieldEstimated):
			var x uint64
			if x, n = protowire.ConsumeVarint(b); n < 0 {
				break
			}
			if num == fieldEstimated {
				rec.Estimated = x != 0
			} else {
				*rec.intField(num) = int64(x)
			}
		default: // a field added later: skip it
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return bad(protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// indexValue is what the idempotency index keeps for a record: its time, the first 8 bytes of
// its usage key (older files keep the whole usage key; the first 8 bytes are the same).
func indexValue(uKey []byte) []byte { return uKey[:8:8] }

// indexPointsAt reports whether index value v belongs to the record stored at uKey.
func indexPointsAt(v, uKey []byte) bool { return len(v) >= 8 && string(v[:8]) == string(uKey[:8]) }

// putUsage writes a record's own rows, the record then its index entry, or nothing: a Put
// that fails leaves nothing of the record behind. bbolt refuses a key or value before
// changing anything, so the transaction stays good for the other records.
func putUsage(usage, byReq *bolt.Bucket, uKey, reqKey, value []byte) error {
	if err := usage.Put(uKey, value); err != nil {
		return putError(reqKey, err)
	}
	if err := byReq.Put(reqKey, indexValue(uKey)); err != nil {
		if derr := usage.Delete(uKey); derr != nil {
			return &undoError{fmt.Errorf("store: undo usage record %q: %w", ShortID(string(reqKey)), derr)}
		}
		return putError(reqKey, err)
	}
	return nil
}

// undoError is a record whose own rows could not be taken back: its transaction must fail.
type undoError struct{ err error }

func (e *undoError) Error() string { return e.err.Error() }
func (e *undoError) Unwrap() error { return e.err }

// putError says which record bbolt refused; refusals of the record's own key or value are
// ErrInvalid (trying again cannot help).
func putError(reqKey []byte, err error) error {
	for _, own := range []error{berrors.ErrKeyRequired, berrors.ErrKeyTooLarge, berrors.ErrValueTooLarge, berrors.ErrIncompatibleValue} {
		if errors.Is(err, own) {
			return fmt.Errorf("store: usage record %q: %w: %w", ShortID(string(reqKey)), ErrInvalid, err)
		}
	}
	return fmt.Errorf("store: usage record %q: %w", ShortID(string(reqKey)), err)
}
