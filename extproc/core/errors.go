package core

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/store"
)

// APIError is an error the client sees: an HTTP status and the spec's error body. Code is a
// stable machine-readable string; Message says what was wrong and how to fix it.
type APIError struct {
	Status  int
	Code    string
	Message string
	// Headers go on the answer besides the body (a 402's PAYMENT-REQUIRED).
	Headers map[string]string
	// Operator is what the gateway's operator can do about it (a command to run), for the
	// operator's log (hints.go); never sent to the client.
	Operator string
	// Malformed: a 400 for a request that cannot be read (no body, an unreadable form), which
	// a paid endpoint keeps at 400 where a refused parameter is 422 (paidRefusal).
	Malformed bool
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func Errorf(status int, code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Noted is e with note added to its message (a copy: e may be one of the shared errors).
func (e *APIError) Noted(note string) *APIError {
	c := *e
	c.Message += "; " + note
	return &c
}

// ErrorBody is the spec's error shape: {"error": {"message", "code", "request_id"}}.
type ErrorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message   string `json:"message"`
	Code      string `json:"code"`
	RequestID string `json:"request_id,omitempty"`
}

// Body renders e for the request with id requestID.
func (e *APIError) Body(requestID string) []byte {
	b, _ := json.Marshal(ErrorBody{errorFields{e.Message, e.Code, requestID}})
	return b
}

// Errors the request path returns; their messages name the fix.
var (
	ErrMissingKey = Errorf(http.StatusUnauthorized, "invalid_api_key",
		"missing API key: send Authorization: Bearer ale-<key> (the gateway's operator gives out keys)")
	ErrMalformedKey = Errorf(http.StatusUnauthorized, "invalid_api_key",
		"malformed API key: Tollway keys look like ale- followed by 43 characters; check for truncation or extra spaces")
	ErrInvalidKey = Errorf(http.StatusUnauthorized, "invalid_api_key",
		"invalid API key: it is unknown, revoked or rotated; use a current key (ask the gateway's operator for one)")
	ErrNoBody = Malformed(Errorf(http.StatusBadRequest, "invalid_request",
		"request body is empty: send a JSON object with model and messages"))
)

// Malformed marks e, a 400, as the refusal of a request that cannot be read.
func Malformed(e *APIError) *APIError {
	e.Malformed = true
	return e
}

// UpstreamError converts a provider's error body into the spec's shape, keeping the provider's
// message and code where it has them.
func UpstreamError(status int, provider string, body []byte) *APIError {
	var shaped struct {
		Error json.RawMessage `json:"error"`
	}
	e := &APIError{Status: status, Code: "upstream_error"}
	if json.Unmarshal(body, &shaped) == nil && len(shaped.Error) > 0 {
		ReadProviderError(shaped.Error, e)
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("provider %s answered HTTP %d: %s", provider, status, clipBody(body))
	}
	return e
}

// ReadProviderError fills e's message and code from a provider's "error" value: an object with
// message and a code (a string; else its type, else Gemini's status in lower case), or a plain
// string. What the value lacks stays as it was.
func ReadProviderError(raw json.RawMessage, e *APIError) {
	var obj struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
		Status  string          `json:"status"` // Gemini: "INVALID_ARGUMENT", with a numeric code
	}
	var str string
	switch {
	case json.Unmarshal(raw, &str) == nil:
		e.Message = cmp.Or(str, e.Message)
	case json.Unmarshal(raw, &obj) == nil && obj.Message != "":
		// A code without a message explains nothing: the caller's fallback says more.
		e.Message = obj.Message
		var code string
		_ = json.Unmarshal(obj.Code, &code)
		e.Code = cmp.Or(code, obj.Type, strings.ToLower(obj.Status), e.Code)
	}
}

// clipBody is a provider's answer quoted in a message: at most 512 bytes of it.
func clipBody(body []byte) string { return provider.Clip(string(body), 512) }

// CodeRateLimited is the code of a request over its key's (or route's, or payer's) rate
// limits: 429, with Retry-After. SDKs retry it after that wait, and it then succeeds.
const CodeRateLimited = "rate_limit_exceeded"

// rateRefusal is the 429 of a request that came wait too early, or (wait ratelimit.TooLarge
// with its tokens over the whole limit) of one that can never pass.
func rateRefusal(o RateOwner, tokens int64, wait time.Duration, st ratelimit.Status) *APIError {
	secs := max(int64(math.Ceil(wait.Seconds())), 1)
	// A route's limit is every caller's together: the message names it, and whose limit to raise.
	of, higher := "", "a higher limit"
	if o.Route != "" {
		of, higher = " of route "+o.Route+" (every request through it, all keys together)", "a higher limit on route "+o.Route
	}
	var e *APIError
	if wait == ratelimit.TooLarge && o.Limits.Tokens > 0 && tokens > o.Limits.Tokens {
		e = Errorf(http.StatusTooManyRequests, CodeRateLimited,
			"this request alone is over the rate limit on tokens per minute%s: about %d tokens, limit %d; send a shorter prompt (or fewer, shorter inputs to embed), or ask the gateway's operator for %s", of, tokens, o.Limits.Tokens, higher)
	} else {
		which := "requests"
		if o.Limits.Tokens > 0 && st.Tokens.Remaining == 0 && (o.Limits.Requests == 0 || st.Requests.Remaining > 0) {
			which = "tokens"
		}
		limit := o.Limits.Requests
		if which == "tokens" {
			limit = o.Limits.Tokens
		}
		e = Errorf(http.StatusTooManyRequests, CodeRateLimited,
			"rate limit reached on %s per minute%s: limit %d; retry after %d s (the Retry-After header; the x-ratelimit-* headers say what is left), or ask the gateway's operator for %s", which, of, limit, secs, higher)
	}
	e.Headers = rateHeaders(st)
	e.Headers["retry-after"] = strconv.FormatInt(secs, 10)
	return e
}

// HoldRefused says why the ledger refused a hold of worst for key k (nil: it did not); lower
// names what the client can reduce.
func HoldRefused(err error, k *KeyInfo, worst decimal.Decimal, lower string) *APIError {
	switch {
	case errors.Is(err, billing.ErrInsufficientCredits):
		e := Errorf(http.StatusPaymentRequired, "insufficient_credits",
			"account %q does not have the credits this request may cost (up to $%s); ask the gateway's operator to add credits, or %s",
			k.Account, worst.String(), lower)
		e.Operator = fmt.Sprintf("account %s does not have the credits its requests may cost: add credits with `tollway accounts credit %s AMOUNT`",
			k.Account, k.Account)
		return e
	case errors.Is(err, billing.ErrSpendLimit):
		return Errorf(http.StatusForbidden, "spend_limit_exceeded",
			"this key's monthly spend limit of $%s would be exceeded (this request may cost up to $%s); %s, wait for next month (UTC), or ask the gateway's operator to raise the limit (GET /v1/key shows what remains)",
			k.MonthlyLimit.String(), worst.String(), lower)
	case errors.Is(err, store.ErrUnavailable): // a budget slice ran out with the store down
		e := Errorf(http.StatusServiceUnavailable, "store_unavailable", "the gateway cannot reach its store to lease budget for this request; nothing was charged; retry later")
		e.Headers = map[string]string{"retry-after": "10"}
		return e
	case err != nil:
		return Errorf(http.StatusInternalServerError, "internal_error", "admission: %v", err)
	}
	return nil
}

// JSONSyntax renders a tokenizer error for a client.
func JSONSyntax(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "it ends too early"
	}
	return strings.TrimPrefix(err.Error(), "jsontext: ")
}
