package xds

import (
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func validHCM() *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: "public",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "public",
		}},
	}
}

func withFilters(h *hcmv3.HttpConnectionManager, t *testing.T, filters ...proto.Message) *hcmv3.HttpConnectionManager {
	for i, f := range filters {
		h.HttpFilters = append(h.HttpFilters, &hcmv3.HttpFilter{
			Name:       []string{"envoy.filters.http.ext_proc", "envoy.filters.http.router"}[i%2],
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, f)},
		})
	}
	return h
}

func listenerWith(t *testing.T, typed *anypb.Any) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: "public",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
		}}},
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: typed},
			}},
		}},
	}
}

func validExtProc() *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "tollway_extproc"},
		}},
		MessageTimeout: durationpb.New(5 * time.Second),
	}
}

func TestValidateListener(t *testing.T) {
	badTimeout := validExtProc()
	badTimeout.MessageTimeout = durationpb.New(2 * time.Hour)
	noPrefix := validHCM()
	noPrefix.StatPrefix = ""
	noRoute := validHCM()
	noRoute.RouteSpecifier = nil

	tests := []struct {
		name    string
		typed   func(t *testing.T) *anypb.Any
		wantErr []string // substrings; nil = valid
	}{
		{"valid", func(t *testing.T) *anypb.Any {
			return mustAny(t, withFilters(validHCM(), t, validExtProc(), &routerv3.Router{}))
		}, nil},
		{"hcm without stat prefix", func(t *testing.T) *anypb.Any { return mustAny(t, noPrefix) },
			[]string{"HttpConnectionManager", "StatPrefix"}},
		{"hcm without route specifier", func(t *testing.T) *anypb.Any { return mustAny(t, noRoute) },
			[]string{"HttpConnectionManager", "RouteSpecifier"}},
		{"invalid http filter two Anys deep", func(t *testing.T) *anypb.Any {
			return mustAny(t, withFilters(validHCM(), t, badTimeout, &routerv3.Router{}))
		}, []string{"ExternalProcessor", "MessageTimeout"}},
		{"unknown type url", func(t *testing.T) *anypb.Any {
			return &anypb.Any{TypeUrl: "type.googleapis.com/tollway.DoesNotExist", Value: []byte{}}
		}, []string{"unpack", "tollway.DoesNotExist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listenerWith(t, tt.typed(t))
			if err := l.ValidateAll(); err != nil {
				t.Fatalf("Listener.ValidateAll: %v; the fixture must differ only inside the Any", err)
			}
			err := Validate(l)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate of a valid listener: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted an invalid message packed in an Any")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestValidateTopLevelRules(t *testing.T) {
	l := listenerWith(t, mustAny(t, validHCM()))
	l.FilterChains[0].Filters[0].Name = "" // PGV: min_len 1
	err := Validate(l)
	if err == nil {
		t.Fatal("Validate accepted a listener filter without a name")
	}
	if !strings.Contains(err.Error(), "Name") {
		t.Errorf("error %q does not name the field", err)
	}
}

func TestValidateCluster(t *testing.T) {
	cluster := func(sni string, opts proto.Message) *clusterv3.Cluster {
		c := &clusterv3.Cluster{
			Name:                 "provider.openai",
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
			ConnectTimeout:       durationpb.New(5 * time.Second),
			TransportSocket: &corev3.TransportSocket{
				Name: "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(t, &tlsv3.UpstreamTlsContext{
					Sni: sni,
				})},
			},
		}
		if opts != nil {
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
				"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(t, opts),
			}
		}
		return c
	}
	validOpts := &httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{},
		},
	}}
	tests := []struct {
		name    string
		c       *clusterv3.Cluster
		wantErr []string
	}{
		{"valid", cluster("api.openai.com", validOpts), nil},
		{"sni too long in transport socket", cluster(strings.Repeat("a", 300), nil), []string{"UpstreamTlsContext", "Sni"}},
		{"invalid Any in a map value", cluster("api.openai.com", &httpv3.HttpProtocolOptions{}), []string{"HttpProtocolOptions", "UpstreamProtocolOptions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.ValidateAll(); err != nil {
				t.Fatalf("Cluster.ValidateAll: %v; the fixture must differ only inside an Any", err)
			}
			err := Validate(tt.c)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate of a valid cluster: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted a cluster with an invalid message in an Any")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestValidateReportsEveryBadAny(t *testing.T) {
	noPrefix := validHCM()
	noPrefix.StatPrefix = ""
	l := listenerWith(t, mustAny(t, noPrefix))
	l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
		Name: "second",
		Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, withFilters(validHCM(), t, &extprocv3.ExternalProcessor{MessageTimeout: durationpb.New(-time.Second)}))},
		}},
	})
	err := Validate(l)
	if err == nil {
		t.Fatal("Validate accepted two invalid filter chains")
	}
	for _, s := range []string{"StatPrefix", "MessageTimeout"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q misses the problem in %s", err, s)
		}
	}
}
