package translator

// Tracing (ir.Tracing): Envoy's own OpenTelemetry tracer on the HTTP connection managers, so
// Envoy makes the server span of each request and one upstream span per attempt (a fallback
// shows both), continues a client's traceparent and sends it on to the provider; its spans go
// over OTLP/gRPC to the collector's cluster. ext_proc's gRPC calls get child spans of their own,
// under which ext_proc adds its spans (extproc/spans).

import (
	"fmt"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// tracerName is Envoy's OpenTelemetry tracer.
const tracerName = "envoy.tracers.opentelemetry"

// hcmTracing is the connection manager's tracing: nil when t is (off). A request with a
// traceparent keeps its trace id; requests are sampled at t.SampleRate, or, when parentOnly
// (the internal listener), only when they ask with ir.ForceTraceHeader (client_sampling): a task
// call is traced when its request is.
func hcmTracing(t *ir.Tracing, parentOnly bool) (*hcmv3.HttpConnectionManager_Tracing, error) {
	if t == nil {
		return nil, nil
	}
	rate := t.SampleRate
	if parentOnly {
		rate = 0
	}
	cfg, err := anypb.New(&tracev3.OpenTelemetryConfig{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ir.TracingCluster}},
			Timeout:         durationpb.New(exportTimeout),
		},
		ServiceName: t.ServiceName,
	})
	if err != nil {
		return nil, fmt.Errorf("translator: tracing: %w", err)
	}
	return &hcmv3.HttpConnectionManager_Tracing{
		Provider:       &tracev3.Tracing_Http{Name: tracerName, ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: cfg}},
		RandomSampling: &typev3.Percent{Value: rate * 100},
		// One span per attempt, so a fallback's failed attempt shows beside the one that answered.
		SpawnUpstreamSpan: wrapperspb.Bool(true),
	}, nil
}

// exportTimeout bounds one export of spans to the collector.
const exportTimeout = 5 * time.Second

// tracingCluster reaches the collector: plaintext HTTP/2, or TLS (h2 by ALPN) verified
// against the system bundle; a host name is resolved by DNS.
func tracingCluster(t *ir.Tracing) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{
		Name:                 ir.TracingCluster,
		ConnectTimeout:       durationpb.New(connectTimeout),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		DnsLookupFamily:      clusterv3.Cluster_V4_PREFERRED,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: ir.TracingCluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(t.Host, t.Port)}},
			}}}},
		},
	}
	opts := &httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		},
	}}
	if t.TLS {
		ts, err := tlsSocket(t.Host, t.CAFile, []string{"h2"})
		if err != nil {
			return nil, fmt.Errorf("translator: tracing tls: %w", err)
		}
		c.TransportSocket = ts
	}
	if err := typedOptions(c, opts); err != nil {
		return nil, fmt.Errorf("translator: cluster %s: %w", ir.TracingCluster, err)
	}
	return c, nil
}
