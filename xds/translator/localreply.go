package translator

import (
	"fmt"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// Error codes of the replies Envoy makes itself (docs/api.md#errors).
const (
	CodeGatewayOverloaded   = "gateway_overloaded"   // 503: a circuit breaker overflowed
	CodeGatewayUnavailable  = "gateway_unavailable"  // 500: ext_proc unreachable or silent
	CodeUpstreamTimeout     = "upstream_timeout"     // 504: the last attempt stayed silent
	CodeUpstreamUnavailable = "upstream_unavailable" // 503: no provider could be reached
	CodeHeadersTooLarge     = "headers_too_large"    // 431
	CodeRequestTooLarge     = "request_too_large"    // 413
)

// localReplies gives Envoy's own error replies the spec's error body and the gateway's status
// codes. The first mapper that matches wins, so the order is the decision: an overflow is an
// overload wherever it happened; an ext_proc failure (unreachable, or silent past its message
// timeout, which Envoy answers 504) is the gateway's own 500; then the provider's failures.
// Replies ext_proc wrote itself carry code details starting with ir.ErrorCodeDetailsPrefix and are
// left alone. Details (socket paths, gRPC codes) stay in Envoy's log, not in the answer.
func localReplies() *hcmv3.LocalReplyConfig {
	notOurs := fmt.Sprintf("!response.code_details.startsWith('%s')", ir.ErrorCodeDetailsPrefix)
	// An overflow is flagged UO where Envoy's router hits a circuit breaker; an ext_proc stream
	// refused by its cluster's breaker only says so in the details.
	overloaded := mapper(&accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{OrFilter: &accesslogv3.OrFilter{
		Filters: []*accesslogv3.AccessLogFilter{
			{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: []string{"UO"}}}},
			celFilter("response.code_details.contains('overflow') && " + notOurs),
		},
	}}}, 503, CodeGatewayOverloaded, "the gateway is at its limit of concurrent requests; retry after a second")
	overloaded.HeadersToAdd = []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: "retry-after", Value: "1"},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
		overloaded,
		mapper(celFilter("response.code_details.startsWith('ext_proc')"), 500, CodeGatewayUnavailable,
			"the gateway's request processor is unavailable, so the request was refused; retry later"),
		mapper(celFilter("response.code == 413 && "+notOurs), 0, CodeRequestTooLarge,
			fmt.Sprintf("request body exceeds the gateway limit of %d MiB; send smaller images or use image URLs", ir.MaxBodyBytes>>20)),
		mapper(celFilter("response.code == 431 && "+notOurs), 0, CodeHeadersTooLarge,
			fmt.Sprintf("request headers exceed the gateway limit of %d KiB or %d headers; send fewer or smaller headers", ir.MaxRequestHeaderBytes>>10, ir.MaxRequestHeaders)),
		mapper(celFilter("response.code == 504 && "+notOurs), 0, CodeUpstreamTimeout,
			"the provider sent nothing within the gateway's attempt timeout; retry, or use another model"),
		mapper(celFilter("response.code >= 500 && "+notOurs), 0, CodeUpstreamUnavailable,
			"the provider could not be reached (%LOCAL_REPLY_BODY%); retry later, or use a model that GET /v1/models lists with is_ready: true"),
		mapper(celFilter("response.code >= 400 && "+notOurs), 0, "gateway_error", "%LOCAL_REPLY_BODY%"),
	}}
}

// mapper answers with code and message in the spec's shape, request_id from x-request-id
// (which always_set_request_id_in_response also sets on the answer); status 0 keeps Envoy's.
func mapper(filter *accesslogv3.AccessLogFilter, status uint32, code, message string) *hcmv3.ResponseMapper {
	m := &hcmv3.ResponseMapper{
		Filter: filter,
		BodyFormatOverride: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{Fields: map[string]*structpb.Value{
				"error": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
					"message":    structpb.NewStringValue(message),
					"code":       structpb.NewStringValue(code),
					"request_id": structpb.NewStringValue("%REQ(X-REQUEST-ID)%"),
				}}),
			}}},
		},
	}
	if status != 0 {
		m.StatusCode = wrapperspb.UInt32(status)
	}
	return m
}

func celFilter(expr string) *accesslogv3.AccessLogFilter {
	cel, _ := anypb.New(&celv3.ExpressionFilter{Expression: expr})
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{ExtensionFilter: &accesslogv3.ExtensionFilter{
		Name:       "envoy.access_loggers.extension_filters.cel",
		ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: cel},
	}}}
}
