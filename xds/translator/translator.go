// Package translator turns the IR into Envoy resources. It is a pure function: IR in, sorted
// resources out, no I/O, so golden files pin its output.
package translator

import (
	"fmt"
	"maps"
	"net/netip"
	"sort"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
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
	rc, err := routes(g)
	if err != nil {
		return nil, err
	}
	r := &Resources{Listeners: []*listenerv3.Listener{l}, Routes: []*routev3.RouteConfiguration{rc}}
	if g.Internal != nil {
		il, err := internalListener(g)
		if err != nil {
			return nil, err
		}
		r.Listeners = append(r.Listeners, il) // "internal" sorts before "public"
		r.Listeners[0], r.Listeners[1] = r.Listeners[1], r.Listeners[0]
	}
	providers := make(map[string]*ir.Provider, len(g.Providers))
	for i := range g.Providers {
		p := &g.Providers[i]
		providers[p.Name] = p
		// A provider's own cluster serves requests with one attempt on it (pinned by
		// route.provider, or a chain of one), and the gateway's task requests; it runs the
		// per-attempt filter only where a chat request needs it (ir.Provider.AttemptFilter).
		c, err := cluster(p.ClusterName(), []endpoint{{provider: p}}, g.Limits, p.AttemptFilter())
		if err != nil {
			return nil, err
		}
		r.Clusters = append(r.Clusters, c)
	}
	for _, ch := range g.Chains() {
		if len(ch.Targets) == 0 {
			// No provider of the chain can take traffic: ext_proc answers 503 model_unavailable
			// (or route_unavailable) itself and never names this cluster.
			continue
		}
		eps := make([]endpoint, len(ch.Targets))
		for i, t := range ch.Targets {
			eps[i] = endpoint{provider: providers[t.Provider], model: t.Model}
		}
		c, err := cluster(ch.Cluster, eps, g.Limits, true)
		if err != nil {
			return nil, err
		}
		r.Clusters = append(r.Clusters, c)
	}
	if g.Tracing != nil {
		c, err := tracingCluster(g.Tracing)
		if err != nil {
			return nil, err
		}
		r.Clusters = append(r.Clusters, c)
	}
	sort.Slice(r.Clusters, func(i, j int) bool { return r.Clusters[i].Name < r.Clusters[j].Name })
	return r, nil
}

// clientAddressHeaders say where a request came from. Providers learn nothing about the
// gateway's clients: Envoy uses them (listen.xff_num_trusted_hops) and removes them here.
var clientAddressHeaders = []string{
	"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "forwarded",
	"x-real-ip", "x-client-ip", "true-client-ip", "cf-connecting-ip", "fastly-client-ip",
	"x-cluster-client-ip", "x-original-forwarded-for", "x-envoy-external-address", "x-envoy-internal",
}

// maxAttempts bounds the retries of one request; ext_proc lowers it per request
// (x-envoy-max-retries) to the length of the request's chain.
const maxAttempts = 8

func routes(g *ir.Gateway) (*routev3.RouteConfiguration, error) {
	// Every route of the gateway runs ext_proc pipelined (ExtProc); a copy of each route for big
	// request bodies (ir.PipelinedLength) has Envoy buffer the body instead. This is the one
	// place the modes are set for them.
	pipelinedMode, bufferedMode := PipelinedMode(), BufferedBodyMode()
	if g.FastLane {
		pipelinedMode, bufferedMode = SplitRequestMode(pipelinedMode), SplitRequestMode(bufferedMode)
	}
	pipelined, err := perRouteMode(pipelinedMode)
	if err != nil {
		return nil, err
	}
	buffered, err := perRouteMode(bufferedMode)
	if err != nil {
		return nil, err
	}
	rs := []*routev3.Route{{
		// ext_proc names the cluster (a chain, or a provider for a pinned request) after reading
		// the body; Envoy then walks the chain's priorities on failure, each attempt rewritten by
		// the upstream ext_proc for its own provider.
		Name: "chat",
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"},
			Headers: []*routev3.HeaderMatcher{{
				Name:                 ir.ClusterHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
			}},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_ClusterHeader{ClusterHeader: ir.ClusterHeader},
			Timeout:          durationpb.New(0),
			IdleTimeout:      durationpb.New(streamIdle),
			RetryPolicy:      retryPolicy(g.AttemptIdle()),
		}},
		RequestHeadersToRemove: append([]string{ir.ClusterHeader}, clientAddressHeaders...),
		// Which attempt answered, from the endpoint Envoy picked: ext_proc bills that model.
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{
			Header: &corev3.HeaderValue{
				Key:   ir.ServedHeader,
				Value: "%UPSTREAM_METADATA(" + ir.MetadataNamespace + ":provider)%/%UPSTREAM_METADATA(" + ir.MetadataNamespace + ":model)%",
			},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}, {
			// How many attempts Envoy made: ext_proc counts the fallbacks.
			Header:       &corev3.HeaderValue{Key: ir.AttemptsHeader, Value: "%UPSTREAM_REQUEST_ATTEMPT_COUNT%"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	}}
	// Embeddings (POST /v1/embeddings) route as chat does, with the chat route's chain and
	// retries, under a name of their own (the access log's route); their answer is read whole.
	emb := proto.Clone(rs[0]).(*routev3.Route)
	emb.Name = "embeddings"
	emb.Match.PathSpecifier = &routev3.RouteMatch_Path{Path: ir.EmbeddingsPath}
	// ext_proc answers every request it does not route itself; reaching this route means it let
	// one through without choosing a cluster, which must not silently go anywhere.
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
	host := map[string]*anypb.Any{extProcFilterName: pipelined}
	if g.FastLane {
		// A split gateway (answers.go): the fast lane's route first, then the chunk lane's.
		laneHost, chunk, fast, err := laneConfigs()
		if err != nil {
			return nil, err
		}
		maps.Copy(host, laneHost)
		rs[0].TypedPerFilterConfig = chunk
		emb.TypedPerFilterConfig = chunk // never the fast lane: an embeddings answer is no stream
		// A refusal ext_proc deferred to the answer's headers (a client's invalid request id,
		// replaced first) takes the unrouted reply through the chunk lane's filter.
		d := proto.Clone(rs[1]).(*routev3.Route)
		d.Name = "deferred"
		d.Match.Headers = append(d.Match.Headers, &routev3.HeaderMatcher{
			Name:                 ir.LaneHeader,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact(ir.LaneDeferred)},
		})
		d.TypedPerFilterConfig = chunk
		rs = append(rs[:1], d, rs[1])
		f := proto.Clone(rs[0]).(*routev3.Route)
		f.Name = "chat-fast"
		f.Match.Headers = append(f.Match.Headers, &routev3.HeaderMatcher{
			Name:                 ir.LaneHeader,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact(ir.LaneFast)},
		})
		f.RequestHeadersToRemove = append(f.RequestHeadersToRemove, ir.LaneHeader)
		f.TypedPerFilterConfig = fast
		rs = append([]*routev3.Route{f}, rs...)
	}
	rs = append([]*routev3.Route{emb}, rs...)
	// Each route first for big bodies (or none declared), then as it is: the route a request
	// matches before ext_proc answered its headers fixes the filter's mode for the request.
	all := make([]*routev3.Route, 0, 2*len(rs))
	for _, r := range rs {
		big := proto.Clone(r).(*routev3.Route)
		big.Name += "-buffered"
		big.Match.Headers = append(big.Match.Headers, &routev3.HeaderMatcher{
			Name: "content-length",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: ir.PipelinedLength}},
			}},
			InvertMatch: true,
			// A request without content-length matches too (as an empty value).
			TreatMissingHeaderAsEmpty: true,
		})
		big.TypedPerFilterConfig = maps.Clone(r.TypedPerFilterConfig)
		if big.TypedPerFilterConfig == nil {
			big.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		big.TypedPerFilterConfig[extProcFilterName] = buffered
		all = append(all, big, r)
	}
	return &routev3.RouteConfiguration{
		Name: ir.RouteConfigName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "tollway",
			Domains: []string{"*"},
			Routes:  all,
			// Big base64 bodies are buffered for ext_proc and kept for retries.
			RequestBodyBufferLimit: wrapperspb.UInt64(ir.BufferLimitBytes),
			TypedPerFilterConfig:   host,
		}},
	}, nil
}

func perRouteMode(m *extprocv3.ProcessingMode) (*anypb.Any, error) {
	a, err := anypb.New(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
		Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: m},
	}})
	if err != nil {
		return nil, fmt.Errorf("translator: ext_proc per route: %w", err)
	}
	return a, nil
}

// retryPolicy moves a failed attempt to the next priority (the next provider or model of the
// chain). Retried: connection failures and resets before the answer started, 5xx, 401, 408, 429,
// and an attempt that stays silent for attemptIdle. Not retried: 400, 403, 404, 413, 422 and
// other 4xx (the request itself, or a content policy, is at fault: another provider would refuse
// it too) and anything after the first byte reached the client.
func retryPolicy(attemptIdle time.Duration) *routev3.RetryPolicy {
	prev, _ := anypb.New(&previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 1})
	return &routev3.RetryPolicy{
		RetryOn: "5xx,reset,connect-failure,retriable-status-codes",
		// 401 from a provider is the gateway's provider key at fault (clients' keys never reach
		// providers), so another provider may well succeed; 408 and 429 are transient.
		RetriableStatusCodes: []uint32{401, 408, 429},
		NumRetries:           wrapperspb.UInt32(maxAttempts - 1),
		PerTryIdleTimeout:    durationpb.New(attemptIdle),
		RetryPriority: &routev3.RetryPolicy_RetryPriority{
			Name:       "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: prev},
		},
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(time.Millisecond), // the next attempt goes elsewhere: no need to wait
			MaxInterval:  durationpb.New(10 * time.Millisecond),
		},
	}
}

// endpoint is one attempt of a cluster: a provider and, in a chain, the catalog model it serves.
type endpoint struct {
	provider *ir.Provider
	model    string
}

// cluster builds an upstream cluster whose endpoints are attempts in priority order. Each
// endpoint carries its provider (and model) as metadata for the upstream ext_proc, and selects
// its own TLS settings through transport socket matching, since one chain mixes providers.
// perAttempt says whether each attempt runs the upstream ext_proc (UpstreamExtProc).
func cluster(name string, eps []endpoint, limits ir.Limits, perAttempt bool) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{
		Name:                          name,
		CircuitBreakers:               CircuitBreakers(limits.Requests()),
		ConnectTimeout:                durationpb.New(connectTimeout),
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(ir.BufferLimitBytes),
		// STRICT_DNS resolves host names and takes literal IPs; every priority is one attempt.
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		DnsLookupFamily:      clusterv3.Cluster_V4_PREFERRED,
		LoadAssignment:       &endpointv3.ClusterLoadAssignment{ClusterName: name},
		// Health changes reach the workers at once rather than merged over Envoy's default 1 s
		// window, so fallback follows a provider's health from the first request on.
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{UpdateMergeWindow: durationpb.New(0)},
	}
	// h2 is negotiated by ALPN, which Envoy allows only when every endpoint speaks TLS; a
	// cluster that mixes TLS and plaintext endpoints uses HTTP/1.1 throughout.
	allTLS := len(eps) > 0 // an empty cluster is not "all TLS": it has no transport socket
	for _, ep := range eps {
		allTLS = allTLS && ep.provider.TLS
	}
	alpn := []string{"http/1.1"}
	if allTLS {
		alpn = []string{"h2", "http/1.1"}
	}
	tlsDone := map[string]bool{}
	for i, ep := range eps {
		p := ep.provider
		fields := map[string]*structpb.Value{"provider": structpb.NewStringValue(p.Name)}
		if ep.model != "" {
			fields["model"] = structpb.NewStringValue(ep.model)
		}
		md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ir.MetadataNamespace: {Fields: fields}}}
		if p.TLS {
			md.FilterMetadata["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{
				"tls": structpb.NewStringValue(p.Name),
			}}
			if !tlsDone[p.Name] {
				tlsDone[p.Name] = true
				ts, err := tlsSocket(p.Host, p.CAFile, alpn)
				if err != nil {
					return nil, fmt.Errorf("translator: provider %s tls: %w", p.Name, err)
				}
				if c.TransportSocket == nil && allTLS {
					c.TransportSocket = ts // the default must speak ALPN too; matches pick per endpoint
				}
				c.TransportSocketMatches = append(c.TransportSocketMatches, &clusterv3.Cluster_TransportSocketMatch{
					Name:            "tls." + p.Name,
					Match:           &structpb.Struct{Fields: map[string]*structpb.Value{"tls": structpb.NewStringValue(p.Name)}},
					TransportSocket: ts,
				})
			}
		}
		c.LoadAssignment.Endpoints = append(c.LoadAssignment.Endpoints, &endpointv3.LocalityLbEndpoints{
			Priority: uint32(i),
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address:  socketAddress(p.Host, p.Port),
					Hostname: p.Authority(),
				}},
				Metadata: md,
			}},
		})
	}
	// Health feeds the catalog's is_ready and lets a chain skip a provider that is down before
	// any request fails on it: a TCP connect check finds one that is down, outlier detection
	// ejects one that fails requests.
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
	opts, err := upstreamOptions(allTLS, perAttempt)
	if err != nil {
		return nil, fmt.Errorf("translator: cluster %s: %w", name, err)
	}
	if err := typedOptions(c, opts); err != nil {
		return nil, fmt.Errorf("translator: cluster %s: %w", name, err)
	}
	return c, nil
}

// tlsSocket verifies an upstream's certificate (a provider's, the collector's) against its CA
// bundle and host name. Host names are sent as SNI and matched as DNS SANs; literal IPs
// (in-mesh servers) are matched as IP SANs and sent without SNI, which may not carry an address.
func tlsSocket(host, caFile string, alpn []string) (*corev3.TransportSocket, error) {
	sni, sanType := host, tlsv3.SubjectAltNameMatcher_DNS
	if _, err := netip.ParseAddr(host); err == nil {
		sni, sanType = "", tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	tls, err := anypb.New(&tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols: alpn,
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
				ValidationContext: &tlsv3.CertificateValidationContext{
					TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: caFile}},
					// Without a SAN matcher Envoy checks the chain but not the host name.
					MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
						SanType: sanType,
						Matcher: exact(host),
					}},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{
		Name:       "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tls},
	}, nil
}

// upstreamOptions: all-TLS clusters negotiate h2 or http/1.1 by ALPN, others use HTTP/1.1; with
// perAttempt the upstream filter chain runs the per-attempt ext_proc before the codec.
func upstreamOptions(allTLS, perAttempt bool) (*httpv3.HttpProtocolOptions, error) {
	opts := &httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(time.Hour)},
	}
	if allTLS {
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_AutoConfig{AutoConfig: &httpv3.HttpProtocolOptions_AutoHttpConfig{
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
		}}
	} else {
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{},
		}}
	}
	if !perAttempt {
		return opts, nil
	}
	filters, err := upstreamFilters()
	if err != nil {
		return nil, err
	}
	opts.HttpFilters = filters
	return opts, nil
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
