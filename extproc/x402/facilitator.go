package x402

// The x402 facilitator's HTTP API: POST /verify and POST /settle with {x402Version,
// paymentPayload, paymentRequirements}, GET /supported. The only I/O of this package.
//
// Errors tell apart what the gateway answers differently: ErrUnavailable (a /verify or
// /supported without a verdict, or a /settle that never left: 503 before the business call),
// ErrRejected (/verify said invalid: 402 with the reason), ErrSettleFailed (/settle refused:
// success false with a reason, or a 4xx refusing the request; nothing moved) and
// ErrSettleUnknown (/settle was sent and no verdict came back: a timeout, a dropped
// connection, a 5xx, an answer that is no verdict, or the facilitator's own
// settlement_pending; it may have settled). Settling the same authorization again is safe (its
// nonce is single use) and is how an unknown outcome is learned: see SpentNonce.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DefaultTimeout bounds each facilitator call when Facilitator.Timeout is zero (the config's
// x402.facilitator_timeout default): /settle waits for the transfer to be mined.
const DefaultTimeout = 60 * time.Second

// ReasonSettlementPending is the errorReason of a settlement whose outcome is not known yet:
// x402's own (a facilitator that broadcast the transaction and has no receipt yet answers it,
// with the transaction) and the gateway's PAYMENT-RESPONSE while it resolves one.
const ReasonSettlementPending = "settlement_pending"

// maxAnswer bounds a facilitator answer; a real one is a few hundred bytes.
const maxAnswer = 64 << 10

// Facilitator is a client of one facilitator. It is safe for concurrent use once built.
type Facilitator struct {
	URL  string // base URL, without /verify
	HTTP *http.Client
	// Timeout bounds each call (verify, settle, supported); zero means DefaultTimeout.
	Timeout time.Duration
}

// NewFacilitator is a client of the facilitator at baseURL with the default timeout and its own
// connection pool. Redirects are not followed: a facilitator that moved is a configuration error.
func NewFacilitator(baseURL string) *Facilitator {
	tr := &http.Transport{
		Proxy:               nil, // the facilitator is configured directly, never through a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &Facilitator{
		URL: strings.TrimRight(baseURL, "/"),
		HTTP: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
	}
}

// CallTimeout is how long one call may take.
func (f *Facilitator) CallTimeout() time.Duration {
	if f.Timeout > 0 {
		return f.Timeout
	}
	return DefaultTimeout
}

// VerifyResponse is /verify's answer.
type VerifyResponse struct {
	IsValid       bool   `json:"isValid"`
	InvalidReason string `json:"invalidReason,omitempty"`
	Payer         string `json:"payer,omitempty"`
}

// SupportedKind is one (scheme, network) a facilitator settles.
type SupportedKind struct {
	X402Version int            `json:"x402Version"`
	Scheme      string         `json:"scheme"`
	Network     string         `json:"network"`
	Extra       jsontext.Value `json:"extra,omitzero"`
}

// Supported is /supported's answer.
type Supported struct {
	Kinds      []SupportedKind     `json:"kinds"`
	Extensions []string            `json:"extensions"`
	Signers    map[string][]string `json:"signers"`
}

// request is the body of /verify and /settle. The payload goes as the client sent it.
type request struct {
	X402Version         int            `json:"x402Version"`
	PaymentPayload      jsontext.Value `json:"paymentPayload"`
	PaymentRequirements Requirements   `json:"paymentRequirements"`
}

func body(p *PaymentPayload, req Requirements) request {
	raw := p.Raw
	if len(raw) == 0 { // built in Go, not decoded from a header
		raw, _ = json.Marshal(p)
	}
	return request{X402Version: Version, PaymentPayload: raw, PaymentRequirements: req}
}

// Verify asks the facilitator whether p pays req (the offered requirement, for upto the cap).
// A valid answer returns nil; an invalid one an *Error of kind ErrRejected carrying the
// facilitator's reason.
func (f *Facilitator) Verify(ctx context.Context, p *PaymentPayload, req Requirements) (VerifyResponse, error) {
	var vr VerifyResponse
	status, raw, _, err := f.call(ctx, http.MethodPost, "/verify", body(p, req))
	if err != nil {
		return vr, err
	}
	var probe map[string]jsontext.Value
	verdict := json.Unmarshal(raw, &probe) == nil && probe["isValid"] != nil && json.Unmarshal(raw, &vr) == nil
	switch {
	case status == http.StatusOK && verdict && vr.IsValid:
		return vr, nil
	case status < 500 && verdict && !vr.IsValid: // @x402/core also answers a refusal with a 4xx and a verdict
		return vr, refuse(ErrRejected, "payment_rejected", "the facilitator refused the payment: %s", reasonOf(vr.InvalidReason))
	}
	return vr, unavailable("/verify", status, raw)
}

// Settle asks the facilitator to execute p for req: the offered requirement for exact, for upto
// the one Offer.Charge makes (amount = the actual charge; never "0", which the caller burns
// locally). It returns the facilitator's answer (for PAYMENT-RESPONSE; its own errorMessage
// dropped) and, unless it settled:
//   - ErrSettleFailed: a refusal, so nothing moved: 2xx or 4xx with success false and a reason
//     other than settlement_pending, or a 4xx without a verdict (the request was refused as
//     such; not 408 or 429, which ask to come back);
//   - ErrSettleUnknown: it was sent and may have settled: no answer in time, the connection
//     lost after the request went out, a 3xx, 408, 429 or 5xx, an answer that is no verdict, or
//     settlement_pending (the answer's transaction, if any, is kept);
//   - ErrUnavailable: it never left (the connection could not be made), so nothing moved.
func (f *Facilitator) Settle(ctx context.Context, p *PaymentPayload, req Requirements) (SettlementResponse, error) {
	var sr SettlementResponse
	status, raw, sent, err := f.call(ctx, http.MethodPost, "/settle", body(p, req))
	if err != nil {
		if sent {
			return sr, refuse(ErrSettleUnknown, "settlement_unknown", "%s, after the settlement was sent: it may have settled", strings.TrimSuffix(err.Error(), "; try again later"))
		}
		return sr, err
	}
	var probe map[string]jsontext.Value
	verdict := json.Unmarshal(raw, &probe) == nil && probe["success"] != nil && json.Unmarshal(raw, &sr) == nil
	sr.ErrorMessage = ""
	if sr.Network == "" {
		sr.Network = req.Network
	}
	switch {
	case verdict && !sr.Success && sr.ErrorReason == ReasonSettlementPending:
		return sr, refuse(ErrSettleUnknown, "settlement_unknown", "the payment facilitator says the settlement is pending (transaction %s)", orNone(sr.Transaction))
	case status >= 200 && status < 300 && verdict && sr.Success:
		return sr, nil
	case status < 500 && verdict && !sr.Success && (status < 300 || refusing(status)):
		sr.Transaction = ""
		return sr, refuse(ErrSettleFailed, "settlement_failed", "the payment could not be settled: %s", reasonOf(sr.ErrorReason))
	case !verdict && refusing(status):
		return SettlementResponse{Network: req.Network}, refuse(ErrSettleFailed, "settlement_failed", "the payment facilitator refused the settlement request with status %d", status)
	}
	e := unavailable("/settle", status, raw)
	return SettlementResponse{}, refuse(ErrSettleUnknown, "settlement_unknown", "%s: it may have settled", strings.TrimSuffix(e.Msg, "; try again later"))
}

// refusing reports a 4xx that refuses the request as such (it was not acted on, and asking
// again the same way cannot help); 408 and 429 ask the client to come back.
func refusing(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// SpentNonce reports whether a refusal of a second settlement of one authorization says its
// nonce is spent: then the first one settled. @x402/evm (and PyPI x402) answer
// invalid_exact_evm_nonce_already_used for a spent EIP-3009 authorization (read on chain with
// authorizationState), and permit2_invalid_nonce for a Permit2 transfer whose nonce is used;
// their upto facilitator simulates before settling and then says permit2_simulation_failed
// (after checking the balance and the allowance, which it reports as such): for a credential
// the facilitator verified with the same simulation before the business call, only the spent
// nonce is left to fail it. Only meaningful for a settlement sent before (see ErrSettleUnknown).
func SpentNonce(scheme, reason string) bool {
	switch reason {
	case "invalid_exact_evm_nonce_already_used", "permit2_invalid_nonce":
		return true
	case "permit2_simulation_failed":
		return scheme == SchemeUpto
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "not given"
	}
	return quote(s)
}

// Supported reads what the facilitator settles (checked against the offers at start: see
// Supported.Check).
func (f *Facilitator) Supported(ctx context.Context) (Supported, error) {
	var s Supported
	status, raw, _, err := f.call(ctx, http.MethodGet, "/supported", nil)
	if err != nil {
		return s, err
	}
	if status != http.StatusOK || json.Unmarshal(raw, &s) != nil {
		return Supported{}, unavailable("/supported", status, raw)
	}
	return s, nil
}

// Check says why the facilitator would refuse payments for r: no kind for its x402 version,
// scheme and network, or (upto) a signer other than r's extra.facilitatorAddress.
func (s Supported) Check(r Requirements) error {
	for _, k := range s.Kinds {
		if k.X402Version != Version || k.Scheme != r.Scheme || k.Network != r.Network {
			continue
		}
		if r.Scheme != SchemeUpto {
			return nil
		}
		want, got := extraStrings(r.Extra)["facilitatorAddress"], extraStrings(k.Extra)["facilitatorAddress"]
		if sameAddress(want, got) {
			return nil
		}
		return fmt.Errorf("x402: the facilitator settles upto on %s as %s, not extra.facilitatorAddress %s: upto credentials would be refused: %w", r.Network, got, want, ErrConfig)
	}
	return fmt.Errorf("x402: the facilitator does not settle x402 v%d %s on %s: %w", Version, r.Scheme, r.Network, ErrConfig)
}

// call does one request and reads at most maxAnswer bytes of the answer, within the call
// timeout. A transport failure is an *Error of kind ErrUnavailable; sent says whether the whole
// request had been written by then (the facilitator may have acted on it). Statuses are the
// caller's.
func (f *Facilitator) call(ctx context.Context, method, path string, in any) (status int, raw []byte, sent bool, err error) {
	timeout := f.CallTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, false, fmt.Errorf("x402: encode %s request: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}})
	hreq, err := http.NewRequestWithContext(ctx, method, f.URL+path, rd)
	if err != nil {
		return 0, nil, false, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator URL is unusable (%v)", err)
	}
	hreq.Header.Set("Accept", "application/json")
	if in != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	client := f.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		why := "unreachable"
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			why = fmt.Sprintf("did not answer within %v", timeout)
		case wrote.Load():
			why = "closed the connection without an answer"
		}
		return 0, nil, wrote.Load(), refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator %s (%s); try again later", why, path)
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	switch {
	case err != nil:
		return 0, nil, true, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator's %s answer could not be read; try again later", path)
	case len(raw) > maxAnswer:
		return 0, nil, true, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator's %s answer is over %d bytes", path, maxAnswer)
	}
	return resp.StatusCode, raw, true, nil
}

// unavailable describes an answer that is not a verdict: its status and, from a JSON error
// body, its error text (quoted, never a payload).
func unavailable(path string, status int, raw []byte) *Error {
	var e struct {
		Error string `json:"error"`
	}
	detail := ""
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		detail = ": " + quote(e.Error)
	}
	return refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator answered %s with status %d and no verdict%s; try again later", path, status, detail)
}

// reasonOf is a facilitator's reason code made safe to repeat.
func reasonOf(r string) string {
	if r == "" {
		return "no reason given"
	}
	return quote(r)
}
