// Package otlp is a real OTLP/gRPC trace receiver for tests and benchmarks: the collector's
// TraceService on loopback, built on the official go.opentelemetry.io/proto/otlp types. It keeps
// every span it receives (or, for load, only counts them) so a test can assert the span tree and
// its attributes.
package otlp

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one received span, flattened: ids in hex, attributes as text.
type Span struct {
	Service  string // the resource's service.name
	Scope    string // the instrumentation scope's name
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	Name     string
	Kind     string
	Attrs    map[string]string
	Start    time.Time
	End      time.Time
	Status   string // OK, ERROR or UNSET
}

// Receiver is a running OTLP/gRPC trace receiver.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr  string
	srv   *grpc.Server
	count bool // only count spans (load)

	mu    sync.Mutex
	spans []Span
	n     int
}

// Start serves a receiver on a loopback port until the test ends; countOnly keeps no spans.
func Start(t testing.TB, countOnly bool) *Receiver {
	t.Helper()
	r, err := Listen(countOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Listen serves a receiver on a loopback port; Stop ends it.
func Listen(countOnly bool) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{addr: ln.Addr().String(), srv: grpc.NewServer(), count: countOnly}
	coltracepb.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Stop ends the receiver.
func (r *Receiver) Stop() { r.srv.Stop() }

// Endpoint is tracing.otlp_endpoint for this receiver.
func (r *Receiver) Endpoint() string { return "http://" + r.addr }

// Export is the collector's TraceService: it keeps (or counts) the spans.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.n++
				if r.count {
					continue
				}
				r.spans = append(r.spans, Span{
					Service: service, Scope: ss.GetScope().GetName(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind().String(),
					Attrs: attrs(s.GetAttributes()),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Status: s.GetStatus().GetCode().String(),
				})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Count is how many spans were received.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace is the spans of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// attrs flattens OTLP attributes to text (ints in decimal, arrays as fmt prints them).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = text(kv.GetValue())
	}
	return out
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return fmt.Sprint(v.GetValue())
}
