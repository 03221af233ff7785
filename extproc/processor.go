package extproc

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollway/tollway/xds/ir"
)

// This file owns the one seam between Envoy's messages and the code that handles a kind of
// request: a Processor, chosen once per stream (open), and dispatch, the one place that reads
// which message Envoy sent.

// Processor handles the messages of one HTTP request (or one upstream attempt) of one kind. Each
// method answers its message with one reply; an error ends the stream (Envoy then fails the
// request closed). Done is called once when the stream ends, however it ends.
type Processor interface {
	RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error)
	RequestBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error)
	ResponseHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error)
	ResponseBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error)
	Done()
}

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

// opened is a stream's processor and how its messages reach it.
type opened struct {
	p     Processor
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
		a := chat.NewAttempt(s.sh, rt, env)
		return opened{p: a, f: oneByOne{p: a}, phase: PhaseAttempt}
	}
	x := s.newExchange(rt)
	x.Ctx, x.Envoy, x.OwnRoutes = ctx, env, phase == ir.PhaseRouter
	if x.OwnRoutes {
		// Tollway's own Envoys speak the pipelined protocol, and a streamed answer has a
		// watchdog.
		return opened{p: x, f: newPipeline(x), mu: &x.mu, phase: PhaseRouter}
	}
	return opened{p: x, f: oneByOne{p: x, log: x.logMetadata}, phase: PhaseRouter}
}

// processorForPath chooses a router-level request's processor by its path, once, at its
// headers (the exchange has read what every kind shares: the request id, the header limits).
func (x *exchange) processorForPath(path string) Processor {
	switch {
	case path == core.ModelsPath || strings.HasPrefix(path, core.ModelsPath+"/"):
		return catalogProcessor{answeredEarly{}, x}
	case path == core.KeyPath:
		return keyProcessor{answeredEarly{}, x}
	case strings.HasPrefix(path, core.PayPrefix):
		return &paidProcessor{x: x}
	case core.MediaKind(path) != "":
		return mediaProcessor{answeredEarly{}, x, core.MediaKind(path)}
	case path == core.ChatPath:
		return chat.New(x.Exchange, nil)
	}
	return notFound{answeredEarly{}, x}
}

// answeredEarly is the rest of a processor whose request ext_proc answers itself, at its
// headers or its body: the immediate response ends the stream, so no later message comes.
type answeredEarly struct{}

var errAnsweredEarly = status.Error(codes.FailedPrecondition, "extproc: a message came after the request was answered")

func (answeredEarly) RequestBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return nil, errAnsweredEarly
}

func (answeredEarly) ResponseHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return nil, errAnsweredEarly
}

func (answeredEarly) ResponseBody(*extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return nil, errAnsweredEarly
}

func (answeredEarly) Done() {}

// notFound answers a path that is no endpoint.
type notFound struct {
	answeredEarly
	x *exchange
}

func (n notFound) RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x := n.x
	return x.Fail(core.Errorf(http.StatusNotFound, "not_found", "no endpoint %s %s; %s", core.Clip(x.Head.Method), core.Clip(x.Head.Path), x.s.endpoints())), nil
}

// oneByOne is the buffered protocol: each message gets its processor's one reply. log, when
// set, adds the access log's metadata to each reply.
type oneByOne struct {
	p   Processor
	log func(*extprocv3.ProcessingResponse, *extprocv3.ProcessingRequest)
}

// one is the reply call makes to req.
func (o oneByOne) one(req *extprocv3.ProcessingRequest, call func() (*extprocv3.ProcessingResponse, error)) ([]*extprocv3.ProcessingResponse, error) {
	resp, err := call()
	if err != nil {
		return nil, err
	}
	if o.log != nil {
		o.log(resp, req)
	}
	return []*extprocv3.ProcessingResponse{resp}, nil
}

func (o oneByOne) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.RequestHeaders(h) })
}

func (o oneByOne) requestBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.RequestBody(b) })
}

func (o oneByOne) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.ResponseHeaders(h) })
}

func (o oneByOne) responseBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.ResponseBody(b) })
}

// Trailers are never asked for in the buffered protocol (processing modes skip them).
func (o oneByOne) requestTrailers(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return nil, unexpected(req)
}

func (o oneByOne) responseTrailers(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return nil, unexpected(req)
}
