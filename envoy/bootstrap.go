// Package envoy owns the Envoy process: the bootstrap that points it at Tollway's xDS and
// ext_proc servers, and a launcher that starts, watches, drains and stops it.
package envoy

import (
	"cmp"
	"fmt"
	"net"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	downstreamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// Endpoint is where Envoy reaches one of Tollway's gRPC servers or its own admin: a unix socket
// path, or host:port when Network is "tcp".
type Endpoint struct {
	Network string // "unix" or "tcp"
	Address string
}

// BootstrapConfig names the endpoints the bootstrap wires together.
type BootstrapConfig struct {
	XDS     Endpoint
	ExtProc Endpoint
	Admin   Endpoint
	// Limits size the ext_proc cluster's circuit breakers and the downstream connection limit.
	// They are fixed for Envoy's lifetime: the bootstrap's clusters cannot change over xDS.
	Limits ir.Limits
	// Node is the Envoy's node id (xds.NodeID when empty: the Envoy Tollway starts itself).
	Node string
	// Listen, when set, is this node's public listener (host:port) instead of listen.public,
	// carried to the control plane in the node's metadata (xds.ListenMetadata), so several
	// Envoys can share one host.
	Listen string
}

// xdsStreams bounds the xDS cluster: one ADS stream, and its replacement while reconnecting.
const xdsStreams = 16

// DownstreamConnections is how many client connections Envoy accepts at once for limits: one
// per open request (HTTP/1.1), plus idle keep-alive connections. Past it Envoy refuses
// connections, which keeps it from running out of file descriptors.
func DownstreamConnections(l ir.Limits) int64 { return int64(l.Requests()) + 1024 }

// FileDescriptors estimates what Envoy needs for limits: every client connection, one upstream
// connection per open request (HTTP/1.1 providers), and its own sockets and files.
func FileDescriptors(l ir.Limits) uint64 {
	return uint64(DownstreamConnections(l)) + uint64(l.Requests()) + 1024
}

// Bootstrap builds Envoy's static configuration: everything else arrives over ADS.
func Bootstrap(c BootstrapConfig) (*bootstrapv3.Bootstrap, error) {
	h2, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("envoy: bootstrap: %w", err)
	}
	grpcCluster := func(name string, ep Endpoint, streams uint32) *clusterv3.Cluster {
		discovery := clusterv3.Cluster_STATIC
		if host, _ := splitHostPort(ep.Address); ep.Network != "unix" && net.ParseIP(host) == nil {
			discovery = clusterv3.Cluster_STRICT_DNS // a name, e.g. a Kubernetes Service
		}
		return &clusterv3.Cluster{
			Name:                 name,
			ConnectTimeout:       durationpb.New(time.Second),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: discovery},
			// ext_proc messages carry whole bodies (a translated answer with a 4 MB image is
			// over 5 MB): with Envoy's 1 MiB default, Envoy 1.40 crashes on answers over it.
			PerConnectionBufferLimitBytes: wrapperspb.UInt32(2 * ir.BufferLimitBytes),
			// Every gRPC stream counts as one request for as long as it is open.
			CircuitBreakers:               translator.CircuitBreakers(streams),
			TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2},
			LoadAssignment: &endpointv3.ClusterLoadAssignment{
				ClusterName: name,
				Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: address(ep)}},
				}}}},
			},
		}
	}
	ads := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
	node := &corev3.Node{Id: cmp.Or(c.Node, xds.NodeID), Cluster: xds.NodeID}
	if c.Listen != "" {
		node.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{xds.ListenMetadata: structpb.NewStringValue(c.Listen)}}
	}
	b := &bootstrapv3.Bootstrap{
		Node: node,
		Admin: &bootstrapv3.Admin{
			Address: address(c.Admin),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{
			grpcCluster(ir.XDSCluster, c.XDS, xdsStreams),
			grpcCluster(ir.ExtProcCluster, c.ExtProc, c.Limits.ExtProcStreams()),
		}},
		OverloadManager: overloadManager(c.Limits),
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ir.XDSCluster},
				}}},
				SetNodeOnFirstMessageOnly: true,
			},
			CdsConfig: ads,
			LdsConfig: ads,
		},
	}
	if err := xds.Validate(b); err != nil {
		return nil, fmt.Errorf("envoy: bootstrap fails validation: %w", err)
	}
	return b, nil
}

// overloadManager caps client connections (see DownstreamConnections).
func overloadManager(l ir.Limits) *overloadv3.OverloadManager {
	cfg, _ := anypb.New(&downstreamv3.DownstreamConnectionsConfig{MaxActiveDownstreamConnections: DownstreamConnections(l)})
	return &overloadv3.OverloadManager{ResourceMonitors: []*overloadv3.ResourceMonitor{{
		Name:       "envoy.resource_monitors.global_downstream_max_connections",
		ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: cfg},
	}}}
}

// MarshalBootstrap renders b as the JSON file Envoy is started with.
func MarshalBootstrap(b *bootstrapv3.Bootstrap) ([]byte, error) {
	return protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(b)
}

func address(ep Endpoint) *corev3.Address {
	if ep.Network == "unix" {
		return &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: ep.Address}}}
	}
	host, port := splitHostPort(ep.Address)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
