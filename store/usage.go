package store

// Usage records: their shape, and the bounds every field must keep before it may reach a store.

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
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

// Payment is what an x402 payment settled (docs/x402.md#records).
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
	MaxKeyIDBytes     = 128 // store key ids are "key_" + 16 hex digits
	MaxNameBytes      = 256 // model, provider, route
	// MaxTokens bounds each token count (the gateway clamps to it before billing): no request
	// comes near it, and all-time sums of int64 counters cannot overflow before billions of
	// such records.
	MaxTokens = 1_000_000_000
	// MaxCostChars bounds a cost's decimal string (digits, point), so sums stay small and exact.
	MaxCostChars = 48
)

// MaxCost is the largest cost one request may settle (USD).
var MaxCost = decimal.New(1, 9)

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
		return Errorf(ErrInvalid, "usage record %q: %s is empty", ShortID(rec.RequestID), field)
	case len(v) > max:
		return Errorf(ErrInvalid, "usage record %q: %s is %d bytes, over the limit of %d", ShortID(rec.RequestID), field, len(v), max)
	case !utf8.ValidString(v):
		return Errorf(ErrInvalid, "usage record %q: %s is not valid UTF-8", ShortID(rec.RequestID), field)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Errorf(ErrInvalid, "usage record %q: %s %q contains a control character (NUL, newline ...)", ShortID(rec.RequestID), field, ShortID(v))
	}
	return nil
}

// Validate refuses (ErrInvalid), before any transaction, every record that is unreasonable or
// that a store could not key by its fields; what passes fits every key and value it is written to.
func (rec *UsageRecord) Validate() error {
	ids := []struct {
		field, v string
		max      int
		required bool
	}{
		{"request id", rec.RequestID, MaxRequestIDBytes, true},
		{"key id", rec.KeyID, MaxKeyIDBytes, true},
		{"model", rec.Model, MaxNameBytes, false},
		{"provider", rec.Provider, MaxNameBytes, false},
		{"route", rec.Route, MaxNameBytes, false},
		{"estimate reason", rec.EstimateReason, MaxNameBytes, false},
	}
	for _, f := range ids {
		if err := checkID(rec, f.field, f.v, f.max, f.required); err != nil {
			return err
		}
	}
	if err := ValidAccountID(rec.Account); err != nil {
		return fmt.Errorf("usage record %q: %w", ShortID(rec.RequestID), err)
	}
	for _, n := range []int64{rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens} {
		if n < 0 || n > MaxTokens {
			return Errorf(ErrInvalid, "usage record %q: token count %d is out of range (0 to %d)", ShortID(rec.RequestID), n, MaxTokens)
		}
	}
	for _, m := range []struct {
		name string
		v    decimal.Decimal
	}{{"cost", rec.Cost}, {"overage", rec.Overage}} {
		switch {
		case m.v.Sign() < 0:
			return Errorf(ErrInvalid, "usage record %q: %s %s is negative", ShortID(rec.RequestID), m.name, ShortID(m.v.String()))
		case m.v.GreaterThan(MaxCost):
			return Errorf(ErrInvalid, "usage record %q: %s %s is over %s", ShortID(rec.RequestID), m.name, ShortID(m.v.String()), MaxCost)
		case len(m.v.String()) > MaxCostChars:
			return Errorf(ErrInvalid, "usage record %q: %s %s has more than %d characters", ShortID(rec.RequestID), m.name, ShortID(m.v.String()), MaxCostChars)
		}
	}
	if p := rec.Payment; p != nil {
		for _, f := range p.texts() {
			if len(f) > MaxNameBytes {
				return Errorf(ErrInvalid, "usage record %q: a payment field is over %d bytes", ShortID(rec.RequestID), MaxNameBytes)
			}
		}
		if p.AmountUSD.Sign() < 0 || p.AmountUSD.GreaterThan(MaxCost) || len(p.AmountUSD.String()) > MaxCostChars {
			return Errorf(ErrInvalid, "usage record %q: payment amount %s is out of range", ShortID(rec.RequestID), ShortID(p.AmountUSD.String()))
		}
		if p.Status != PaymentSettled && p.Status != PaymentPending && p.Status != PaymentUnpaid && p.Status != "" {
			return Errorf(ErrInvalid, "usage record %q: payment status %q is not settled, pending or unpaid", ShortID(rec.RequestID), ShortID(p.Status))
		}
	}
	// Keys hold unix nanoseconds, which end in 2262.
	if y := rec.Time.Year(); y < 1970 || y > 2261 {
		return Errorf(ErrInvalid, "usage record %q: time %v is out of range (1970 to 2261)", ShortID(rec.RequestID), rec.Time)
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

// MovePayment moves usd from the payments in status from to those in status to (a pending
// payment that settled, or did not). A pending total that comes back to zero is dropped.
func (t *UsageTotals) MovePayment(usd decimal.Decimal, from, to string) {
	neg := usd.Neg()
	f := t.paymentTotal(from)
	addPaid(f, &neg)
	if from == PaymentPending && *f != nil && (*f).IsZero() {
		*f = nil
	}
	addPaid(t.paymentTotal(to), &usd)
}

// Totals is one record as totals.
func (rec *UsageRecord) Totals() UsageTotals {
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

// texts are the payment's text fields.
func (p *Payment) texts() []string {
	return []string{p.Endpoint, p.Scheme, p.Network, p.Asset, p.Payer, p.Amount, p.Transaction, p.Status, p.Reason}
}

// Normalize readies rec to be settled at now: a zero Time is now, times are UTC without a
// monotonic reading, and an absurd overage (a catalog price of dollars a token times a billion
// tokens) is kept at the most a record holds rather than losing the record: the bill was
// charged.
func (rec *UsageRecord) Normalize(now time.Time) {
	if rec.Time.IsZero() {
		rec.Time = now
	}
	rec.Time = rec.Time.UTC().Round(0)
	rec.Overage = decimal.Min(rec.Overage, MaxCost)
}

// CapDebit keeps rec's debit within what its account and key can take: no settlement takes a
// balance below zero or a key past its monthly limit (nil: none) given what it spent this
// month. The gateway's ledger already billed at most each request's hold, which both covered,
// so this cuts only when the books changed under it; what is cut moves to the record's overage.
// It reports whether rec changed.
func (rec *UsageRecord) CapDebit(balance, spent decimal.Decimal, limit *decimal.Decimal) bool {
	room := decimal.Max(balance, decimal.Zero)
	if limit != nil {
		room = decimal.Min(room, decimal.Max(limit.Sub(spent), decimal.Zero))
	}
	if !rec.Cost.GreaterThan(room) {
		return false
	}
	rec.Overage = decimal.Min(rec.Overage.Add(rec.Cost.Sub(room)), MaxCost)
	rec.Cost = room
	return true
}
