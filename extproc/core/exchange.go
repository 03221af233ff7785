package core

// One router-level request as every processor sees it: who asks (its key), what its headers
// said, how it was answered, and the fields the access log and the observer read; and the
// answers every processor gives the same way (a refusal, a reply, the body asked for).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Head is what a router-level request's headers say, read once for its processor.
type Head struct {
	Method, Path, Auth, ContentType, ContentLength string
	PaySig                                         string   // PAYMENT-SIGNATURE, never forwarded
	Strip                                          []string // the client's internal headers, removed
}

// Exchange is the state of one router-level request that every kind of request shares. Its
// processor (chat, media, a paid endpoint's wrapper) keeps its own state beside it.
type Exchange struct {
	*Shared
	RT        *Runtime
	Ctx       context.Context // the stream's: it ends when Envoy does (the client went away)
	RequestID string
	Key       *KeyInfo
	Head      Head
	// Headers are the client's request headers, for a request rewritten here for its provider
	// (direct): the ones a provider must not see are removed then.
	Headers *extprocv3.HttpHeaders
	// OwnRoutes: the Envoy runs Tollway's routes and clusters (ir.PhaseRouter), so a request
	// may be rewritten here and sent to its provider's cluster (direct).
	OwnRoutes bool
	// Envoy takes a timeout override or the watchdog's ending of an answer ahead of a reply;
	// nil outside a stream.
	Envoy *EnvoyStream
	// Split: the request's answer goes to an answer filter of its own (xds/translator's
	// answers.go); Park hands the exchange over to it when the request is routed, on the fast
	// lane or the chunk lane, and names it for that filter and the answer log.
	Split bool
	Park  func(fast bool) (id string)
	// Traced: the request's trace context and admission span (trace.go).
	Traced

	Status    int    // the answer's status
	Responded bool   // response headers arrived: the provider answered
	Provider  string // the provider that answered (or ran the task)
	// Rewriting: the answer is rewritten as it streams (a chat answer's chunks).
	Rewriting bool

	// What the access log and the observer read: the chat plan's model (the one that
	// answered, once known), route and stream flag; a task's model; the bill once settled; the
	// paid endpoint and its payer.
	Model, Route string
	Stream       bool
	TaskModel    string
	Bill         *Billed
	PaidEndpoint string
	Payer        string
	Out          Outcome // what the observer hears when the stream ends (filled only with one)

	// Refine, when set, reshapes every refusal (a paid endpoint's 422); OnRefusal runs before
	// one is answered (a processor's hold is released); Given runs when the answer is given (an
	// immediate reply, an answer's end, the stream's end: a paid request's credential is let
	// go).
	Refine    func(*APIError) *APIError
	OnRefusal func()
	Given     func()

	// rateGrants are the request's admitted rate charges (its key's, its route's, a payer's),
	// rateTokens the tokens each counted (rateCount counts them finer when the bound is over a
	// limit) and rateRoute its route's owner (ratelimit.go).
	rateGrants []rateGrant
	rateTokens int64
	rateCount  func() int64
	rateRoute  RateOwner

	billID string
}

// Billed is a settled request's bill, kept for the access log.
type Billed struct {
	Usage     ir.Usage
	Estimated bool
	Cost      decimal.Decimal
}

// Context is what the request's own calls (a facilitator's /verify, a task's create) run
// under: it ends when the client goes away.
func (x *Exchange) Context() context.Context {
	if x.Ctx == nil { // an exchange made outside a stream (tests)
		return context.Background()
	}
	return x.Ctx
}

// Fail answers the client directly with e in the spec's error shape.
func (x *Exchange) Fail(e *APIError) *extprocv3.ProcessingResponse {
	if x.Refine != nil {
		e = x.Refine(e)
	}
	if x.OnRefusal != nil {
		x.OnRefusal()
	}
	if b := x.Bill; b != nil { // billed on its refusal: the provider had served it
		how := ""
		if b.Estimated {
			how = ", from the gateway's count of its tokens"
		}
		e = e.Noted(fmt.Sprintf("the provider served the request, so it was billed %s USD%s", b.Cost, how))
	}
	x.refundRate()
	x.Answered(e.Status, e.Code)
	x.failAdmission(e.Code)
	x.Hint(e)
	resp := x.immediate(e.Status, e.Body(x.RequestID), ir.ErrorCodeDetailsPrefix+e.Code)
	if e.Code != CodeRateLimited { // its own headers say the state it was refused in
		AddHeaders(resp.GetImmediateResponse().Headers, x.RateHeaders())
	}
	AddHeaders(resp.GetImmediateResponse().Headers, e.Headers)
	return resp
}

// Reply answers the client directly with a JSON body.
func (x *Exchange) Reply(status int, body []byte) *extprocv3.ProcessingResponse {
	x.Answered(status, "")
	resp := x.immediate(status, body, ir.ErrorCodeDetailsPrefix+"answered")
	AddHeaders(resp.GetImmediateResponse().Headers, x.RateHeaders())
	return resp
}

func (x *Exchange) immediate(status int, body []byte, details string) *extprocv3.ProcessingResponse {
	x.GiveAnswer() // the answer is given (a task's creation, a refusal): no longer in progress
	return Immediate(x.RequestID, status, body, details)
}

// GiveAnswer runs Given: the request's answer has been given.
func (x *Exchange) GiveAnswer() {
	if x.Given != nil {
		x.Given()
	}
}

// Answered records the status and error code the client gets.
func (x *Exchange) Answered(status int, code string) {
	x.Out.Status, x.Out.Code = status, code
}

// NoteProviderAnswer records what the answer's provider (x.Provider) said of the gateway's
// credential: a 401 (the chain ended on a refused credential) at once, any answer below 400
// clears an earlier refusal. A 401 Envoy retried elsewhere arrives through the refusal log.
func (x *Exchange) NoteProviderAnswer() {
	switch {
	case x.Provider == "":
	case x.Status == http.StatusUnauthorized:
		x.Refused(x.Provider)
	case x.Status < 400:
		x.Accepted(x.Provider)
	}
}

// ReadAttempts reads Envoy's attempt count from the answer's header.
func (x *Exchange) ReadAttempts(v string) {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		x.Out.Attempts = n
	}
}

// Now is the time of a step the observer times (zero without an observer: nothing is timed).
func (x *Exchange) Now() time.Time {
	if x.Shared == nil || !x.Observed {
		return time.Time{}
	}
	return time.Now()
}

// ReadBody asks Envoy for the request body (buffered), removing the client's internal headers;
// a body over the limit is refused before a byte is buffered when the client declares its size.
func (x *Exchange) ReadBody(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if n, err := strconv.ParseInt(x.Head.ContentLength, 10, 64); err == nil && n > ir.MaxBodyBytes {
		return x.Fail(ErrTooLarge)
	}
	if h.GetEndOfStream() {
		return x.Fail(ErrNoBody)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: x.Head.Strip},
		}},
	}, ModeOverride: ChatMode}
}

// Authenticate checks a Bearer ale- key against the hashed keys of the runtime; the key is
// then the request's, and used now.
func (x *Exchange) Authenticate(auth string) *APIError {
	k, e := x.LookupKey(auth)
	if e != nil {
		return e
	}
	x.Key = k
	x.KeyUse.Touch(k.ID, time.Now())
	return nil
}

// LookupKey finds the runtime's key for an Authorization header.
func (x *Exchange) LookupKey(auth string) (*KeyInfo, *APIError) {
	scheme, secret, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, ErrMissingKey
	}
	secret = strings.TrimSpace(secret)
	if !store.WellFormedKey(secret) {
		return nil, ErrMalformedKey
	}
	h := store.HashKey(secret)
	k := x.RT.Keys[h]
	if k == nil { // looked up by the secret's SHA-256: the secret itself is never compared
		return nil, ErrInvalidKey
	}
	return k, nil
}

// BillingID is the usage record's id (made once, so a request's hold and record share it):
// the request id for tracing plus a random suffix, because clients can set x-request-id and a
// repeated id must not make a request free.
func (x *Exchange) BillingID() string {
	if x.billID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		x.billID = x.RequestID + "." + hex.EncodeToString(b[:])
	}
	return x.billID
}

// ErrLostEnvoy answers a request whose stream to Envoy broke while ext_proc was sending.
var ErrLostEnvoy = Errorf(http.StatusInternalServerError, "internal_error", "the gateway lost its connection to Envoy; retry")
