// Package translator turns the IR into Envoy resources. It is a pure function: IR in, sorted
// resources out, no I/O, so golden files pin its output.
package translator

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// Resources is one consistent set of xDS resources, each list sorted by name.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
}

// Timeouts that suit model traffic: generations run for minutes, so there is no overall route
// timeout; a stream that goes silent for StreamIdle is cut.
const (
	connectTimeout = 5 * time.Second
	streamIdle     = 5 * time.Minute
)

// Translate builds the resources for g. g must have passed Validate.
func Translate(g *ir.Gateway) (*Resources, error) {
	l, err := listener(g)
	if err != nil {
		return nil, err
	}
	r := &Resources{Listeners: []*listenerv3.Listener{l}, Routes: []*routev3.RouteConfiguration{routes(g)}}
	providers := append([]ir.Provider(nil), g.Providers...)
	sort.Slice(providers, func(i, j int) bool { return providers[i].Name < providers[j].Name })
	for i := range providers {
		c, err := cluster(&providers[i])
		if err != nil {
			return nil, err
		}
		r.Clusters = append(r.Clusters, c)
	}
	return r, nil
}

func routes(g *ir.Gateway) *routev3.RouteConfiguration {
	providers := append([]ir.Provider(nil), g.Providers...)
	sort.Slice(providers, func(i, j int) bool { return providers[i].Name < providers[j].Name })
	var rs []*routev3.Route
	for _, p := range providers {
		rs = append(rs, providerRoute(&p))
	}
	// ext_proc answers every request it does not route itself; reaching this route means it let
	// one through without choosing a provider, which must not silently go anywhere.
	rs = append(rs, &routev3.Route{
		Name:  "unrouted",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: 503,
			Body: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{
				InlineString: `{"error":{"message":"no provider was selected for this request","code":"unrouted"}}`,
			}},
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{
			Header: &corev3.HeaderValue{Key: "content-type", Value: "application/json"},
		}},
	})
	return &routev3.RouteConfiguration{
		Name: ir.RouteConfigName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "tollway",
			Domains: []string{"*"},
			Routes:  rs,
			// Big base64 bodies are buffered for ext_proc; the virtual host must allow them.
			RequestBodyBufferLimit: wrapperspb.UInt64(ir.BufferLimitBytes),
		}},
	}
}

// providerRoute sends requests that ext_proc tagged with a provider to that provider's cluster,
// rewriting /v1/ to the provider's base path and Host to its authority.
func providerRoute(p *ir.Provider) *routev3.Route {
	return &routev3.Route{
		Name: ir.ClusterPrefix + p.Name,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"},
			Headers: []*routev3.HeaderMatcher{{
				Name:                 ir.ProviderHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact(p.Name)},
			}},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier:     &routev3.RouteAction_Cluster{Cluster: p.ClusterName()},
			PrefixRewrite:        p.BasePath + "/",
			HostRewriteSpecifier: &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority(p)},
			Timeout:              durationpb.New(0),
			IdleTimeout:          durationpb.New(streamIdle),
		}},
		RequestHeadersToRemove: []string{ir.ProviderHeader},
	}
}

func authority(p *ir.Provider) string {
	if (p.TLS && p.Port == 443) || (!p.TLS && p.Port == 80) {
		return p.Host
	}
	return fmt.Sprintf("%s:%d", p.Host, p.Port)
}

func cluster(p *ir.Provider) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{
		Name:                          p.ClusterName(),
		ConnectTimeout:                durationpb.New(connectTimeout),
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(ir.BufferLimitBytes),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: p.ClusterName(),
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: socketAddress(p.Host, p.Port),
					}},
				}},
			}},
		},
	}
	// Health feeds the catalog's is_ready (and, later, failover): a TCP connect check finds a
	// provider that is down before traffic does, outlier detection ejects one that fails requests.
	c.HealthChecks = []*corev3.HealthCheck{{
		Timeout:            durationpb.New(2 * time.Second),
		Interval:           durationpb.New(5 * time.Second),
		UnhealthyThreshold: wrapperspb.UInt32(2),
		HealthyThreshold:   wrapperspb.UInt32(1),
		HealthChecker:      &corev3.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &corev3.HealthCheck_TcpHealthCheck{}},
		NoTrafficInterval:  durationpb.New(5 * time.Second),
	}}
	c.OutlierDetection = &clusterv3.OutlierDetection{
		Consecutive_5Xx:                    wrapperspb.UInt32(5),
		ConsecutiveGatewayFailure:          wrapperspb.UInt32(3),
		EnforcingConsecutive_5Xx:           wrapperspb.UInt32(100),
		EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100),
		BaseEjectionTime:                   durationpb.New(30 * time.Second),
		MaxEjectionPercent:                 wrapperspb.UInt32(100),
	}
	// Literal IPs need no resolver; names use LOGICAL_DNS, the right type for large web APIs
	// behind rotating addresses.
	if _, err := netip.ParseAddr(p.Host); err == nil {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
	} else {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
		c.DnsLookupFamily = clusterv3.Cluster_V4_PREFERRED
	}
	opts := &httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(time.Hour)},
	}
	if p.TLS {
		// Host names are sent as SNI and matched as DNS SANs; literal IPs (in-mesh servers) are
		// matched as IP SANs and sent without SNI, which may not carry an address.
		sni, sanType := p.Host, tlsv3.SubjectAltNameMatcher_DNS
		if _, err := netip.ParseAddr(p.Host); err == nil {
			sni, sanType = "", tlsv3.SubjectAltNameMatcher_IP_ADDRESS
		}
		tls, err := anypb.New(&tlsv3.UpstreamTlsContext{
			Sni: sni,
			CommonTlsContext: &tlsv3.CommonTlsContext{
				AlpnProtocols: []string{"h2", "http/1.1"},
				ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
					ValidationContext: &tlsv3.CertificateValidationContext{
						TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p.CAFile}},
						// Without a SAN matcher Envoy checks the chain but not the host name.
						MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
							SanType: sanType,
							Matcher: exact(p.Host),
						}},
					},
				},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("translator: provider %s tls: %w", p.Name, err)
		}
		c.TransportSocket = &corev3.TransportSocket{
			Name:       "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tls},
		}
		// HTTPS APIs negotiate h2 or http/1.1 by ALPN.
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_AutoConfig{AutoConfig: &httpv3.HttpProtocolOptions_AutoHttpConfig{
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
		}}
	} else {
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{},
		}}
	}
	if err := typedOptions(c, opts); err != nil {
		return nil, fmt.Errorf("translator: provider %s: %w", p.Name, err)
	}
	return c, nil
}

func typedOptions(c *clusterv3.Cluster, opts proto.Message) error {
	a, err := anypb.New(opts)
	if err != nil {
		return err
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": a}
	return nil
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}
