package x402

// The x402 facilitator's HTTP API: POST /verify and POST /settle with {x402Version,
// paymentPayload, paymentRequirements}, GET /supported. The only I/O of this package.
//
// Errors tell apart what the gateway answers differently: ErrUnavailable (unreachable, timeout,
// 5xx, redirect, an answer without a verdict: 503, never the business call unpaid), ErrRejected
// (/verify said invalid: 402 with the reason) and ErrSettleFailed (/settle said success false:
// 402 with PAYMENT-RESPONSE success:false). Settling twice is safe on chain (the nonce is single
// use), so a settle that timed out may be retried; it may also have settled.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Default timeouts. /settle waits for the transfer to be mined, /verify simulates it.
const (
	DefaultVerifyTimeout    = 10 * time.Second
	DefaultSettleTimeout    = 60 * time.Second
	DefaultSupportedTimeout = 10 * time.Second
)

// maxAnswer bounds a facilitator answer; a real one is a few hundred bytes.
const maxAnswer = 64 << 10

// Facilitator is a client of one facilitator. The zero timeouts mean the defaults; it is safe for
// concurrent use once built.
type Facilitator struct {
	URL              string // base URL, without /verify
	HTTP             *http.Client
	VerifyTimeout    time.Duration
	SettleTimeout    time.Duration
	SupportedTimeout time.Duration
}

// NewFacilitator is a client of the facilitator at baseURL with the default timeouts and its own
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
	status, raw, err := f.call(ctx, http.MethodPost, "/verify", body(p, req), orDefault(f.VerifyTimeout, DefaultVerifyTimeout))
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
// locally). A failed settlement returns the facilitator's answer (for PAYMENT-RESPONSE) and an
// *Error of kind ErrSettleFailed.
func (f *Facilitator) Settle(ctx context.Context, p *PaymentPayload, req Requirements) (SettlementResponse, error) {
	var sr SettlementResponse
	status, raw, err := f.call(ctx, http.MethodPost, "/settle", body(p, req), orDefault(f.SettleTimeout, DefaultSettleTimeout))
	if err != nil {
		return sr, err
	}
	var probe map[string]jsontext.Value
	verdict := json.Unmarshal(raw, &probe) == nil && probe["success"] != nil && json.Unmarshal(raw, &sr) == nil
	if sr.Network == "" {
		sr.Network = req.Network
	}
	switch {
	case status == http.StatusOK && verdict && sr.Success:
		return sr, nil
	case status < 500 && verdict && !sr.Success:
		sr.Transaction = ""
		return sr, refuse(ErrSettleFailed, "settlement_failed", "the payment could not be settled: %s", reasonOf(sr.ErrorReason))
	}
	return SettlementResponse{}, unavailable("/settle", status, raw)
}

// Supported reads what the facilitator settles (checked against the offers at start: see
// Supported.Check).
func (f *Facilitator) Supported(ctx context.Context) (Supported, error) {
	var s Supported
	status, raw, err := f.call(ctx, http.MethodGet, "/supported", nil, orDefault(f.SupportedTimeout, DefaultSupportedTimeout))
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

// call does one request and reads at most maxAnswer bytes of the answer. A transport failure is
// an *Error of kind ErrUnavailable; statuses are the caller's.
func (f *Facilitator) call(ctx context.Context, method, path string, in any, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, fmt.Errorf("x402: encode %s request: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, f.URL+path, rd)
	if err != nil {
		return 0, nil, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator URL is unusable (%v)", err)
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
		if errors.Is(err, context.DeadlineExceeded) {
			why = fmt.Sprintf("did not answer within %v", timeout)
		}
		return 0, nil, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator %s (%s); try again later", why, path)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	switch {
	case err != nil:
		return 0, nil, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator's %s answer could not be read; try again later", path)
	case len(raw) > maxAnswer:
		return 0, nil, refuse(ErrUnavailable, "facilitator_unavailable", "the payment facilitator's %s answer is over %d bytes", path, maxAnswer)
	}
	return resp.StatusCode, raw, nil
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

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
