package translator

// The internal listener: the gateway's own task requests (creating a video task, querying it,
// looking up its file) reach providers through Envoy like every provider request, with the
// providers' TLS, health checks, outlier detection and circuit breakers. It listens on
// loopback only, and only a request naming a provider's cluster is routed.

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// taskTimeout bounds one task request. Most are short JSON calls, but a provider that answers a
// create with the finished image (Gemini) takes up to a minute or two; the gateway's own
// deadline per call (create, refresh, poll) is what governs.
const taskTimeout = ir.MaxExtProcMessageTimeout

func internalListener(g *ir.Gateway) (*listenerv3.Listener, error) {
	vh := &routev3.VirtualHost{Name: ir.InternalListenerName, Domains: []string{"*"}}
	for _, p := range g.Providers {
		remove := []string{ir.ClusterHeader, ir.ForceTraceHeader}
		if !p.AttemptFilter() {
			// The task marker tells a per-attempt filter to let the request pass; this
			// provider's cluster runs none, so the marker must not reach the provider either.
			remove = append(remove, ir.TaskHeader)
		}
		vh.Routes = append(vh.Routes, &routev3.Route{
			Match: &routev3.RouteMatch{
				PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
				Headers: []*routev3.HeaderMatcher{{Name: ir.ClusterHeader, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
					StringMatch: exact(p.ClusterName()),
				}}},
			},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: p.ClusterName()},
				Timeout:          durationpb.New(taskTimeout),
			}},
			RequestHeadersToRemove: remove,
		})
	}
	vh.Routes = append(vh.Routes, &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404}},
	})
	rt, err := router()
	if err != nil {
		return nil, err
	}
	rtAny, err := anypb.New(rt)
	if err != nil {
		return nil, err
	}
	// The gateway's own task calls carry their request's traceparent (extproc/spans): traced,
	// they show under it.
	tracing, err := hcmTracing(g.Tracing, true)
	if err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{
		Tracing:        tracing,
		StatPrefix:     ir.InternalListenerName,
		CodecType:      hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: ir.InternalListenerName, VirtualHosts: []*routev3.VirtualHost{vh}}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: wellknown.Router, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: rtAny}}},
	}
	hcmAny, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("translator: internal hcm: %w", err)
	}
	return &listenerv3.Listener{
		Name:    ir.InternalListenerName,
		Address: socketAddress(g.Internal.Address, g.Internal.Port),
		// A create carries up to a 32 MiB body (a 20 MB image in base64), which the per-attempt
		// filter buffers: Envoy's 1 MiB default would answer 413.
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(ir.BufferLimitBytes),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: wellknown.HTTPConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
		}}}},
	}, nil
}
