package extproc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/embeddings"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402/paid"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/xds/ir"
)

// This file owns the gRPC stream loop and the one seam between Envoy's messages and the code
// that handles a kind of request: one ext_proc stream per HTTP request (or per upstream
// attempt), each of Envoy's messages answered in turn (Process, serve); its Processor, chosen
// once per stream (open); dispatch, the one place that reads which message Envoy sent; and the
// router-level request (exchange), which reads what every kind shares and hands each message
// to the processor its path chose (processorForPath).

// Process handles one HTTP request's stream of messages from Envoy.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	env := &core.EnvoyStream{Send: stream.Send}
	o := s.open(stream.Context(), env)
	// However the stream ends (end of response, client gone, stream cut), the processor is
	// done: a hold is settled or released, a request that got an answer billed.
	defer o.p.Done()
	handle := func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		env.Received(req.GetAttributes())
		return dispatch(o.f, req)
	}
	if s.obs == nil {
		return serve(stream, handle, o.mu)
	}
	var busy time.Duration
	s.obs.StreamStarted(o.phase)
	defer func() { s.obs.StreamEnded(o.phase, busy) }()
	return serve(stream, timed(&busy, handle), o.mu)
}

// phaseOf is the filter a stream comes from (ir.PhaseMetadata): the router-level one, the
// mesh's, or the upstream attempt filter.
func phaseOf(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(ir.PhaseMetadata); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// splitOf reports whether a router-level stream comes from a split gateway's filter
// (ir.SplitMetadata): its requests' answers go to the answer filters (answers.go).
func splitOf(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(ir.SplitMetadata)) > 0
}

// handler answers one of Envoy's messages with the replies owed now (none, one, or several).
type handler func(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)

// timed adds the time each call of handle takes to busy.
func timed(busy *time.Duration, handle handler) handler {
	return func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
		t := time.Now()
		resp, err := handle(req)
		*busy += time.Since(t)
		return resp, err
	}
}

// serve runs one ext_proc stream: each message from Envoy is answered by handle, until Envoy
// closes the stream or an immediate response ends the request. mu, when set, is held while a
// message is handled and answered (the silence watchdog handles and sends too).
func serve(stream extprocv3.ExternalProcessor_ProcessServer, handle handler, mu *sync.Mutex) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		if mu != nil {
			mu.Lock()
		}
		done, err := answerMessage(stream, handle, req)
		if mu != nil {
			mu.Unlock()
		}
		if done || err != nil {
			return err
		}
	}
}

// answerMessage sends handle's replies to req; done: an immediate response ended the request.
func answerMessage(stream extprocv3.ExternalProcessor_ProcessServer, handle handler, req *extprocv3.ProcessingRequest) (done bool, err error) {
	out, err := handle(req)
	if err != nil {
		return false, err
	}
	for _, resp := range out {
		if err := stream.Send(resp); err != nil {
			return false, err
		}
		if _, done := resp.Response.(*extprocv3.ProcessingResponse_ImmediateResponse); done {
			return true, nil
		}
	}
	return false, nil
}

// Processor handles the messages of one HTTP request (or one upstream attempt) of one kind
// (core.Processor, where a processor package wrapping another reaches it).
type Processor = core.Processor

// framing is how Envoy's messages reach a processor: one reply per message (buffered, the
// protocol of the attempt filter and the mesh's filter) or the pipelined protocol of Tollway's
// own Envoys (pipeline.go), which may owe none or several.
type framing interface {
	requestHeaders(*extprocv3.ProcessingRequest, *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error)
	requestBody(*extprocv3.ProcessingRequest, *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error)
	requestTrailers(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)
	responseHeaders(*extprocv3.ProcessingRequest, *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error)
	responseBody(*extprocv3.ProcessingRequest, *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error)
	responseTrailers(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error)
}

// dispatch hands one of Envoy's messages to f.
func dispatch(f framing, req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return f.requestHeaders(req, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return f.requestBody(req, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return f.responseHeaders(req, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return f.responseBody(req, r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return f.requestTrailers(req)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return f.responseTrailers(req)
	}
	return nil, unexpected(req)
}

func unexpected(req *extprocv3.ProcessingRequest) error {
	return status.Errorf(codes.Unimplemented, "extproc: unexpected message %T", req.Request)
}

// opened is a stream's processor and how its messages reach it (the framing hands them to
// the processor; the stream loop only ends it).
type opened struct {
	p     interface{ Done() }
	f     framing
	mu    *sync.Mutex // held while a message is handled (nil: none needed)
	phase string      // the observer's label
}

// open chooses the processor of a stream, once, by the filter it comes from: the upstream
// attempt filter's (chat/attempt.go), or the router-level request's (exchange), which reads the
// request's path to choose what it serves.
func (s *Server) open(ctx context.Context, env *core.EnvoyStream) opened {
	rt := s.runtime.Load()
	phase := phaseOf(ctx)
	if phase == ir.PhaseUpstream {
		a := chat.NewAttempt(s.sh, rt, env, s.sh.Spans.FromStream(ctx))
		return opened{p: a, f: oneByOne{p: a}, phase: PhaseAttempt}
	}
	if phase == ir.PhaseAnswer {
		a := &answerStream{s: s, ctx: ctx, env: env}
		return opened{p: a, f: a, phase: PhaseAnswer} // answers.go
	}
	x := s.newExchange(rt)
	if x.Trace = s.sh.Spans.FromStream(ctx); x.Trace.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, x.Trace) // the request's own calls carry it on
	}
	x.Ctx, x.Envoy, x.OwnRoutes = ctx, env, phase == ir.PhaseRouter
	if x.OwnRoutes {
		// Tollway's own Envoys speak the pipelined protocol, and a streamed answer has a
		// watchdog.
		x.pipe = newPipeline(x)
		if splitOf(ctx) {
			x.Split = true
			x.Park = func(fast bool) string { return s.answers.park(x, fast) }
			return opened{p: splitRouter{x}, f: splitFraming{x.pipe}, mu: &x.mu, phase: PhaseRouter}
		}
		return opened{p: x, f: x.pipe, mu: &x.mu, phase: PhaseRouter}
	}
	return opened{p: x, f: oneByOne{p: x, log: x.logMetadata}, phase: PhaseRouter}
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

	// mu serializes the stream's loop and the silence watchdog (silence.go); quiet is the
	// watchdog of a streamed answer on Tollway's own routes; silenced: it ended the answer, and
	// Envoy's later messages are dropped.
	mu       sync.Mutex
	quiet    *watchdog
	silenced bool

	// pipe is the pipelined framing of Tollway's own Envoys; on a split gateway the answer's
	// filter takes the answer half of it over, with the exchange (park: answers.go).
	pipe *pipeline
	park parking
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
		case k == paid.HeaderPaymentSignature: // read here, never forwarded
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
	resp := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders:    []*corev3.HeaderValueOption{core.SetHeader("x-request-id", x.RequestID)},
				RemoveHeaders: strip,
			},
		}}},
		ModeOverride: unrouted(),
	}
	if x.Split {
		// On a split gateway the chunk lane's filter reads the unrouted reply's headers: the
		// request takes the route that has it.
		common := resp.GetRequestHeaders().GetResponse()
		common.HeaderMutation.SetHeaders = append(common.HeaderMutation.SetHeaders, core.SetHeader(ir.LaneHeader, ir.LaneDeferred))
		common.ClearRouteCache = true
		core.AddMetadata(resp, ir.MetadataNamespace, map[string]*structpb.Value{ir.ExchangeKey: structpb.NewStringValue(x.Park(false))})
	}
	return resp
}

// unrouted is chatMode without the request body: the request goes on only to be refused.
func unrouted() *extprocv3filter.ProcessingMode {
	m := core.WithResponseBody(extprocv3filter.ProcessingMode_NONE)
	m.RequestBodyMode = extprocv3filter.ProcessingMode_NONE
	return m
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

// processorForPath chooses a router-level request's processor by its path, once, at its
// headers (the exchange has read what every kind shares: the request id, the header limits).
func (x *exchange) processorForPath(path string) Processor {
	switch {
	case path == core.ModelsPath || strings.HasPrefix(path, core.ModelsPath+"/"):
		return catalogProcessor{core.AnsweredEarly{}, x}
	case path == core.KeyPath:
		return keyProcessor{core.AnsweredEarly{}, x}
	case strings.HasPrefix(path, core.PayPrefix):
		return x.s.paid.New(x.Exchange, func(kind string, pay tasks.Payment) *tasks.Media { return x.s.media(x.Exchange, kind, pay) })
	case core.MediaKind(path) != "":
		return x.s.media(x.Exchange, core.MediaKind(path), nil)
	case path == core.ChatPath:
		return chat.New(x.Exchange, nil)
	case path == core.EmbeddingsPath:
		return embeddings.New(x.Exchange)
	}
	return notFound{core.AnsweredEarly{}, x}
}

// notFound answers a path that is no endpoint.
type notFound struct {
	core.AnsweredEarly
	x *exchange
}

func (n notFound) RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x := n.x
	return x.Fail(core.Errorf(http.StatusNotFound, "not_found", "no endpoint %s %s; %s", core.Clip(x.Head.Method), core.Clip(x.Head.Path), x.s.endpoints())), nil
}
