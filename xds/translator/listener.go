package translator

import (
	"fmt"
	"time"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// ExtProcMessageTimeout bounds each ext_proc exchange. Buffered 32 MiB bodies need more than
// Envoy's 200 ms default; past it Envoy fails closed.
const ExtProcMessageTimeout = 5 * time.Second

func listener(g *ir.Gateway) (*listenerv3.Listener, error) {
	filters, err := httpFilters(g.FastLane)
	if err != nil {
		return nil, err
	}
	logs, err := accessLogs(g.AccessLog, g.FastLane)
	if err != nil {
		return nil, err
	}
	if g.FastLane {
		al, err := answerLog()
		if err != nil {
			return nil, err
		}
		logs = append(logs, al)
	}
	tracing, err := hcmTracing(g.Tracing, false)
	if err != nil {
		return nil, err
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: ir.ListenerName,
		Tracing:    tracing,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: ir.RouteConfigName,
			ConfigSource:    adsSource(),
		}},
		HttpFilters:                  filters,
		AccessLog:                    logs,
		AccessLogOptions:             accessLogOptions(g.FastLane),
		StreamIdleTimeout:            durationpb.New(streamIdle),
		AlwaysSetRequestIdInResponse: true,
		// A client's own x-request-id is kept (Envoy would replace it on every external
		// request), so the client finds its request in usage records and logs; ext_proc refuses
		// one that is too long or not visible ASCII (400 invalid_request_id).
		PreserveExternalRequestId: true,
		LocalReplyConfig:          localReplies(),
		// The gateway is the edge: the connection's peer is the client, and x-forwarded-for is
		// believed only for the proxies the operator declared in front of it. Every client is
		// external (Envoy 1.33+ trusts no address by default), so Envoy strips x-envoy-* headers
		// clients send. Client address headers never reach providers (routeHeadersToRemove).
		UseRemoteAddress:  wrapperspb.Bool(true),
		XffNumTrustedHops: g.Listener.XFFTrustedHops,
		// Envoy's HTTP/2 codec cannot answer headers over its limit (it resets the stream), so
		// the codec's limits sit well above the gateway's and ext_proc answers 431
		// headers_too_large at the gateway's own limit; HTTP/1 requests over the codec's limit
		// get the same JSON 431 from localReplies.
		MaxRequestHeadersKb:       wrapperspb.UInt32(codecHeaderKB),
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(codecHeaderCount)},
		Http2ProtocolOptions:      &corev3.Http2ProtocolOptions{MaxHeaderFieldSizeKb: wrapperspb.UInt32(codecHeaderKB)},
	}
	hcmAny, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("translator: hcm: %w", err)
	}
	return &listenerv3.Listener{
		Name:                          ir.ListenerName,
		Address:                       socketAddress(g.Listener.Address, g.Listener.Port),
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(ir.BufferLimitBytes),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       wellknown.HTTPConnectionManager,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
			}},
		}},
	}, nil
}

// extProcFilterName names the router-level ext_proc filter in the chain and in per-route configs.
const extProcFilterName = "envoy.filters.http.ext_proc"

// attemptFilterName names the per-attempt ext_proc filter (UpstreamExtProc) on provider clusters.
const attemptFilterName = "tollway.filters.http.attempt_ext_proc"

// httpFilters is the one place the HTTP filter order is decided: ext_proc authenticates and
// picks the provider, then the router forwards; a split gateway (answers.go) has the answer
// filters between them.
func httpFilters(split bool) ([]*hcmv3.HttpFilter, error) {
	rt, err := router()
	if err != nil {
		return nil, err
	}
	chain := []namedFilter{{extProcFilterName, ExtProc()}}
	if split {
		chain = append([]namedFilter{{extProcFilterName, SplitExtProc()}}, answerFilters()...)
	}
	chain = append(chain, namedFilter{wellknown.Router, rt})
	var out []*hcmv3.HttpFilter
	for _, f := range chain {
		a, err := anypb.New(f.cfg)
		if err != nil {
			return nil, fmt.Errorf("translator: filter %s: %w", f.name, err)
		}
		out = append(out, &hcmv3.HttpFilter{Name: f.name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}})
	}
	return out, nil
}

// ExtProc is the router-level ext_proc filter in Tollway's own Envoys. Each direction is one
// round trip: Envoy sends a request's (or an answer's) body right behind its headers without
// waiting for the headers' reply (send_body_without_waiting_for_header_response, body mode
// STREAMED), and ext_proc answers both once it has read the body (extproc's pipeline). Envoy
// then ignores mode overrides, so the modes are fixed: on every route of the gateway's virtual
// host (PipelinedMode, set per route) everything is sent; on none (a reply Envoy makes before a
// route was looked up, such as an HTTP/1 request whose headers overflow the codec) answers pass
// untouched, as MeshExtProc's do before ext_proc accepted a request.
func ExtProc() *extprocv3.ExternalProcessor {
	p := MeshExtProc()
	// These routes and clusters are Tollway's: a request of one attempt on an OpenAI-shaped
	// provider is rewritten by this filter (extproc's direct), :authority included.
	p.GrpcService.InitialMetadata = []*corev3.HeaderValue{{Key: ir.PhaseMetadata, Value: ir.PhaseRouter}}
	p.MutationRules.AllowAllRouting = wrapperspb.Bool(true)
	p.ProcessingMode.RequestBodyMode = extprocv3.ProcessingMode_STREAMED
	p.AllowModeOverride = false
	p.SendBodyWithoutWaitingForHeaderResponse = true
	// ext_proc sets content-length on every body it replaces (as Envoy's BUFFERED mode checks),
	// so providers and clients keep getting sized bodies instead of chunked ones.
	p.AllowContentLengthHeader = true
	return p
}

// PipelinedMode is ExtProc's processing mode on the gateway's routes: headers, bodies and
// trailers in both directions (trailers mark the end of a body that has them). An answer's body
// is FULL_DUPLEX_STREAMED: ext_proc sends back the body the client gets, chunk by chunk, and may
// end it on its own. That is how a stream whose provider goes silent mid-answer ends with an
// error event: Envoy's per-try idle timeout can only reset a stream whose headers went out (the
// client would see a cut connection and nothing else), so ext_proc ends it first
// (extproc's silence watchdog).
func PipelinedMode() *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_STREAMED,
		RequestTrailerMode:  extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		ResponseBodyMode:    extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
	}
}

// BufferedBodyMode is PipelinedMode for a big request body (ir.PipelinedLength): Envoy buffers it
// and sends it whole once ext_proc answered the headers; answers stay pipelined.
func BufferedBodyMode() *extprocv3.ProcessingMode {
	m := PipelinedMode()
	m.RequestBodyMode = extprocv3.ProcessingMode_BUFFERED
	m.RequestTrailerMode = extprocv3.ProcessingMode_SKIP
	return m
}

// MeshExtProc is the router-level filter in an Envoy whose routes are not Tollway's (an Istio
// sidecar, configs/deploy/istio): keys, limits, validation and billing, and no rewrite.
func MeshExtProc() *extprocv3.ExternalProcessor {
	p := extProc()
	// Response headers are sent only for requests whose headers ext_proc accepted: its answer
	// turns them on (mode override). A reply Envoy makes before ext_proc saw the request (an
	// HTTP/1 request whose headers overflow the codec) would otherwise wait for ext_proc while
	// Envoy closes the connection, and the client would get nothing.
	p.ProcessingMode.ResponseHeaderMode = extprocv3.ProcessingMode_SKIP
	// x-envoy-max-retries bounds a request's retries to its chain's length.
	p.MutationRules = &mutationrulesv3.HeaderMutationRules{AllowEnvoy: wrapperspb.Bool(true)}
	return p
}

// extProc is what both ext_proc filters share: the server, fail-closed, headers and a buffered
// request body sent, response bodies only on request (mode override).
func extProc() *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName:             ir.ExtProcCluster,
				MaxReceiveMessageLength: wrapperspb.UInt32(2 * ir.BufferLimitBytes),
			}},
		},
		FailureModeAllow: false, // ext_proc down means closed, never an open door
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		AllowModeOverride: true,
		MessageTimeout:    durationpb.New(ExtProcMessageTimeout),
		// ext_proc may extend one message's timeout up to this (a media task's create).
		MaxMessageTimeout: durationpb.New(ir.MaxExtProcMessageTimeout),
		// What the access log reads of a request, set by ext_proc.
		MetadataOptions: &extprocv3.MetadataOptions{ReceivingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{ir.MetadataNamespace}}},
	}
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func exact(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}

// UpstreamExtProc runs on every attempt, after Envoy picked the endpoint: it learns the
// attempt's provider and model from the endpoint metadata, rewrites the body, path, host and
// credentials for that provider, and translates the answer back when the provider speaks
// another API. Routing headers (:path, :authority) may be rewritten here, and only here.
func UpstreamExtProc() *extprocv3.ExternalProcessor {
	p := extProc()
	p.GrpcService.InitialMetadata = []*corev3.HeaderValue{{Key: ir.PhaseMetadata, Value: ir.PhaseUpstream}}
	p.RequestAttributes = []string{"xds.upstream_host_metadata"}
	p.MetadataOptions = nil // attempts write no metadata
	p.MutationRules = &mutationrulesv3.HeaderMutationRules{AllowAllRouting: wrapperspb.Bool(true), AllowEnvoy: wrapperspb.Bool(true)}
	return p
}

func upstreamFilters() ([]*hcmv3.HttpFilter, error) {
	ext, err := anypb.New(UpstreamExtProc())
	if err != nil {
		return nil, err
	}
	codec, err := anypb.New(&upstreamcodecv3.UpstreamCodec{})
	if err != nil {
		return nil, err
	}
	return []*hcmv3.HttpFilter{
		// Its own name: the gateway's per-route ext_proc config (PipelinedMode) is not for it.
		{Name: attemptFilterName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: ext}},
		{Name: "envoy.filters.http.upstream_codec", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: codec}},
	}, nil
}
