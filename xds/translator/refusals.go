package translator

import (
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollway/tollway/xds/ir"
)

// This file owns how Tollway learns that a provider refused the gateway's credential on an
// attempt Envoy then retried elsewhere. The router logs every upstream attempt that answered
// 401 (and only those) to ext_proc's access log service, tagged with the provider from the
// endpoint's metadata: a rare event costs one log entry, and the attempts that succeed cost
// nothing (reading every attempt's response headers in the per-attempt filter cost one ext_proc
// round trip per request).

// refusalFlush is how soon a logged refusal reaches ext_proc.
const refusalFlush = 100 * time.Millisecond

// router is the router filter with the refusal log on its upstream attempts.
func router() (*routerv3.Router, error) {
	als, err := anypb.New(&grpcalsv3.HttpGrpcAccessLogConfig{CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
		LogName: ir.RefusalLogName,
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ir.ExtProcCluster},
		}},
		TransportApiVersion: corev3.ApiVersion_V3,
		BufferFlushInterval: durationpb.New(refusalFlush),
		CustomTags: []*tracingv3.CustomTag{{
			Tag: ir.RefusalProviderTag,
			Type: &tracingv3.CustomTag_Metadata_{Metadata: &tracingv3.CustomTag_Metadata{
				Kind:        &metadatav3.MetadataKind{Kind: &metadatav3.MetadataKind_Host_{Host: &metadatav3.MetadataKind_Host{}}},
				MetadataKey: &metadatav3.MetadataKey{Key: ir.MetadataNamespace, Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: "provider"}}}},
			}},
		}},
	}})
	if err != nil {
		return nil, err
	}
	return &routerv3.Router{UpstreamLog: []*accesslogv3.AccessLog{{
		Name: "envoy.access_loggers.http_grpc",
		Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{
			Comparison: &accesslogv3.ComparisonFilter{
				Op:    accesslogv3.ComparisonFilter_EQ,
				Value: &corev3.RuntimeUInt32{DefaultValue: 401, RuntimeKey: "tollway.refusal_status"},
			},
		}}},
		ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: als},
	}}}, nil
}
