// Package spans owns ext_proc's OpenTelemetry spans (the tracing: section): the tracer that
// exports them over OTLP/gRPC to the collector Envoy's tracer uses, the trace context Envoy
// hands each ext_proc stream, and the GenAI attributes. ext_proc's spans are children of the
// span Envoy's ext_proc filter gives its gRPC call, which is a child of Envoy's server span:
// Envoy decides what is sampled, and ext_proc never starts a trace of its own.
//
// Off, a nil *Tracer is used: every method returns at once, allocating nothing.
package spans

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/tollway/tollway/xds/ir"
)

// Names of ext_proc's spans.
const (
	Admission   = "admission"   // a request's key, checks, hold and route
	Translation = "translation" // an attempt's request rewritten for a provider of another API
	Settlement  = "settlement"  // a request's bill, from its usage
)

// Tracer makes ext_proc's spans; nil: tracing is off.
type Tracer struct {
	tp *sdktrace.TracerProvider
	t  trace.Tracer
}

// Start makes the tracer of t (nil: off, a nil Tracer) exporting to its collector.
func Start(t *ir.Tracing) (*Tracer, error) {
	if t == nil {
		return nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(t.Endpoint())}
	if !t.TLS {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(context.Background(), opts...) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter to %s: %w", t.Endpoint(), err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		// Envoy samples (tracing.sample_rate, or the client's traceparent): a span is made
		// only under a sampled span of Envoy's.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(t.ServiceName))),
	)
	return &Tracer{tp: tp, t: tp.Tracer("tollway/extproc")}, nil
}

// Shutdown sends the spans still buffered and stops the exporter.
func (tr *Tracer) Shutdown(ctx context.Context) error {
	if tr == nil {
		return nil
	}
	return tr.tp.Shutdown(ctx)
}

// FromStream is the trace context Envoy gave an ext_proc stream: the traceparent of its
// ext_proc filter's gRPC span, in the stream's initial metadata (Envoy 1.40; the request
// headers ext_proc sees carry only a client's own traceparent). Zero when off or untraced.
func (tr *Tracer) FromStream(ctx context.Context) trace.SpanContext {
	if tr == nil {
		return trace.SpanContext{}
	}
	tp := metadata.ValueFromIncomingContext(ctx, "traceparent")
	if len(tp) == 0 || !sampledFlag(tp[0]) {
		return trace.SpanContext{} // nothing of ext_proc's would be kept: not parsed further
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, metadataCarrier(md)))
}

// sampledFlag reads a traceparent's sampled flag (the low bit of its last hex digit) without
// parsing the rest: most requests are not sampled at a low sample_rate.
func sampledFlag(tp string) bool {
	if len(tp) < 2 {
		return false
	}
	c := tp[len(tp)-1]
	return strings.IndexByte("13579bdfBDF", c) >= 0
}

// metadataCarrier reads gRPC metadata as a propagation carrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c metadataCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Span is one of ext_proc's spans; the zero Span (off, or its trace not sampled) does nothing.
type Span struct{ s trace.Span }

// Start begins span name under parent (a sampled span of Envoy's); the zero Span otherwise.
func (tr *Tracer) Start(parent trace.SpanContext, name string) Span {
	if tr == nil || !parent.IsSampled() {
		return Span{}
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	_, s := tr.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	return Span{s}
}

// Recording reports whether the span is kept: attributes are worth computing.
func (s Span) Recording() bool { return s.s != nil }

// Context is the span's own context, for what runs under it (a task's create call).
func (s Span) Context() trace.SpanContext {
	if s.s == nil {
		return trace.SpanContext{}
	}
	return s.s.SpanContext()
}

// Set adds attributes.
func (s Span) Set(kv ...attribute.KeyValue) {
	if s.s != nil {
		s.s.SetAttributes(kv...)
	}
}

// Fail marks the span failed with the client's error code.
func (s Span) Fail(code string) {
	if s.s != nil {
		s.s.SetStatus(codes.Error, code)
		s.s.SetAttributes(attribute.String("error.type", code))
	}
}

// End ends the span.
func (s Span) End() {
	if s.s != nil {
		s.s.End()
	}
}

// Inject puts a sampled parent's traceparent on an outgoing request's headers (a task's create
// call through Envoy's internal listener, which continues the trace), and asks Envoy to trace it.
func Inject(parent trace.SpanContext, h propagation.TextMapCarrier) {
	if parent.IsSampled() {
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), parent), h)
		// The internal listener samples nothing at random: this asks it to trace the call
		// (client_sampling), so a task call is traced exactly when its request is.
		h.Set(ir.ForceTraceHeader, parent.TraceID().String())
	}
}

// Traceparent is a sampled span context as a W3C traceparent ("" otherwise), kept with what
// outlives the request (a media task) so that what ends later is traced in the request's trace.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsSampled() {
		return ""
	}
	h := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	return h.Get("traceparent")
}

// FromTraceparent is the span context a Traceparent names (zero when it names none).
func FromTraceparent(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}
