package x402

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Sentinels: every refusal of this package matches exactly one with errors.Is, so the gateway
// maps a kind, not a message, to its HTTP status (Status does it).
var (
	// ErrMalformed: the PAYMENT-SIGNATURE header or its payload cannot be read (400).
	ErrMalformed = errors.New("x402: malformed payment")
	// ErrInvalid: the credential was read but this gateway refuses it before any facilitator
	// call: wrong signer, recipient, amount, asset, time window, ... (402).
	ErrInvalid = errors.New("x402: payment refused")
	// ErrRejected: the facilitator's /verify said the credential is not valid (402).
	ErrRejected = errors.New("x402: payment rejected by the facilitator")
	// ErrSettleFailed: the facilitator's /settle answered success false (402 with
	// PAYMENT-RESPONSE success:false).
	ErrSettleFailed = errors.New("x402: settlement failed")
	// ErrUnavailable: the facilitator could not be used (unreachable, timeout, 5xx, an answer
	// without a verdict). Before the business call the gateway answers 503 and never runs it
	// unpaid; a /settle that never left is settled later, like ErrSettleUnknown.
	ErrUnavailable = errors.New("x402: facilitator unavailable")
	// ErrSettleUnknown: /settle was sent and no verdict came back, so the payer may have been
	// charged. The gateway returns the result and settles again in the background (never an
	// HTTP status of its own).
	ErrSettleUnknown = errors.New("x402: settlement outcome unknown")
	// ErrConfig: the x402 configuration is wrong; the message names the YAML path.
	ErrConfig = errors.New("x402: invalid configuration")
	// ErrQuote: an exact option priced per request got no usable quote (a gateway bug, 500).
	ErrQuote = errors.New("x402: no usable quote")
)

// Error is a refusal with a stable machine code (the error body's `code`) and a message that
// names the problem and the fix. Messages are safe to show the client: they never hold a
// signature, a key or a whole header.
type Error struct {
	Kind error  // one of the sentinels above
	Code string // stable, snake_case
	Msg  string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Status is the HTTP status the gateway answers for err (docs/x402.md#statuses): 400 malformed, 402
// for a payment refused here, by /verify or by /settle, 503 when the facilitator is unavailable,
// 500 for anything else.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrRejected), errors.Is(err, ErrSettleFailed):
		return http.StatusPaymentRequired
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Code is err's stable code, or "" when err is not one of this package's refusals.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// longHex is a run of hex long enough to be a signature, a hash or a key.
var longHex = regexp.MustCompile(`(0x)?[0-9a-fA-F]{41,}`)

// quote renders text that came from outside (a client's field, a facilitator's reason) for a
// message: printable ASCII only, long hex runs elided (never a signature), at most 96 bytes.
func quote(s string) string {
	s = longHex.ReplaceAllStringFunc(s, func(h string) string { return h[:10] + "..." })
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 96 {
			b.WriteString("...")
			break
		}
		if r < ' ' || r > '~' {
			r = '?'
		}
		b.WriteRune(r)
	}
	return `"` + b.String() + `"`
}
