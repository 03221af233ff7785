package core

// A provider's error answer as the client gets it, whichever endpoint it answered (chat,
// embeddings): in the spec's shape, its code counted, a refused credential never blamed on the
// client.

import (
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// gatewayCodes are the codes of errors that Envoy answers for the gateway (its local-reply
// mappers): such an answer, from no provider, keeps its code; a provider's own codes are
// unbounded and count as upstream_error.
var gatewayCodes = map[string]bool{
	"gateway_unavailable": true, "gateway_overloaded": true, "upstream_unavailable": true,
	"upstream_timeout": true, "unrouted": true,
}

// ProviderError rewrites an error answer (x.Status >= 400, its body b) into the spec's shape.
// routed: the request was planned and sent to a provider (a 401 then refuses the gateway's
// credential for it, answered as 502 upstream_auth_failed).
func (x *Exchange) ProviderError(b []byte, routed bool) *extprocv3.ProcessingResponse {
	name := "the provider"
	if x.Provider != "" {
		name = x.Provider
	}
	e := UpstreamError(x.Status, name, b)
	set := []*corev3.HeaderValueOption{}
	code := e.Code // a provider's own code is unbounded: counted as upstream_error
	if x.Provider != "" || !gatewayCodes[code] {
		code = "upstream_error"
	}
	if x.Status == http.StatusUnauthorized && routed {
		// Clients' keys never reach providers: a provider's 401 refuses the gateway's own
		// credential. Passing it on as a 401 would tell the client to change a valid key. (The
		// attempt filter, which sees every attempt's answer, records the refusal.)
		e = Errorf(http.StatusBadGateway, "upstream_auth_failed",
			"provider %s refused the gateway's credential for it; the operator must fix its api_key (the request was not served, and your API key is fine)", name)
		set = append(set, SetHeader(":status", strconv.Itoa(e.Status)))
		code = e.Code
	}
	if x.Refine != nil && e.Status == http.StatusBadRequest {
		// The provider refused a business parameter: a paid endpoint's 422 (docs/x402.md#statuses).
		e = x.Refine(e)
		set = append(set, SetHeader(":status", strconv.Itoa(e.Status)))
	}
	x.Answered(e.Status, code)
	body := e.Body(x.RequestID)
	set = append(set, SetHeader("content-type", "application/json"), SetHeader("content-length", strconv.Itoa(len(body))))
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		}},
	}}
}
