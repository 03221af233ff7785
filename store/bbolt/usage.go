package bbolt

// Usage records' stored form.
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
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tollway/tollway/store"
)

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
var paymentFields = []func(p *store.Payment) *string{
	func(p *store.Payment) *string { return &p.Endpoint }, func(p *store.Payment) *string { return &p.Scheme },
	func(p *store.Payment) *string { return &p.Network }, func(p *store.Payment) *string { return &p.Asset },
	func(p *store.Payment) *string { return &p.Payer }, func(p *store.Payment) *string { return &p.Amount },
	nil, // AmountUSD, a decimal string
	func(p *store.Payment) *string { return &p.Transaction },
	func(p *store.Payment) *string { return &p.Status }, func(p *store.Payment) *string { return &p.Reason },
}

// stringField and intField map field numbers to the record's fields; nil for other numbers.
func stringField(rec *store.UsageRecord, n protowire.Number) *string {
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

func intField(rec *store.UsageRecord, n protowire.Number) *int64 {
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
func encodeUsage(rec *store.UsageRecord) []byte {
	b := make([]byte, 1, 96)
	b[0] = usageFormatV1
	for n := fieldKeyID; n <= fieldRoute; n++ {
		if v := *stringField(rec, n); v != "" {
			b = protowire.AppendString(protowire.AppendTag(b, n, protowire.BytesType), v)
		}
	}
	for n := fieldPromptTokens; n <= fieldCachedTokens; n++ {
		if v := *intField(rec, n); v != 0 {
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
func decodePayment(b []byte) (*store.Payment, error) {
	p := &store.Payment{AmountUSD: decimal.Zero}
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
		p.Status = store.PaymentSettled // written before statuses existed
	}
	return p, nil
}

var errUsageValue = errors.New("malformed usage value")

// decodeUsage reads the record stored at k with value v, in either form.
func decodeUsage(k, v []byte, rec *store.UsageRecord) error {
	if len(k) < 8 {
		return fmt.Errorf("store: malformed usage key %q", store.ShortID(string(k)))
	}
	if len(v) > 0 && v[0] == '{' {
		err := jsonUnmarshal(v, rec) // written before the compact form
		if err == nil && rec.Payment != nil && rec.Payment.Status == "" {
			rec.Payment.Status = store.PaymentSettled
		}
		return err
	}
	*rec = store.UsageRecord{RequestID: string(k[8:]), Time: usageKeyTime(k), Cost: decimal.Zero}
	bad := func(why error) error {
		return fmt.Errorf("store: usage record %q: %w: %w", store.ShortID(rec.RequestID), errUsageValue, why)
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
		case typ == protowire.BytesType && (stringField(rec, num) != nil || num == fieldCost || num == fieldOverage):
			var s string
			if s, n = protowire.ConsumeString(b); n < 0 {
				break
			}
			if f := stringField(rec, num); f != nil {
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
		case typ == protowire.VarintType && (intField(rec, num) != nil || num == fieldEstimated):
			var x uint64
			if x, n = protowire.ConsumeVarint(b); n < 0 {
				break
			}
			if num == fieldEstimated {
				rec.Estimated = x != 0
			} else {
				*intField(rec, num) = int64(x)
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
			return &undoError{fmt.Errorf("store: undo usage record %q: %w", store.ShortID(string(reqKey)), derr)}
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
			return fmt.Errorf("store: usage record %q: %w: %w", store.ShortID(string(reqKey)), store.ErrInvalid, err)
		}
	}
	return fmt.Errorf("store: usage record %q: %w", store.ShortID(string(reqKey)), err)
}
