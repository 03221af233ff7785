package core

// A request's spans (extproc/spans): its trace context from Envoy, its admission span, and the
// attributes every span of the request carries.

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollway/tollway/extproc/spans"
)

// Traced is what a request's spans hang from: the span context of its ext_proc stream (zero:
// untraced) and the admission span while it is open.
type Traced struct {
	Trace trace.SpanContext
	// Operation is gen_ai.operation.name; RequestModel what the client asked for (a catalog
	// model or a route).
	Operation, RequestModel string
	admission               spans.Span
}

// StartAdmission opens the request's admission span (operation op): its key, checks, hold and
// route, until EndAdmission or a refusal.
func (x *Exchange) StartAdmission(op string) {
	x.Operation = op
	if x.Shared != nil {
		x.admission = x.Spans.Start(x.Trace, spans.Admission)
	}
}

// EndAdmission closes the admission span, if open, with what was admitted.
func (x *Exchange) EndAdmission() {
	s := x.admission
	if !s.Recording() {
		return
	}
	x.admission = spans.Span{}
	s.Set(x.SpanAttrs()...)
	s.End()
}

// failAdmission closes the admission span with the refusal's code.
func (x *Exchange) failAdmission(code string) {
	x.admission.Fail(code)
	x.EndAdmission()
}

// StartSpan opens span name of this request (the zero Span when untraced).
func (x *Exchange) StartSpan(name string) spans.Span {
	if x.Shared == nil {
		return spans.Span{}
	}
	return x.Spans.Start(x.Trace, name)
}

// SpanAttrs are the attributes every span of the request carries: the operation, the model
// asked for, the route, the key's prefix (never the key) and the request id.
func (x *Exchange) SpanAttrs() []attribute.KeyValue {
	kv := []attribute.KeyValue{spans.OperationKey.String(x.Operation), spans.RequestIDKey.String(x.RequestID)}
	if x.RequestModel != "" {
		kv = append(kv, spans.RequestModelKey.String(x.RequestModel))
	}
	if x.Route != "" {
		kv = append(kv, spans.RouteKey.String(x.Route))
	}
	if x.Key != nil {
		kv = append(kv, spans.KeyPrefixKey.String(x.Key.Prefix))
	}
	return kv
}

// EndSettlement closes span, the settlement of the request's bill (x.Bill) by model, with the
// GenAI usage attributes and its cost.
func (x *Exchange) EndSettlement(span spans.Span, model string) {
	if b := x.Bill; span.Recording() && b != nil {
		span.Set(x.SpanAttrs()...)
		span.Set(spans.Provider(x.Provider)...)
		span.Set(spans.ResponseModelKey.String(model), spans.InputTokensKey.Int64(b.Usage.PromptTokens),
			spans.OutputTokensKey.Int64(b.Usage.CompletionTokens), spans.Cost(b.Cost), spans.EstimatedKey.Bool(b.Estimated))
	}
	span.End()
}
