// Package paid is the x402 payment of a paid endpoint, as a wrapper around the processor of
// the business API it sells (extproc/chat, or extproc/tasks for media). The inner core.Processor
// reaches the payment through hooks it offers (chat.Payment: refuse a model, admit at the
// worst case, settle exact at the answer's headers, upto at its end or before a stream's
// [DONE]; tasks.Payment: admit, settle when the task is accepted) rather than the wrapper
// pricing the body and billing the answer around it: the payment is admitted between the
// inner processor's validation and its hold, and an upto stream's settlement is an event
// inside the answer before [DONE], so a decorator seeing only the messages could not keep
// those orders. The protocol itself is extproc/x402.
package paid

// Pay per request (docs/x402.md): POST {pay_url}/x402/{slug} runs the endpoint's business
// API (chat completions, videos, images) paid through x402 v2 instead of, or besides, an API
// key. The request is validated first (a body that cannot be read gets its 400, a refused
// business parameter its 422, before any payment is asked for), then priced: no
// PAYMENT-SIGNATURE is a 402 with PAYMENT-REQUIRED; a credential is matched against this
// request's offer, verified locally (forgeries never reach the facilitator), recorded as used
// (bbolt, before the business call: a copy while its request runs is a 409, a replay after it a
// 402; paying.go), verified by the facilitator, and only then does the business call run,
// routed and metered like a keyed one. It is settled only when it succeeded: exact before the
// first byte, upto at the end for the cost metered (docs/x402.md#settlement). Only the
// facilitator's refusal withholds the result; a settlement whose answer is lost is served as
// pending and finished by Settlements (settlements.go). The protocol itself is extproc/x402.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/spans"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// The x402 headers as Envoy carries them (lower case; HTTP header names are case-insensitive).
// HeaderPaymentSignature is read by the router from every request and never forwarded.
var (
	headerPaymentRequired  = strings.ToLower(x402.HeaderPaymentRequired)
	HeaderPaymentSignature = strings.ToLower(x402.HeaderPaymentSignature)
	headerPaymentResponse  = strings.ToLower(x402.HeaderPaymentResponse)
)

// Payments is the x402 configuration the server runs with; a reload replaces it.
type Payments struct {
	Offers      map[string]*x402.Offer // by slug
	Facilitator *x402.Facilitator      // its Timeout bounds each call (Envoy is told to wait)
	// Credentials records a credential as used, durably, failing with store.ErrExists when
	// it is.
	Credentials store.Credentials
	// Settlements resolves settlements whose outcome was unknown when the result went out
	// (one for the server's life: every reload passes the same); nil: they stay pending.
	Settlements *Settlements
}

// Endpoints are a server's paid endpoints: the x402 configuration it runs with and the
// credentials whose paid request is running.
type Endpoints struct {
	payments atomic.Pointer[Payments] // nil: no paid endpoints
	paying   inFlight
}

// Set turns the paid endpoints on (nil: off).
func (e *Endpoints) Set(p *Payments) { e.payments.Store(p) }

// Listed reports whether there are paid endpoints to name.
func (e *Endpoints) Listed() bool {
	ps := e.payments.Load()
	return ps != nil && len(ps.Offers) > 0
}

// Media is the processor of a request for kind's media endpoints, paid by pay (nil: the
// endpoint's task is read, not created).
type Media func(kind string, pay tasks.Payment) *tasks.Media

// exchange is a paid request: the router-level request, the server's paid endpoints, and
// its payment.
type exchange struct {
	*core.Exchange
	e     *Endpoints
	media Media
	pay   *payState // set once the request is a paid business call
}

// payState is one paid request's payment.
type payState struct {
	slug        string
	offer       *x402.Offer
	fac         *x402.Facilitator
	settlements *Settlements
	payload     *x402.PaymentPayload // nil: the request carries no PAYMENT-SIGNATURE
	offered     []x402.Requirements  // this request's offer (priced once the body is known)
	chosen      int                  // the offer the credential matched
	cred        x402.Credential
	// charge is what was settled (upto: the charge); resp the PAYMENT-RESPONSE (the
	// facilitator's settlement, the local burn of a zero charge, its refusal, or the pending
	// outcome) and header its value. done: the settlement was attempted; outcome says how it
	// went (SettleSettled, SettleRefused, SettlePending).
	charge  x402.Requirements
	resp    *x402.SettlementResponse
	header  string
	done    bool
	outcome string
	why     string // pending: why the outcome is unknown
	// recordID is the usage record's request id (also the pending settlement's); recorded:
	// the record was handed over.
	recordID string
	recorded bool
	// hold is the request's worst case, priced at admission: no settlement exceeds it.
	hold decimal.Decimal
	// key is the caller's key before the endpoint's models narrowed it (keyless: the
	// endpoint's account, every model); inUse the credential held while the request runs.
	key   *core.KeyInfo
	inUse string
	// x is the request paid for; bill what its answer cost and its usage record (the business
	// processor's, given at admission).
	x    *exchange
	bill func() (decimal.Decimal, store.UsageRecord)
}

// payment is the request's payment as its business processor sees it (nil: keyed).
func (x *exchange) payment() chat.Payment {
	if x.pay == nil {
		return nil
	}
	return x.pay
}

// paidAccount is the account of requests paid without an API key: the endpoint's own.
func paidAccount(slug string) string { return store.PaidAccountPrefix + slug }

// Processor is the processor of a paid endpoint ({pay_url}/x402/{slug}): the payment is
// admitted at the headers, then the request runs as the business API it sells (chat or a
// media task), whose processor it wraps.
type Processor struct {
	x     *exchange
	inner core.Processor
}

// New is the processor of paid request x; media makes the processor of a media endpoint.
func (e *Endpoints) New(x *core.Exchange, media Media) *Processor {
	return &Processor{x: &exchange{Exchange: x, e: e, media: media}}
}

func (p *Processor) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x, hd := p.x, &p.x.Head
	resp := p.headers(strings.TrimPrefix(hd.Path, core.PayPrefix), hd.Method, hd.Auth, hd.ContentType, hd.PaySig, h)
	if p.inner == nil { // the business API is chat, or the request was refused before its API was known
		p.inner = chat.New(x.Exchange, x.payment())
		if resp.GetImmediateResponse() == nil {
			x.StartAdmission(spans.OpChat) // its admission goes on at the body, in the chat processor
		}
	}
	return resp, nil
}

func (p *Processor) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return p.inner.RequestBody(b)
}

func (p *Processor) ResponseHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return p.inner.ResponseHeaders(h)
}

func (p *Processor) ResponseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return p.inner.ResponseBody(b)
}

func (p *Processor) Done() {
	if p.inner != nil {
		p.inner.Done()
	}
}

// paidHeaders admits POST {pay_url}/x402/{slug} (and GET {pay_url}/x402/{slug}/{task id} of a
// task it created); it returns nil to go on to the body.
func (p *Processor) headers(rest, method, auth, contentType, sig string, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	x := p.x
	ps := x.e.payments.Load()
	slug, taskID, _ := strings.Cut(rest, "/")
	var offer *x402.Offer
	if ps != nil {
		offer = ps.Offers[slug]
	}
	if offer == nil {
		return x.Fail(core.Errorf(http.StatusNotFound, "payment_endpoint_not_found", "no paid endpoint %q; its URL is {pay_url}/x402/{slug} with a slug from the gateway's x402.endpoints", core.Clip(slug)))
	}
	ep := offer.Endpoint
	kind := core.MediaKind(ep.Target)
	// A key is needed when the endpoint says so (the payment does not replace it: docs/x402.md#order-of-checks);
	// one that is sent must be valid either way.
	if ep.RequireKey || auth != "" {
		if e := x.Authenticate(auth); e != nil {
			return x.Fail(e)
		}
	} else {
		x.Key = &core.KeyInfo{ID: paidAccount(slug), Account: paidAccount(slug)}
	}
	if taskID != "" {
		// Reading a task the endpoint created: its unguessable id is the capability (a client
		// that paid without a key has nothing else), within the endpoint's own account.
		if kind == "" || method != http.MethodGet {
			return x.Fail(core.Errorf(http.StatusNotFound, "not_found", "no endpoint %s %s; paid task endpoints answer GET %s%s/{id}", core.Clip(method), core.Clip(core.PayPrefix+rest), core.PayPrefix, slug))
		}
		return x.media(kind, nil).Headers(method, core.MediaPaths[kind]+"/"+taskID)
	}
	if method != http.MethodPost {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s%s is not supported; use POST (it runs POST %s)", core.Clip(method), core.PayPrefix, slug, ep.Target))
	}
	x.pay = &payState{slug: slug, offer: offer, fac: ps.Facilitator, settlements: ps.Settlements, key: x.Key, x: x}
	x.PaidEndpoint, x.Refine, x.Given = slug, paidRefusal, x.endPaying
	if len(ep.Models) > 0 {
		x.Key = x.Key.Narrowed(ep.Models)
	}
	if sig != "" {
		p, err := x402.DecodePaymentSignature(sig)
		if err != nil {
			return x.Fail(core.Errorf(x402.Status(err), x402.Code(err), "%v", err))
		}
		x.pay.payload = p
	}
	if kind != "" {
		// nil from Headers means "go on to the body", as for a keyed create.
		m := x.media(kind, taskPayment{x.pay})
		if resp := m.Headers(http.MethodPost, core.MediaPaths[kind]); resp != nil {
			return resp
		}
		p.inner = m
		return x.ReadBody(h)
	}
	if e := core.CheckContentType(contentType); e != nil {
		return x.Fail(e)
	}
	return x.ReadBody(h)
}

// endpointModels is the 403 of a request for target that the paid endpoint's models list
// refuses: it names the endpoint and its models (there may be no key to blame).
func (x *exchange) endpointModels(target string) *core.APIError {
	return core.Errorf(http.StatusForbidden, "model_not_allowed", "the paid endpoint %s serves only %s, not %s; send one of those as model",
		x.pay.slug, strings.Join(x.pay.offer.Endpoint.Models, ", "), target)
}

// paidRefusal is e as a paid endpoint answers it (docs/x402.md#statuses): 400 stays for a request that
// cannot be read (its headers, its PAYMENT-SIGNATURE, no body, JSON or form syntax); every
// other 400, a business parameter refused by the gateway's checks or by the provider, is 422
// with the same code and message. Keyed endpoints keep 400.
func paidRefusal(e *core.APIError) *core.APIError {
	if e.Status != http.StatusBadRequest || e.Malformed || unreadable[e.Code] {
		return e
	}
	c := *e
	c.Status = http.StatusUnprocessableEntity
	return &c
}

// unreadable are the codes of a request that cannot be read, whatever its parameters.
var unreadable = map[string]bool{"invalid_json": true, "invalid_request_id": true, "invalid_payment_signature": true, "invalid_payment_payload": true}

// payAdmit prices a validated paid request (worst: its worst-case cost, what a keyed request
// would hold) and checks its credential; nil means the business call may run. Every refusal
// before the facilitator's verify is free for the client; a credential refused by the
// facilitator stays used.
func (x *exchange) payAdmit(worst decimal.Decimal) *core.APIError {
	// The credential's claim is written to the shared database itself (with store.driver
	// postgres, not the spool): while it is down nothing paid can run, so the client is not
	// asked to sign.
	if e := x.SharedStoreRefusal(); e != nil {
		return e
	}
	p := x.pay
	p.hold = worst
	var quote decimal.Decimal
	if p.offer.NeedsQuote() {
		quote = worst
	}
	offered, err := p.offer.Requirements(quote)
	if err != nil {
		return core.Errorf(http.StatusInternalServerError, "payment_quote_failed", "this request cannot be priced for payment: %v", err)
	}
	p.offered = offered
	if p.payload == nil {
		return x.paymentRequired("PAYMENT-SIGNATURE header is required", "payment_required", "this endpoint is paid: read the PAYMENT-REQUIRED header, sign one of its options and send the same request again with PAYMENT-SIGNATURE")
	}
	i, why := x402.Match(p.payload.Accepted, offered)
	if i < 0 {
		return x.paymentRequired(why, "payment_mismatch", "the credential does not match this request's payment requirements: "+why+"; sign one of the options in PAYMENT-REQUIRED")
	}
	cred, err := x402.Verify(p.payload, offered[i], time.Now())
	if err != nil {
		if x402.Status(err) == http.StatusPaymentRequired {
			return x.paymentRequired(err.Error(), x402.Code(err), err.Error())
		}
		return core.Errorf(x402.Status(err), x402.Code(err), "%v", err)
	}
	// The payer's rates on this endpoint, before the credential is used or the facilitator
	// asked: a 429 leaves the credential good for a retry after Retry-After.
	if e := x.AdmitRateAs(payerRates(p.offer.Endpoint, cred.Payer)); e != nil {
		return e
	}
	if e := x.useCredential(cred); e != nil {
		return e
	}
	// From here the credential is used: a refusal below does not free it.
	if err := x.Envoy.ExtendTimeout(p.fac.CallTimeout() + 5*time.Second); err != nil {
		return core.ErrLostEnvoy
	}
	// Under the request's context: for a client gone there is no business call to verify.
	if _, err := p.fac.Verify(x.Context(), p.payload, offered[i]); err != nil {
		if errors.Is(err, x402.ErrUnavailable) {
			return core.Errorf(http.StatusServiceUnavailable, "facilitator_unavailable", "the payment facilitator cannot be reached, so the request was not run; retry later with a new credential")
		}
		return x.paymentRequired(err.Error(), x402.Code(err), err.Error())
	}
	p.chosen, p.cred = i, cred
	x.Payer = cred.Payer
	return nil
}

// payerRates is payer's rate owner on endpoint e: its address (case-insensitive) on this
// endpoint alone, under the endpoint's rate_limits.
func payerRates(e x402.Endpoint, payer string) core.RateOwner {
	var l ratelimit.Limits
	if r := e.RateLimits.RequestsPerMinute; r != nil {
		l.Requests = *r
	}
	if r := e.RateLimits.TokensPerMinute; r != nil {
		l.Tokens = *r
	}
	return core.RateOwner{ID: "x402:" + e.Slug + ":" + strings.ToLower(payer), Limits: l}
}

// paymentRequired is a 402 with a fresh PAYMENT-REQUIRED saying why (reason) in its error.
func (x *exchange) paymentRequired(reason, code, message string) *core.APIError {
	h, err := x402.EncodePaymentRequired(x.pay.offer.PaymentRequired(x.pay.offered, reason))
	if err != nil {
		return core.Errorf(http.StatusInternalServerError, "internal_error", "the payment requirements could not be encoded")
	}
	e := core.Errorf(http.StatusPaymentRequired, code, "%s", message)
	e.Headers = map[string]string{headerPaymentRequired: h, "cache-control": "no-store"}
	return e
}

// paySettle settles the business call that cost cost (draft: its usage record as known now):
// exact the signed amount, upto the cost (at most the signed cap; zero burns the credential
// with no transaction). It records the outcome in x.pay and returns an error only when the
// result must be withheld: the facilitator refused. An unknown outcome is pending: the result
// goes out and x.pay.settlements settles it again (deferSettlement).
func (x *exchange) paySettle(cost decimal.Decimal, draft store.UsageRecord) error {
	p := x.pay
	if p == nil || p.done {
		return nil
	}
	p.done = true
	req := p.offered[p.chosen]
	if req.Scheme == x402.SchemeUpto {
		charge, capped, err := p.offer.Charge(p.chosen, cost)
		if err != nil {
			return err
		}
		if capped {
			x.Log.Warn("x402: the request cost more than the signed cap; settling the cap", "endpoint", p.slug, "cost", cost.String(), "cap", req.Amount)
		}
		req = charge
	}
	p.charge = req
	var sr x402.SettlementResponse
	var err error
	if req.Amount == "0" { // nothing to transfer: the credential stays burned locally
		sr = x402.SettlementResponse{Success: true, Payer: p.cred.Payer, Network: req.Network}
	} else {
		_ = x.Envoy.ExtendTimeout(p.fac.CallTimeout() + 5*time.Second)
		// Deliberately not the request's context: the business call ran, and a stream the
		// client cut settles what was sent (finish); a settle cut short would only leave its
		// outcome unknown. x402.facilitator_timeout bounds it.
		sr, err = p.fac.Settle(context.WithoutCancel(x.Context()), p.payload, req)
	}
	switch {
	case err == nil:
		if sr.Amount == "" {
			sr.Amount = req.Amount
		}
		p.resp, p.outcome = &sr, SettleSettled
	case errors.Is(err, x402.ErrSettleFailed):
		sr.Success = false
		p.resp, p.outcome = &sr, SettleRefused
		x.Log.Error("x402: SETTLEMENT FAILED: the business call ran unpaid", "endpoint", p.slug, "payer", p.cred.Payer, "scheme", req.Scheme, "amount", req.Amount, "error", err)
	default:
		x.deferSettlement(sr, err, draft)
	}
	p.header, _ = x402.EncodeSettlementResponse(*p.resp)
	if p.outcome != SettlePending {
		p.settlements.observe(p.outcome)
	}
	if p.outcome == SettleRefused {
		return err
	}
	return nil
}

// pendingMessage is PAYMENT-RESPONSE's errorMessage while the settlement is pending.
const pendingMessage = "the settlement was sent but its outcome is not known yet; the gateway settles this authorization again until it is (it can be charged only once)"

// deferSettlement handles a settlement whose outcome is unknown (err): the payer may have been
// charged, so the result goes out with a PAYMENT-RESPONSE saying settlement_pending, and the
// settlement is handed, durably, to Settlements, with draft as its record for a crash.
func (x *exchange) deferSettlement(sr x402.SettlementResponse, err error, draft store.UsageRecord) {
	p := x.pay
	p.outcome, p.why = SettlePending, err.Error()
	p.resp = &x402.SettlementResponse{Success: false, ErrorReason: x402.ReasonSettlementPending, ErrorMessage: pendingMessage,
		Payer: p.cred.Payer, Transaction: sr.Transaction, Network: p.charge.Network, Amount: p.charge.Amount}
	x.Log.Warn("x402: settlement outcome unknown; the result is served and the settlement resolved in the background", "endpoint", p.slug,
		"payer", p.cred.Payer, "scheme", p.charge.Scheme, "amount", p.charge.Amount, "request_id", store.ShortID(x.payRecordID()), "error", err)
	if p.settlements == nil {
		return
	}
	reqJSON, jerr := json.Marshal(p.charge)
	if jerr != nil { // Requirements always marshal
		x.Log.Error("x402: a pending settlement cannot be kept", "error", jerr)
		return
	}
	draft.RequestID = x.payRecordID()
	if draft.Time.IsZero() {
		draft.Time = time.Now().UTC()
	}
	p.settlements.Defer(store.PendingPayment{Record: x.payRecord(draft), Payload: json.RawMessage(p.payload.Raw),
		Requirements: reqJSON, Until: p.cred.ValidBefore})
}

// payRecordID is the paid request's usage record id, made once.
func (x *exchange) payRecordID() string {
	if x.pay.recordID == "" {
		x.pay.recordID = x.BillingID()
	}
	return x.pay.recordID
}

// payRecord is the usage record of a paid request that settled or is pending: the business
// call's usage, its cost (debited from no credits) and what the payment settled.
func (x *exchange) payRecord(rec store.UsageRecord) store.UsageRecord {
	p := x.pay
	req := p.offered[p.chosen]
	amount := p.resp.Amount
	usd := decimal.Zero
	if a, err := decimal.NewFromString(amount); err == nil {
		usd = a.Shift(-int32(p.offer.Decimals(p.chosen)))
	}
	rec.Payment = &store.Payment{Endpoint: p.slug, Scheme: req.Scheme, Network: req.Network, Asset: req.Asset,
		Payer: p.cred.Payer, Amount: amount, AmountUSD: usd, Transaction: p.resp.Transaction, Status: store.PaymentSettled}
	if p.outcome == SettlePending {
		rec.Payment.Status, rec.Payment.Reason = store.PaymentPending, provider.Clip(p.why, 200) // a record's fields stop at 256 bytes
	}
	return rec
}

// recordPaid hands the usage record of a paid request that settled or is pending to billing
// (once), keeps its bill for the access log, and lets a pending settlement be resolved.
func (x *exchange) recordPaid(rec store.UsageRecord) {
	p := x.pay
	if p.recorded || (p.outcome != SettleSettled && p.outcome != SettlePending) {
		return
	}
	p.recorded = true
	rec.RequestID = x.payRecordID()
	span := x.StartSpan(spans.Settlement)
	// The access log line carries what the record holds (a paid request holds nothing to settle).
	x.Bill = &core.Billed{Usage: ir.Usage{PromptTokens: rec.PromptTokens, CompletionTokens: rec.CompletionTokens, CachedTokens: rec.CachedTokens},
		Estimated: rec.Estimated, Cost: rec.Cost}
	if b := x.Books; b != nil {
		rec.Time = b.Now().UTC()
		b.Record(x.payRecord(rec))
	}
	x.EndSettlement(span, rec.Model)
	if p.outcome == SettlePending && p.settlements != nil {
		p.settlements.Release(rec.RequestID)
	}
}

// settlementFailed is the answer to a business call whose settlement failed: 402 with
// PAYMENT-RESPONSE success:false, and the result withheld.
func (x *exchange) settlementFailed(err error) *core.APIError {
	e := core.Errorf(http.StatusPaymentRequired, "payment_settlement_failed", "the payment could not be settled (%v), so the result is withheld; sign a new credential from PAYMENT-REQUIRED and retry", err)
	e.Headers = map[string]string{headerPaymentResponse: x.pay.header, "cache-control": "no-store"}
	return e
}

// settlementEvent is the last event of a streamed upto answer, before [DONE]: the settlement,
// which is known only once the stream's cost is (its headers went out long before). It is shaped
// as a chunk with no choices, like the usage chunk, so OpenAI clients pass over it. A pending
// settlement says so (success false, errorReason settlement_pending).
func (p *payState) settlementEvent() []byte {
	cost, rec := p.bill()
	err := p.x.paySettle(cost, rec)
	sr := p.resp
	if err != nil || sr == nil {
		sr = &x402.SettlementResponse{Success: false, Network: p.offered[p.chosen].Network, ErrorReason: "settlement_failed"}
	}
	model, _ := json.Marshal(rec.Model) // the catalog model that answered, as the chunks name it
	ev := fmt.Appendf(nil, `{"id":%q,"object":"chat.completion.chunk","created":%d,"model":%s,"choices":[],"payment_response":`,
		p.x.RequestID, time.Now().Unix(), model)
	srJSON, _ := json.Marshal(sr)
	ev = append(ev, srJSON...)
	ev = append(ev, fmt.Sprintf(`,"payment_response_header":%q}`, p.header)...)
	return append(append([]byte("data: "), ev...), "\n\n"...)
}

// The payment at a chat request's steps (chat.Payment).

// Refuses: the endpoint's models list, and not the caller's key, refuses route r (nil: none)
// running models: the key alone (a keyless request: none) allows them.
func (p *payState) Refuses(r *ir.Route, models []*core.Model, target string) *core.APIError {
	if !p.key.AllowsModels(r, models) {
		return nil
	}
	return p.x.endpointModels(target)
}

// Admit prices the validated request at worst and checks its credential (payAdmit).
func (p *payState) Admit(worst decimal.Decimal, bill func() (decimal.Decimal, store.UsageRecord)) *core.APIError {
	p.bill = bill
	return p.x.payAdmit(worst)
}

// Answer: exact settles now, before the first byte; upto settles at the end: a whole answer
// at its body's end, a stream just before its [DONE] (settlementEvent).
func (p *payState) Answer(streaming bool) (string, func() []byte, *core.APIError) {
	if p.offered[p.chosen].Scheme == x402.SchemeExact {
		_, draft := p.bill()
		if err := p.x.paySettle(decimal.Zero, draft); err != nil {
			return "", nil, p.x.settlementFailed(err)
		}
		return p.header, nil, nil
	}
	if streaming {
		return "", p.settlementEvent, nil
	}
	return "", nil, nil
}

// Settle ends a paid chat request that got an answer: upto is settled now if it was not (a
// stream cut before [DONE], a whole answer), and a settled or pending payment leaves its usage
// record. An error means the facilitator refused: the result is withheld.
func (p *payState) Settle() (string, error) {
	if p.payload == nil || p.offered == nil || p.bill == nil {
		return p.header, nil
	}
	x := p.x
	cost, rec := p.bill()
	if rec.Overage.IsPositive() {
		billing.WarnOverage(x.Log, rec.Provider, rec.Model, store.ShortID(x.RequestID), cost.Add(rec.Overage), p.hold)
	}
	err := x.paySettle(cost, rec)
	x.recordPaid(rec)
	return p.header, err
}

// Failed is the answer to a business call whose settlement failed.
func (p *payState) Failed(err error) *core.APIError { return p.x.settlementFailed(err) }

// taskPayment is the payment at a media create's steps (tasks.Payment).
type taskPayment struct{ *payState }

// AdmitTask prices the create at worst and checks its credential (payAdmit).
func (p taskPayment) AdmitTask(worst decimal.Decimal) *core.APIError { return p.x.payAdmit(worst) }

// Created settles the task's payment and answers with its object (payTask).
func (p taskPayment) Created(t *store.Task, worst decimal.Decimal, body []byte) *extprocv3.ProcessingResponse {
	return p.x.payTask(t, worst, body)
}

// payTask settles a paid task once its provider accepted it (its business answer): its cost
// is known only when it ends, long after any credential expires, so exact settles the signed
// price and upto the task's worst case (what a keyed request holds), at most the signed cap.
// A refused settlement answers 402; the provider's task then runs unpaid and unseen (logged).
// A pending one answers the task with PAYMENT-RESPONSE settlement_pending.
func (x *exchange) payTask(t *store.Task, worst decimal.Decimal, body []byte) *extprocv3.ProcessingResponse {
	x.pay.recordID = x.RequestID + "." + t.ID
	rec := store.UsageRecord{RequestID: x.pay.recordID, KeyID: x.Key.ID, Account: x.Key.Account,
		Model: t.Model, Provider: t.Provider, Route: t.Route, Cost: worst}
	if err := x.paySettle(worst, rec); err != nil {
		x.Log.Error("x402: a paid task was created but its payment failed", "task", t.ID, "endpoint", x.pay.slug)
		return x.Fail(x.settlementFailed(err))
	}
	x.recordPaid(rec)
	resp := x.Reply(http.StatusOK, body)
	core.AddHeaders(resp.GetImmediateResponse().Headers, map[string]string{headerPaymentResponse: x.pay.header})
	return resp
}
