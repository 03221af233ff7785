package extproc

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// This file owns the gRPC stream loop: one ext_proc stream per HTTP request (or per upstream
// attempt), its processor chosen once (processor.go), each of Envoy's messages answered in turn.

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
