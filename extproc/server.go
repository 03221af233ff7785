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
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/extproc/chat"
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
	sh      *core.Shared // what every request shares: the log, the books, the store's health, key use
	runtime atomic.Pointer[core.Runtime]
	health  atomic.Pointer[map[string]bool]
	// refusals are providers whose last answer refused the gateway's credential.
	refusals refusals
	tasks    *Tasks                   // nil: the media task endpoints are off
	tasksOff atomic.Pointer[string]   // why they are off, for their answer
	payments atomic.Pointer[Payments] // nil: no paid endpoints
	paying   inFlight                 // credentials whose paid request is running
	obs      Observer                 // nil: nothing is measured
}

// Billing is the money path: holds taken before forwarding, and where settled requests go
// (billing.Books). A nil *Billing turns admission and metering off (responses then pass
// untouched).
type Billing = billing.Books

// NewServer makes a server that serves rt until Swap replaces it.
func NewServer(log *slog.Logger, rt *core.Runtime, b *Billing) *Server {
	s := &Server{}
	s.sh = &core.Shared{Log: log, Books: b, Refused: s.providerRefused, Accepted: s.providerAnswered}
	s.runtime.Store(rt)
	return s
}

// SetStoreCheck makes the server refuse billable requests, task creates and paid requests
// while check reports the store's outage (nil: healthy); see core.Shared.SetStoreCheck.
func (s *Server) SetStoreCheck(check func() error) { s.sh.SetStoreCheck(check) }

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

// exchange is one router-level request across its ext_proc messages: what every kind shares
// (core.Exchange), the processor its path chose, and what the stream loop owns.
type exchange struct {
	*core.Exchange
	s    *Server
	kind Processor // chosen by the request's path (processorForPath)

	// deferred is a refusal that cannot be answered where it was found: a client's invalid
	// x-request-id is replaced first, so that the refusal carries the replacement (Envoy copies
	// the request's x-request-id into every response), and refused at the next message.
	deferred *core.APIError

	media string    // POST /v1/videos or /v1/images: the body creates a task of this kind
	pay   *payState // a paid request (POST {pay_url}/x402/{slug}); nil otherwise

	// mu serializes the stream's loop and the silence watchdog (silence.go); quiet is the
	// watchdog of a streamed answer on Tollway's own routes; silenced: it ended the answer, and
	// Envoy's later messages are dropped.
	mu       sync.Mutex
	quiet    *watchdog
	silenced bool
}

// newExchange is a router-level request under rt (its stream's context and Envoy set by open).
func (s *Server) newExchange(rt *core.Runtime) *exchange {
	return &exchange{s: s, Exchange: &core.Exchange{Shared: s.sh, RT: rt}}
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

// Done ends what the request's processor holds (a request that got an answer is billed, from
// an estimate if need be) and tells the observer how the request went.
func (x *exchange) Done() {
	x.mu.Lock()
	x.stopSilence()
	x.mu.Unlock()
	x.finish()
	if x.s.obs != nil && !x.Out.Start.IsZero() { // zero: Envoy closed the stream before the request's headers
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
			x.RequestID = core.HeaderValue(hv)
		case k == headerPaymentSignature: // read here, never forwarded
			paySig = core.HeaderValue(hv)
			strip = append(strip, k)
		case core.ClientInternalHeader(k):
			strip = append(strip, k)
		}
	}
	if x.s.obs != nil {
		x.Out.Start = time.Now()
		p, _, _ := strings.Cut(path, "?")
		x.Out.Endpoint = endpointLabel(p)
	}
	// An invalid request id cannot be answered now (Envoy would echo it): it is replaced and the
	// refusal, or a header-limit one, answered at the next message.
	badID := core.CheckRequestID(x.RequestID)
	e := core.HeadersTooLarge(h)
	if e == nil {
		e = badID
	}
	if badID != nil {
		return x.deferRefusal(e, strip)
	}
	if e != nil {
		return x.Fail(e)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	x.Headers = h
	x.Head = core.Head{Method: method, Path: path, Auth: auth, ContentType: contentType, ContentLength: contentLength, PaySig: paySig, Strip: strip}
	x.kind = x.processorForPath(path)
	resp, _ := x.kind.RequestHeaders(h) // a router-level processor never ends the stream
	return resp
}

// deferRefusal replaces the client's request id and lets the request go on unrouted and
// unbuffered (request body mode NONE): the refusal is answered at the next message ext_proc
// sees, the headers of Envoy's unrouted reply, which then carries the fresh id.
func (x *exchange) deferRefusal(e *core.APIError, strip []string) *extprocv3.ProcessingResponse {
	x.RequestID = core.NewRequestID()
	x.deferred = e
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders:    []*corev3.HeaderValueOption{core.SetHeader("x-request-id", x.RequestID)},
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

func (x *exchange) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if x.deferred != nil {
		return x.Fail(x.deferred) // Envoy sends no body after deferRefusal; should one come anyway
	}
	if len(b.GetBody()) > ir.MaxBodyBytes {
		return x.Fail(core.ErrTooLarge) // sent without a content-length (chunked)
	}
	resp, _ := x.processor().RequestBody(b)
	return resp
}

// processor is the processor the request's path chose (a chat's for an exchange made
// without headers, in tests).
func (x *exchange) processor() Processor {
	if x.kind == nil {
		x.kind = chat.New(x.Exchange, nil)
	}
	return x.kind
}

// finish ends what the request's processor holds (Done, or the silence watchdog's end of the
// answer); the answer is given then.
func (x *exchange) finish() {
	if x.kind != nil {
		x.kind.Done()
	}
	x.GiveAnswer()
}

func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if x.deferred != nil {
		return x.Fail(x.deferred) // the unrouted reply to a request refused at its headers
	}
	resp, _ := x.processor().ResponseHeaders(h)
	return resp
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	resp, _ := x.processor().ResponseBody(b)
	return resp
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// SaveKeysUsed hands save the keys used since the last save that succeeded, with when each was
// last used. When save fails they are kept for the next call, and its error returned.
func (s *Server) SaveKeysUsed(save func(map[string]time.Time) error) error {
	return s.sh.KeyUse.Save(save)
}

// Runtime is the compiled configuration requests run under (core.Runtime).
type Runtime = core.Runtime

// Compile builds a Runtime from the IR and the key records (core.Compile).
func Compile(g *ir.Gateway, keys []store.Key) *Runtime { return core.Compile(g, keys) }
