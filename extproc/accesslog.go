package extproc

// The access log's share from ext_proc: what only it knows of a request (the account, the
// key's prefix, the model and provider that answered, the route, the error code, fallbacks,
// tokens and cost, the paid endpoint and payer) goes to Envoy as dynamic metadata in the
// tollway namespace, which the access log line reads (xds/translator/accesslog.go). Never the
// key, a prompt or a provider's secret. Envoy merges each message's metadata into the request's,
// so every answer carries what is known by then; a stream's last chunk carries the bill.

import (
	"encoding/json"
	"maps"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// logMetadata adds to resp's dynamic metadata what became known since the last message, so
// each field is built once: who and what at the request's body (or a refusal), the provider,
// fallbacks and code at the answer's headers, the bill with the answer's end. A reply ext_proc
// makes itself (an immediate response) carries everything. Streamed chunks other than the last
// carry nothing.
func (x *exchange) logMetadata(resp *extprocv3.ProcessingResponse, req *extprocv3.ProcessingRequest) {
	if resp == nil || !x.RT.AccessLog {
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
		answer, bill = x.Out.Code != "", true // an error body sets the code here
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
		if x.Key != nil {
			str("account", x.Key.Account)
			str("key_prefix", x.Key.Prefix)
		}
		str("model", x.Model) // a chat's plan
		str("route", x.Route)
		str("model", x.TaskModel)
		str("endpoint", x.PaidEndpoint)
		str("payer", x.Payer)
	}
	if answer {
		if x.Provider != "" {
			str("model", x.Model) // the model that answered (a fallback may change it)
		}
		str("provider", x.Provider)
		str("code", x.Out.Code)
		if x.Out.Attempts > 1 {
			f["fallbacks"] = structpb.NewNumberValue(float64(x.Out.Attempts - 1))
		}
	}
	if b := x.Bill; bill && b != nil {
		f["prompt_tokens"] = structpb.NewNumberValue(float64(b.Usage.PromptTokens))
		f["completion_tokens"] = structpb.NewNumberValue(float64(b.Usage.CompletionTokens))
		str("cost", b.Cost.String()) // exact, as a string: a JSON number would round it
		f["estimated"] = structpb.NewBoolValue(b.Estimated)
	}
	if len(f) == 0 {
		return
	}
	core.AddMetadata(resp, ir.MetadataNamespace, f)
}

// accessLogLine is the access log's line for a request ext_proc logs itself (a fast-lane
// stream, answers.go): the fields Envoy's line has, in the same JSON shape (keys sorted, a
// missing field null).
func accessLogLine(fields map[string]any) []byte {
	out := make(map[string]any, len(fields)+len(ir.AccessLogFields))
	for _, f := range ir.AccessLogFields {
		out[f] = nil
	}
	maps.Copy(out, fields)
	b, _ := json.Marshal(out) // strings, numbers and nulls always encode
	return append(b, '\n')
}
