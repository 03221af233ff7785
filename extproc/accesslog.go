package extproc

// The access log's share from ext_proc: what only it knows of a request (the account, the
// key's prefix, the model and provider that answered, the route, the error code, fallbacks,
// tokens and cost, the paid endpoint and payer) goes to Envoy as dynamic metadata in the
// tollway namespace, which the access log line reads (xds/translator/accesslog.go). Never the
// key, a prompt or a provider's secret. Envoy merges each message's metadata into the request's,
// so every answer carries what is known by then; a stream's last chunk carries the bill.

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/xds/ir"
)

// billed is a settled request's bill, kept for the access log.
type billed struct {
	usage     ir.Usage
	estimated bool
	cost      decimal.Decimal
}

// logMetadata adds to resp's dynamic metadata what became known since the last message, so
// each field is built once: who and what at the request's body (or a refusal), the provider,
// fallbacks and code at the answer's headers, the bill with the answer's end. A reply ext_proc
// makes itself (an immediate response) carries everything. Streamed chunks other than the last
// carry nothing.
func (x *exchange) logMetadata(resp *extprocv3.ProcessingResponse, req *extprocv3.ProcessingRequest) {
	if resp == nil || !x.rt.AccessLog {
		return
	}
	_, immediate := resp.Response.(*extprocv3.ProcessingResponse_ImmediateResponse)
	var who, answer, bill bool
	switch {
	case immediate:
		who, answer, bill = true, true, true
	case req.GetRequestBody() != nil:
		who = true
	case req.GetResponseHeaders() != nil:
		answer = true
	case req.GetResponseBody() != nil && req.GetResponseBody().GetEndOfStream():
		answer, bill = x.out.Code != "", true // an error body sets the code here
	default:
		return
	}
	f := make(map[string]*structpb.Value, 8)
	str := func(k, v string) {
		if v != "" {
			f[k] = structpb.NewStringValue(v)
		}
	}
	if who {
		if x.key != nil {
			str("account", x.key.Account)
			str("key_prefix", x.key.Prefix)
		}
		if x.plan != nil {
			str("model", x.plan.model.ID)
			str("route", x.plan.routeID())
		}
		str("model", x.taskModel)
		if x.pay != nil {
			str("endpoint", x.pay.slug)
			str("payer", x.pay.cred.Payer)
		}
	}
	if answer {
		if x.plan != nil && x.provider != "" {
			str("model", x.plan.model.ID) // the model that answered (a fallback may change it)
		}
		str("provider", x.provider)
		str("code", x.out.Code)
		if x.out.Attempts > 1 {
			f["fallbacks"] = structpb.NewNumberValue(float64(x.out.Attempts - 1))
		}
	}
	if b := x.bill; bill && b != nil {
		f["prompt_tokens"] = structpb.NewNumberValue(float64(b.usage.PromptTokens))
		f["completion_tokens"] = structpb.NewNumberValue(float64(b.usage.CompletionTokens))
		str("cost", b.cost.String()) // exact, as a string: a JSON number would round it
		f["estimated"] = structpb.NewBoolValue(b.estimated)
	}
	if len(f) == 0 {
		return
	}
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
		ir.MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: f}),
	}}
}
