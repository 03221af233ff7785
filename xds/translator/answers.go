package translator

// The split answer (ir.Gateway.FastLane). Envoy fixes an ext_proc filter's processing modes at
// the request's headers, before ext_proc has read the body that says whether the answer will be
// an OpenAI-shaped stream, and Tollway's router-level filter is pipelined, so it takes no mode
// override: whatever it is configured to read of an answer, it reads for every request. So the
// router-level filter here reads requests only (and answer headers, for a refusal it deferred),
// and the answer goes to a filter chosen by the route ext_proc picks with the body read. A
// filter after it in the chain resolves its per-route config with that route:
//
//   - the chunk lane (route "chat"): AnswerExtProc, the router-level filter's answer half as it
//     was: headers, every chunk (FULL_DUPLEX_STREAMED), trailers.
//   - the fast lane (route "chat-fast", ext_proc's x-tollway-lane: fast): FastExtProc reads the
//     answer's headers only (an error answer's body on request, mode override), the stream meter
//     (StreamMeter, Lua in Envoy) rewrites and meters the chunks, and the bill is settled from
//     the answer log: one entry per request at its end, on Tollway's access log service.
//
// Both answer filters find the request's exchange by the exchange id the router-level filter
// set in its dynamic metadata (forwarded to them, and logged).

import (
	"fmt"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headertometadatav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// Filter names of the split answer (each has per-route configs).
const (
	answerFilterName = "tollway.filters.http.answer"
	fastFilterName   = "tollway.filters.http.answer_fast"
)

// answerFlush is how soon the answer log's entries reach ext_proc: a fast-lane stream's bill
// is settled from its entry.
const answerFlush = 20 * time.Millisecond

// SplitExtProc is the router-level filter of a split gateway: ExtProc, telling ext_proc that
// answers go to the answer filters (ir.SplitMetadata).
func SplitExtProc() *extprocv3.ExternalProcessor {
	p := ExtProc()
	p.GrpcService.InitialMetadata = append(p.GrpcService.InitialMetadata, &corev3.HeaderValue{Key: ir.SplitMetadata, Value: "1"})
	return p
}

// SplitRequestMode is PipelinedMode for a split gateway's router-level filter: the request
// only. (A refusal it defers to the answer's headers, Envoy's unrouted reply, is answered by the
// chunk lane's filter, which the unrouted routes turn on.)
func SplitRequestMode(m *extprocv3.ProcessingMode) *extprocv3.ProcessingMode {
	m = proto.Clone(m).(*extprocv3.ProcessingMode)
	m.ResponseBodyMode = extprocv3.ProcessingMode_NONE
	m.ResponseTrailerMode = extprocv3.ProcessingMode_SKIP
	// Not even the answer's headers: the answer filter has them. (Read here too, while a
	// later filter streams the body in full duplex, Envoy 1.40 cut the body the client got.)
	m.ResponseHeaderMode = extprocv3.ProcessingMode_SKIP
	return m
}

// answerExtProc is what both answer filters share: the request's exchange id forwarded to
// ext_proc with the answer's headers, and the access log's namespace received back.
func answerExtProc() *extprocv3.ExternalProcessor {
	p := ExtProc()
	p.GrpcService.InitialMetadata = []*corev3.HeaderValue{{Key: ir.PhaseMetadata, Value: ir.PhaseAnswer}}
	// Off unless a route turns it on: a reply Envoy makes before any route was looked up (an
	// HTTP/1 request whose headers overflow the codec) must not wait for ext_proc.
	p.ProcessingMode = &extprocv3.ProcessingMode{
		RequestHeaderMode: extprocv3.ProcessingMode_SKIP, ResponseHeaderMode: extprocv3.ProcessingMode_SKIP,
		RequestTrailerMode: extprocv3.ProcessingMode_SKIP, ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
	p.MetadataOptions = &extprocv3.MetadataOptions{
		ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{ir.MetadataNamespace}},
		ReceivingNamespaces:  &extprocv3.MetadataOptions_MetadataNamespaces{Untyped: []string{ir.MetadataNamespace, ir.LaneMetadata}},
	}
	return p
}

// AnswerExtProc is the chunk lane's answer filter: the router-level filter's answer half,
// pipelined as it was (every chunk read and answered in full duplex).
func AnswerExtProc() *extprocv3.ExternalProcessor { return answerExtProc() }

// AnswerMode is the chunk lane's processing mode: PipelinedMode's answer half, no request.
func AnswerMode() *extprocv3.ProcessingMode {
	m := PipelinedMode()
	m.RequestHeaderMode = extprocv3.ProcessingMode_SKIP
	m.RequestBodyMode = extprocv3.ProcessingMode_NONE
	m.RequestTrailerMode = extprocv3.ProcessingMode_SKIP
	return m
}

// FastExtProc is the fast lane's answer filter: the answer's headers (and an error answer's
// body, which ext_proc asks for with a mode override: this filter is not pipelined).
func FastExtProc() *extprocv3.ExternalProcessor {
	p := answerExtProc()
	p.SendBodyWithoutWaitingForHeaderResponse = false
	p.AllowModeOverride = true
	return p
}

// FastMode is the fast lane's processing mode: the answer's headers only.
func FastMode() *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SKIP,
		RequestBodyMode:     extprocv3.ProcessingMode_NONE,
		RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
		ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
}

// answerFilters are the split gateway's filters between the router-level ext_proc and the
// router, in order. The stream meter comes before the fast lane's filter so that, on the way
// back, it reads what that filter set at the answer's headers (the catalog model, the request
// id).
func answerFilters() []namedFilter {
	return []namedFilter{
		{StreamMeterFilterName, streamMeterFilter()},
		{answerFilterName, AnswerExtProc()},
		{fastFilterName, FastExtProc()},
		{answerHeadersFilterName, AnswerHeaders()},
	}
}

// answerHeadersFilterName copies the provider's answer headers into dynamic metadata
// (ir.AnswerHeadersMetadata), last before the router so it runs first on the way back.
const answerHeadersFilterName = "tollway.filters.http.answer_headers"

// AnswerHeaders is that filter. An answer filter's ext_proc stream opens at the answer's
// headers; a provider that drops its connection right behind them has Envoy reset that stream
// before ext_proc reads them, and the exchange then ends by its answer log entry alone, which
// must still say that the provider answered (and who), or the request goes unbilled.
func AnswerHeaders() *headertometadatav3.Config {
	rule := func(header, key string) *headertometadatav3.Config_Rule {
		return &headertometadatav3.Config_Rule{Header: header, OnHeaderPresent: &headertometadatav3.Config_KeyValuePair{
			MetadataNamespace: ir.AnswerHeadersMetadata, Key: key, Type: headertometadatav3.Config_STRING,
		}}
	}
	return &headertometadatav3.Config{ResponseRules: []*headertometadatav3.Config_Rule{
		rule(":status", ir.AnswerStatusKey), rule(ir.ServedHeader, ir.AnswerServedKey), rule(ir.AttemptsHeader, ir.AnswerAttemptsKey),
	}}
}

// streamMeterFilter is the stream meter with its script named, for the fast lane's routes to
// turn on (the virtual host turns it off).
func streamMeterFilter() *luav3.Lua {
	l := StreamMeter()
	l.SourceCodes = map[string]*corev3.DataSource{streamMeterSource: l.GetDefaultSourceCode()}
	return l
}

// streamMeterSource names the stream meter's script in its filter.
const streamMeterSource = "stream_meter"

// namedFilter is an HTTP filter's name and config.
type namedFilter struct {
	name string
	cfg  proto.Message
}

// laneConfigs are the per-filter configs of the virtual host (every answer filter off: a request
// ext_proc answers itself never reaches them) and of each lane's routes (chunk: also the
// unrouted routes, whose reply carries a refusal ext_proc deferred).
func laneConfigs() (host, chunk, fast map[string]*anypb.Any, err error) {
	off, err := anypb.New(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Disabled{Disabled: true}})
	if err != nil {
		return nil, nil, nil, err
	}
	luaOff, err := anypb.New(&luav3.LuaPerRoute{Override: &luav3.LuaPerRoute_Disabled{Disabled: true}})
	if err != nil {
		return nil, nil, nil, err
	}
	chunkOn, err := perRouteMode(AnswerMode())
	if err != nil {
		return nil, nil, nil, err
	}
	fastOn, err := perRouteMode(FastMode())
	if err != nil {
		return nil, nil, nil, err
	}
	luaOn, err := anypb.New(&luav3.LuaPerRoute{Override: &luav3.LuaPerRoute_Name{Name: streamMeterSource}})
	if err != nil {
		return nil, nil, nil, err
	}
	host = map[string]*anypb.Any{answerFilterName: off, fastFilterName: off, StreamMeterFilterName: luaOff}
	chunk = map[string]*anypb.Any{answerFilterName: chunkOn, fastFilterName: off, StreamMeterFilterName: luaOff}
	fast = map[string]*anypb.Any{answerFilterName: off, fastFilterName: fastOn, StreamMeterFilterName: luaOn}
	return host, chunk, fast, nil
}

// answerLog is the split gateway's answer log: every request whose exchange the router-level
// filter handed to an answer filter ends with one entry on Tollway's access log service, which
// settles a fast-lane stream's bill from the stream meter's metadata and ends any exchange
// whose answer never reached an answer filter (a client gone first).
func answerLog() (*accesslogv3.AccessLog, error) {
	als, err := anypb.New(&grpcalsv3.HttpGrpcAccessLogConfig{CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
		LogName: ir.AnswerLogName,
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ir.ExtProcCluster},
		}},
		TransportApiVersion: corev3.ApiVersion_V3,
		BufferFlushInterval: durationpb.New(answerFlush),
		BufferSizeBytes:     wrapperspb.UInt32(1), // each entry at once: a stream's bill waits for none
	}})
	if err != nil {
		return nil, fmt.Errorf("translator: answer log: %w", err)
	}
	return &accesslogv3.AccessLog{
		Name: "envoy.access_loggers.http_grpc",
		// A parked exchange's last entry, and a fast-lane stream's periodic ones (its progress).
		Filter: allOf(
			&accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_MetadataFilter{MetadataFilter: &accesslogv3.MetadataFilter{
				Matcher: &matcherv3.MetadataMatcher{
					Filter: ir.MetadataNamespace,
					Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: ir.ExchangeKey}}},
					Value:  &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}},
				},
				MatchIfKeyNotFound: wrapperspb.Bool(false),
			}}},
			anyOf(notPeriodic(), fastLane(true)),
		),
		ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: als},
	}, nil
}
