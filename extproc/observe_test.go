package extproc

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollway/tollway/xds/ir"
)

// obsRecorder is an Observer that keeps what it heard.
type obsRecorder struct {
	mu       sync.Mutex
	started  map[string]int
	ended    map[string]int
	busy     time.Duration
	outcomes []Outcome
	done     chan struct{} // one value per RequestDone
}

func (r *obsRecorder) StreamStarted(phase string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started[phase]++
}

func (r *obsRecorder) StreamEnded(phase string, busy time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended[phase]++
	r.busy += busy
}

func (r *obsRecorder) RequestDone(o *Outcome) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, *o)
	r.mu.Unlock()
	r.done <- struct{}{}
}

// next waits for the next request's outcome.
func (r *obsRecorder) next(t *testing.T) Outcome {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome reported")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[len(r.outcomes)-1]
}

// startObserved is startServer with obs set before the server takes a stream.
func startObserved(t *testing.T, obs Observer) *envoy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), testRuntime(), nil)
	srv.SetObserver(obs)
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return &envoy{t: t, srv: srv, client: extprocv3.NewExternalProcessorClient(conn)}
}

// TestObserverHearsOutcomes: every request is reported once when its stream ends, with the
// model and provider that answered, Envoy's attempt count (and the header carrying it removed),
// the status and a bounded error code; streams are counted by phase.
func TestObserverHearsOutcomes(t *testing.T) {
	rec := &obsRecorder{started: map[string]int{}, ended: map[string]int{}, done: make(chan struct{}, 8)}
	e := startObserved(t, rec)

	answer := func(status, attempts, body string) *extprocv3.ProcessingResponse {
		s := e.open()
		s.roundTrip(chatHeaders("Bearer "+validSecret, "req-obs", true))
		s.roundTrip(requestBody(`{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`))
		resp := s.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				hdr(":status", status, true), hdr("content-type", "application/json", true),
				hdr(ir.ServedHeader, "openai/gpt", true), hdr(ir.AttemptsHeader, attempts, true),
			}}},
		}})
		s.roundTrip(responseBody(body))
		s.close()
		return resp
	}

	// Served by the second attempt: a fallback.
	resp := answer("200", "2", `{"id":"c1","object":"chat.completion","model":"gpt-4o","choices":[]}`)
	if !contains(resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), ir.AttemptsHeader) {
		t.Errorf("%s is not removed from the answer", ir.AttemptsHeader)
	}
	o := rec.next(t)
	if o.Endpoint != EndpointChat || o.Model != "gpt" || o.Provider != "openai" || o.Route != "" || o.Status != 200 || o.Code != "" ||
		o.Attempts != 2 || !o.Fallback || o.Stream {
		t.Errorf("served: %+v", o)
	}
	if o.Start.IsZero() || o.Routed.Before(o.Start) || o.Answered.Before(o.Routed) || o.End.Before(o.Answered) || !o.FirstByte.IsZero() {
		t.Errorf("times out of order: start %v routed %v answered %v end %v first byte %v", o.Start, o.Routed, o.Answered, o.End, o.FirstByte)
	}

	// A provider's own error code is unbounded: it counts as upstream_error.
	answer("429", "1", `{"error":{"message":"slow down","code":"rate_limit_exceeded_for_org_12345"}}`)
	if o := rec.next(t); o.Status != 429 || o.Code != "upstream_error" || o.Fallback || o.Attempts != 1 {
		t.Errorf("provider error: %+v", o)
	}

	// Refused at the headers: no model, no provider, the gateway's code.
	s := e.open()
	s.roundTrip(chatHeaders("Bearer ale-"+"0000000000000000000000000000000000000000000000", "req-obs-2", true))
	s.expectClosed()
	if o := rec.next(t); o.Endpoint != EndpointChat || o.Model != "" || o.Provider != "" || o.Status != 401 || o.Code == "" || !o.Routed.IsZero() {
		t.Errorf("refused: %+v", o)
	}

	// The catalog, and a path Tollway does not serve, under bounded endpoint names.
	s = e.open()
	s.roundTrip(requestHeaders(true, hdr(":method", "GET", true), hdr(":path", "/v1/models?x=1", true)))
	s.expectClosed()
	if o := rec.next(t); o.Endpoint != EndpointModels || o.Status != 200 {
		t.Errorf("catalog: %+v", o)
	}
	s = e.open()
	s.roundTrip(requestHeaders(true, hdr(":method", "GET", true), hdr(":path", "/anything/the/client/wants", true)))
	s.expectClosed()
	if o := rec.next(t); o.Endpoint != EndpointOther || o.Status != 404 || o.Code != "not_found" {
		t.Errorf("unknown path: %+v", o)
	}

	// One attempt stream, counted under its phase.
	a := e.openAttempt("openai", "gpt")
	a.roundTrip(chatHeaders("Bearer "+validSecret, "req-obs", true))
	a.close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.started[PhaseRouter] != 5 || rec.ended[PhaseRouter] != 5 || rec.started[PhaseAttempt] != 1 || rec.ended[PhaseAttempt] != 1 {
		t.Errorf("streams started %v ended %v", rec.started, rec.ended)
	}
	if rec.busy <= 0 {
		t.Error("no time spent handling messages was measured")
	}
}
