package spans_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/test/otlp"
	"github.com/tollway/tollway/xds/ir"
)

const envoySpan = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func streamCtx(traceparent string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", traceparent))
}

// TestOffCostsNothing: with tracing off (a nil Tracer), reading the stream's trace context and
// making a span allocate nothing; for a request Envoy did not sample, one small copy (the
// traceparent's value, read for its sampled flag) and nothing more.
func TestOffCostsNothing(t *testing.T) {
	var off *spans.Tracer
	ctx := streamCtx(envoySpan)
	if n := testing.AllocsPerRun(100, func() {
		s := off.Start(off.FromStream(ctx), spans.Admission)
		if s.Recording() { // attributes are computed only for a recording span, as callers do
			s.Set(spans.OperationKey.String(spans.OpChat))
		}
		s.End()
	}); n != 0 {
		t.Errorf("off: %v allocations a request", n)
	}
	on, err := spans.Start(&ir.Tracing{Host: "127.0.0.1", Port: 9, SampleRate: 1, ServiceName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer on.Shutdown(context.Background())
	unsampledCtx := streamCtx("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	if on.FromStream(unsampledCtx).IsSampled() {
		t.Fatal("an unsampled parent read as sampled")
	}
	if n := testing.AllocsPerRun(100, func() {
		s := on.Start(on.FromStream(unsampledCtx), spans.Settlement)
		if s.Recording() {
			t.Fatal("a span under an unsampled parent records")
		}
		s.End()
	}); n > 1 { // gRPC copies the traceparent's value out of the metadata: one slice
		t.Errorf("unsampled: %v allocations a request", n)
	}
	if on.FromStream(context.Background()).IsValid() {
		t.Error("a stream without a traceparent has a trace context")
	}
}

// TestSpansReachTheCollector: a span under Envoy's sampled span (the stream's metadata) reaches
// a real OTLP receiver as its child, with its attributes and the service name; a task call's
// headers carry the trace on and ask Envoy's internal listener to trace it.
func TestSpansReachTheCollector(t *testing.T) {
	rc := otlp.Start(t, false)
	host, port, _, err := ir.ParseOTLPEndpoint(rc.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := spans.Start(&ir.Tracing{Host: host, Port: port, SampleRate: 1, ServiceName: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	parent := tr.FromStream(streamCtx(envoySpan))
	s := tr.Start(parent, spans.Settlement)
	s.Set(spans.Provider("fake")...)
	s.Fail("upstream_error")
	s.End()
	h := map[string]string{}
	spans.Inject(s.Context(), carrier(h))
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rc.Spans()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := rc.Spans()
	if len(got) != 1 {
		t.Fatalf("%d spans received", len(got))
	}
	sp := got[0]
	if sp.TraceID != "0af7651916cd43dd8448eb211c80319c" || sp.ParentID != "b7ad6b7169203331" || sp.Name != "settlement" || sp.Service != "unit" ||
		sp.Attrs["gen_ai.system"] != "fake" || sp.Attrs["error.type"] != "upstream_error" || sp.Status != "STATUS_CODE_ERROR" {
		t.Errorf("span %+v", sp)
	}
	if want := "00-0af7651916cd43dd8448eb211c80319c-" + sp.SpanID + "-01"; h["traceparent"] != want || h[ir.ForceTraceHeader] != sp.TraceID {
		t.Errorf("injected %v, want traceparent %s", h, want)
	}
	empty := map[string]string{}
	spans.Inject(trace.SpanContext{}, carrier(empty))
	if len(empty) != 0 {
		t.Errorf("an untraced call got headers %v", empty)
	}
}

type carrier map[string]string

func (c carrier) Get(k string) string { return c[k] }
func (c carrier) Set(k, v string)     { c[k] = v }
func (c carrier) Keys() []string {
	var out []string
	for k := range c {
		out = append(out, k)
	}
	return out
}
