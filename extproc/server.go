// Package extproc is Tollway's Envoy external processor. It owns the gRPC stream loop
// (stream.go), the pipelined protocol of Tollway's own Envoys (pipeline.go), processing modes
// and header limits (envoymode.go, headers.go), error shaping (errors.go) and the Runtime,
// swapped atomically on each configuration (runtime.go). Each stream gets one Processor
// (processor.go), chosen once: the upstream attempt filter's (attempt.go: rewrite for the
// chosen provider, translate its answer), or, at the router, the one the request's path names:
// chat (chatprocessor.go with chat.go, validate*.go, admission.go, answer.go, meter.go), the
// catalog (catalog.go), GET /v1/key (keyinfo.go), media task create and read (media.go), or a
// paid x402 endpoint wrapping chat or media (payment.go, paying.go; settlements.go resolves
// the settlements whose answer was lost). Holds are made durable by durable.go; the ledger is
// extproc/billing.
package extproc

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Server implements Envoy's ExternalProcessor service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	log     *slog.Logger
	runtime atomic.Pointer[core.Runtime]
	health  atomic.Pointer[map[string]bool]
	billing *Billing
	// refusals are providers whose last answer refused the gateway's credential.
	refusals refusals
	tasks    *Tasks                   // nil: the media task endpoints are off
	tasksOff atomic.Pointer[string]   // why they are off, for their answer
	payments atomic.Pointer[Payments] // nil: no paid endpoints
	paying   inFlight                 // credentials whose paid request is running
	obs      Observer                 // nil: nothing is measured
	// storeCheck reports the store's outage (nil: none): see SetStoreCheck.
	storeCheck atomic.Pointer[func() error]
	keyUse     core.KeyUse // when each key was last used (keyuse.go)
	hints      core.Hints  // operators' hints logged for refusals (hints.go)
}

// Billing is the money path: holds taken before forwarding, and where settled requests go
// (billing.Books). A nil *Billing turns admission and metering off (responses then pass
// untouched).
type Billing = billing.Books

// NewServer makes a server that serves rt until Swap replaces it.
func NewServer(log *slog.Logger, rt *core.Runtime, b *Billing) *Server {
	s := &Server{log: log, billing: b}
	s.runtime.Store(rt)
	return s
}

// Swap installs a new runtime for requests that start from now on.
func (s *Server) Swap(rt *core.Runtime) {
	old := s.runtime.Swap(rt)
	s.refusals.reconfigured(old.Providers, rt.Providers)
}

// SetHealth records which providers Envoy currently sees as healthy (by provider name).
func (s *Server) SetHealth(h map[string]bool) { s.health.Store(&h) }

// ModelReady reports whether catalog model id can take traffic now (for route health).
func (s *Server) ModelReady(id string) bool {
	rt := s.runtime.Load()
	m := rt.Models[id]
	return m != nil && s.modelReady(rt, m)
}

// modelReady: some provider of m has its credential, did not refuse it, and is not known to
// be unhealthy.
func (s *Server) modelReady(rt *core.Runtime, m *core.Model) bool {
	h := s.health.Load()
	for _, t := range m.Targets {
		p := rt.Providers[t.Provider]
		if p == nil || !p.Ready() || s.refusals.has(p.Name) {
			continue
		}
		if h == nil {
			return true // no health reading yet
		}
		if healthy, known := (*h)[p.Name]; !known || healthy {
			return true
		}
	}
	return false
}

// exchange is the state of one HTTP request across its ext_proc messages.
type exchange struct {
	s         *Server
	rt        *core.Runtime
	ctx       context.Context // the stream's: it ends when Envoy does (the client went away)
	requestID string
	key       *core.KeyInfo
	plan      *chatPlan
	status    int
	head      head      // what the request's headers say
	kind      Processor // chosen by the request's path (processorForPath)

	// money: the hold taken before forwarding, released or settled exactly once
	hold           *billing.Hold
	promptEstimate int64  // strict bound of the prompt's tokens, sized the hold
	body           []byte // the request, kept (when small) to count its prompt if a bill is estimated
	promptCount    int64  // the prompt counted by the tokenizer, once promptCounted
	promptCounted  bool
	billID         string // the usage record's id, made once (billingID)
	meter          meter
	answer         *answer // rewrites a successful answer for the client
	streaming      bool
	responded      bool   // response headers arrived: the provider answered
	provider       string // the provider that answered (from the upstream ext_proc)

	// deferred is a refusal that cannot be answered where it was found: a client's invalid
	// x-request-id is replaced first, so that the refusal carries the replacement (Envoy copies
	// the request's x-request-id into every response), and refused at the next message.
	deferred *core.APIError

	media       string // POST /v1/videos or /v1/images: the body creates a task of this kind
	contentType string // the request's, for a form body
	// envoy takes a timeout override or the watchdog's ending of an answer ahead of a reply;
	// nil outside a stream.
	envoy *envoyStream

	pay *payState // a paid request (POST {pay_url}/x402/{slug}); nil otherwise

	// headers are the client's request headers, for a request rewritten here for its provider
	// (direct): the ones a provider must not see are removed then.
	headers *extprocv3.HttpHeaders
	// ownRoutes: the Envoy runs Tollway's routes and clusters (ir.PhaseRouter), so a request
	// may be rewritten here and sent to its provider's cluster (direct).
	ownRoutes bool

	out Outcome // what the observer hears when the stream ends (filled only with one)

	// mu serializes the stream's loop and the silence watchdog (silence.go); quiet is the
	// watchdog of a streamed answer on Tollway's own routes; silenced: it ended the answer, and
	// Envoy's later messages are dropped.
	mu       sync.Mutex
	quiet    *watchdog
	silenced bool

	// For the access log (accesslog.go): the bill once settled, a task's model.
	bill      *billed
	taskModel string
}

// requestContext is what the request's own calls (a facilitator's /verify, a task's create)
// run under: it ends when the client goes away.
func (x *exchange) requestContext() context.Context {
	if x.ctx == nil { // an exchange made outside a stream (tests)
		return context.Background()
	}
	return x.ctx
}

// served records which attempt answered ("<provider>/<catalog model>"); the model's prices bill it.
func (x *exchange) served(v string) {
	p, mid, ok := strings.Cut(v, "/")
	if !ok || p == "" {
		return
	}
	x.provider = p
	if m := x.rt.Models[mid]; m != nil {
		x.plan.model = m
	}
}

// The exchange is the router-level request's processor.
func (x *exchange) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return x.requestHeaders(h), nil
}

func (x *exchange) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return x.requestBody(b), nil
}

func (x *exchange) ResponseHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return x.responseHeaders(h), nil
}

func (x *exchange) ResponseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return x.responseBody(b), nil
}

// Done settles or releases the hold (a request that got an answer is billed, from an estimate
// if need be) and tells the observer how the request went.
func (x *exchange) Done() {
	x.mu.Lock()
	x.stopSilence()
	x.mu.Unlock()
	x.finish()
	if x.s.obs != nil && !x.out.Start.IsZero() { // zero: Envoy closed the stream before the request's headers
		x.s.obs.RequestDone(x.outcome())
	}
}

func (x *exchange) requestHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	var method, path, auth, contentType, contentLength, paySig string
	// A client must not choose the cluster, claim who answered, or steer Envoy (retries,
	// timeouts): internal headers it sent are removed before anything reads them.
	strip := []string{ir.ClusterHeader, ir.ModelHeader, ir.ServedHeader}
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch k := hv.Key; {
		case k == ":method":
			method = core.HeaderValue(hv)
		case k == ":path":
			path = core.HeaderValue(hv)
		case k == "authorization":
			auth = core.HeaderValue(hv)
		case k == "content-type":
			contentType = core.HeaderValue(hv)
		case k == "content-length":
			contentLength = core.HeaderValue(hv)
		case k == "x-request-id":
			x.requestID = core.HeaderValue(hv)
		case k == headerPaymentSignature: // read here, never forwarded
			paySig = core.HeaderValue(hv)
			strip = append(strip, k)
		case core.ClientInternalHeader(k):
			strip = append(strip, k)
		}
	}
	if x.s.obs != nil {
		x.out.Start = time.Now()
		p, _, _ := strings.Cut(path, "?")
		x.out.Endpoint = endpointLabel(p)
	}
	// An invalid request id cannot be answered now (Envoy would echo it): it is replaced and the
	// refusal, or a header-limit one, answered at the next message.
	badID := core.CheckRequestID(x.requestID)
	e := core.HeadersTooLarge(h)
	if e == nil {
		e = badID
	}
	if badID != nil {
		return x.deferRefusal(e, strip)
	}
	if e != nil {
		return x.fail(e)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	x.headers = h
	x.head = head{method: method, path: path, auth: auth, contentType: contentType, contentLength: contentLength, paySig: paySig, strip: strip}
	x.kind = x.processorForPath(path)
	resp, _ := x.kind.RequestHeaders(h) // a router-level processor never ends the stream
	return resp
}

// readBody asks Envoy for the request body (buffered), removing the client's internal headers;
// a body over the limit is refused before a byte is buffered when the client declares its size.
func (x *exchange) readBody(h *extprocv3.HttpHeaders, contentLength string, strip []string) *extprocv3.ProcessingResponse {
	if n, err := strconv.ParseInt(contentLength, 10, 64); err == nil && n > ir.MaxBodyBytes {
		return x.fail(core.ErrTooLarge)
	}
	if h.GetEndOfStream() {
		return x.fail(core.ErrNoBody)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: strip},
		}},
	}, ModeOverride: core.ChatMode}
}

// deferRefusal replaces the client's request id and lets the request go on unrouted and
// unbuffered (request body mode NONE): the refusal is answered at the next message ext_proc
// sees, the headers of Envoy's unrouted reply, which then carries the fresh id.
func (x *exchange) deferRefusal(e *core.APIError, strip []string) *extprocv3.ProcessingResponse {
	x.requestID = core.NewRequestID()
	x.deferred = e
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders:    []*corev3.HeaderValueOption{core.SetHeader("x-request-id", x.requestID)},
				RemoveHeaders: strip,
			},
		}}},
		ModeOverride: unrouted(),
	}
}

// unrouted is chatMode without the request body: the request goes on only to be refused.
func unrouted() *extprocv3filter.ProcessingMode {
	m := core.WithResponseBody(extprocv3filter.ProcessingMode_NONE)
	m.RequestBodyMode = extprocv3filter.ProcessingMode_NONE
	return m
}

// authenticate checks a Bearer ale- key against the hashed keys of the runtime; the key is
// then the request's, and used now.
func (x *exchange) authenticate(auth string) *core.APIError {
	k, e := x.lookupKey(auth)
	if e != nil {
		return e
	}
	x.key = k
	x.s.keyUse.Touch(k.ID, time.Now())
	return nil
}

// lookupKey finds the runtime's key for an Authorization header.
func (x *exchange) lookupKey(auth string) (*core.KeyInfo, *core.APIError) {
	scheme, secret, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, core.ErrMissingKey
	}
	secret = strings.TrimSpace(secret)
	if !store.WellFormedKey(secret) {
		return nil, core.ErrMalformedKey
	}
	h := store.HashKey(secret)
	k := x.rt.Keys[h]
	if k == nil { // looked up by the secret's SHA-256: the secret itself is never compared
		return nil, core.ErrInvalidKey
	}
	return k, nil
}

// endpoints names every endpoint a client can call, for the answer to a path that is none.
func (s *Server) endpoints() string {
	list := "Tollway serves POST " + core.ChatPath + ", GET " + core.ModelsPath + " and GET " + core.ModelsPath + "/{id}"
	for _, kind := range []string{ir.KindVideo, ir.KindImage} {
		list += ", POST " + core.MediaPaths[kind] + " and GET " + core.MediaPaths[kind] + "/{id}"
	}
	list += ", GET " + core.KeyPath
	if ps := s.payments.Load(); ps != nil && len(ps.Offers) > 0 {
		list += ", and POST " + core.PayPrefix + "{slug} for its paid endpoints"
	}
	return list
}

// errLostEnvoy answers a request whose stream to Envoy broke while ext_proc was sending.
var errLostEnvoy = core.Errorf(http.StatusInternalServerError, "internal_error", "the gateway lost its connection to Envoy; retry")

// A chat body over bigChatBody gets bigChatTimeout from Envoy to be checked in, instead of
// its 5 s message timeout.
const (
	bigChatBody    = 1 << 20
	bigChatTimeout = 30 * time.Second
)

func (x *exchange) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if x.deferred != nil {
		return x.fail(x.deferred) // Envoy sends no body after deferRefusal; should one come anyway
	}
	if len(b.GetBody()) > ir.MaxBodyBytes {
		return x.fail(core.ErrTooLarge) // sent without a content-length (chunked)
	}
	resp, _ := x.processor().RequestBody(b)
	return resp
}

// processor is the processor the request's path chose (a chat's for an exchange made
// without headers, in tests).
func (x *exchange) processor() Processor {
	if x.kind == nil {
		return chatProcessor{x}
	}
	return x.kind
}

func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if x.deferred != nil {
		return x.fail(x.deferred) // the unrouted reply to a request refused at its headers
	}
	resp, _ := x.processor().ResponseHeaders(h)
	return resp
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	resp, _ := x.processor().ResponseBody(b)
	return resp
}

// fail answers the client directly with e in the spec's error shape.
func (x *exchange) fail(e *core.APIError) *extprocv3.ProcessingResponse {
	if x.pay != nil {
		e = paidRefusal(e)
	}
	x.release()
	x.answered(e.Status, e.Code)
	x.s.hint(e)
	resp := x.immediate(e.Status, e.Body(x.requestID), ir.ErrorCodeDetailsPrefix+e.Code)
	core.AddHeaders(resp.GetImmediateResponse().Headers, e.Headers)
	return resp
}

// reply answers the client directly with a JSON body.
func (x *exchange) reply(status int, body []byte) *extprocv3.ProcessingResponse {
	x.answered(status, "")
	return x.immediate(status, body, ir.ErrorCodeDetailsPrefix+"answered")
}

func (x *exchange) immediate(status int, body []byte, details string) *extprocv3.ProcessingResponse {
	x.endPaying() // the answer is given (a task's creation, a refusal): no longer in progress
	return core.Immediate(x.requestID, status, body, details)
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// SaveKeysUsed hands save the keys used since the last save that succeeded, with when each was
// last used. When save fails they are kept for the next call, and its error returned.
func (s *Server) SaveKeysUsed(save func(map[string]time.Time) error) error {
	return s.keyUse.Save(save)
}

// hint logs e's operator hint unless it was logged within the last minute.
func (s *Server) hint(e *core.APIError) { s.hints.Hint(s.log, e) }

// Runtime is the compiled configuration requests run under (core.Runtime).
type Runtime = core.Runtime

// Compile builds a Runtime from the IR and the key records (core.Compile).
func Compile(g *ir.Gateway, keys []store.Key) *Runtime { return core.Compile(g, keys) }
