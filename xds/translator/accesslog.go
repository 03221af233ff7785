package translator

// The access log: one JSON line per request, written by Envoy when the request ends. What only
// ext_proc knows (the account, the key's prefix, the model that answered, tokens, cost, the
// fallbacks) it sets as dynamic metadata in the tollway namespace, which the line reads; Envoy
// adds the status and its own timings. Never the key, a prompt or a provider's secret: ext_proc
// sets none of them, and only these fields are logged.

import (
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollway/tollway/xds/ir"
)

// accessLogs is the public listener's access log (none when it is off). On a split gateway a
// fast-lane stream's line is written by Tollway instead, from its answer log entry, with the
// bill that only then is known (extproc's answers.go).
func accessLogs(a ir.AccessLog, split bool) ([]*accesslogv3.AccessLog, error) {
	if a.Off {
		return nil, nil
	}
	fields := map[string]any{
		"time":        "%START_TIME(%Y-%m-%dT%H:%M:%E3SZ)%",
		"request_id":  "%REQ(X-REQUEST-ID)%",
		"method":      "%REQ(:METHOD)%",
		"path":        "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
		"status":      "%RESPONSE_CODE%",
		"ttfb_ms":     "%RESPONSE_DURATION%",
		"duration_ms": "%DURATION%",
		"attempts":    "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
	}
	for _, f := range ir.AccessLogFields {
		fields[f] = "%DYNAMIC_METADATA(" + ir.MetadataNamespace + ":" + f + ")%"
	}
	format, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, err
	}
	logFormat := &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: format}}
	var cfg proto.Message
	name := "envoy.access_loggers.stdout"
	switch a.Path {
	case "":
		cfg = &streamv3.StdoutAccessLog{AccessLogFormat: &streamv3.StdoutAccessLog_LogFormat{LogFormat: logFormat}}
	case "/dev/stderr":
		name = "envoy.access_loggers.stderr"
		cfg = &streamv3.StderrAccessLog{AccessLogFormat: &streamv3.StderrAccessLog_LogFormat{LogFormat: logFormat}}
	default:
		name = "envoy.access_loggers.file"
		cfg = &filev3.FileAccessLog{Path: a.Path, AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: logFormat}}
	}
	typed, err := anypb.New(cfg)
	if err != nil {
		return nil, err
	}
	al := &accesslogv3.AccessLog{Name: name, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: typed}}
	if split {
		// Every request's last entry (not the periodic ones the answer log asks for) but a
		// fast-lane stream's, and but an exchange's with no bill: an answer cut after the
		// provider answered is billed once Envoy is past sending ext_proc anything, so Tollway
		// writes its line, from its answer log entry (with billing on: off, no line has a bill).
		al.Filter = allOf(notPeriodic(), fastLane(false))
		if a.Bills {
			al.Filter = allOf(notPeriodic(), fastLane(false), anyOf(hasKey(ir.ExchangeKey, false), hasKey(ir.CostKey, true)))
		}
	}
	return []*accesslogv3.AccessLog{al}, nil
}

// accessLogOptions has a split gateway's access logs flushed every ir.MeterReportEvery while a
// request is open: the answer log takes the fast-lane streams' periodic entries (their
// progress), every other log drops them.
func accessLogOptions(split bool) *hcmv3.HttpConnectionManager_HcmAccessLogOptions {
	if !split {
		return nil
	}
	return &hcmv3.HttpConnectionManager_HcmAccessLogOptions{AccessLogFlushInterval: durationpb.New(ir.MeterReportEvery)}
}

// notPeriodic passes every entry but the periodic ones of a request still open.
func notPeriodic() *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_LogTypeFilter{LogTypeFilter: &accesslogv3.LogTypeFilter{
		Types: []accesslogdatav3.AccessLogType{accesslogdatav3.AccessLogType_DownstreamPeriodic}, Exclude: true,
	}}}
}

// fastLane passes a fast-lane stream's entries (is), or every other request's (!is). Envoy's
// access log metadata filter ignores the matcher's invert, so "not fast" is "fast is false, or
// absent" (the lane's metadata says fast: true only).
func fastLane(is bool) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_MetadataFilter{MetadataFilter: &accesslogv3.MetadataFilter{
		Matcher: &matcherv3.MetadataMatcher{
			Filter: ir.LaneMetadata,
			Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: "fast"}}},
			Value:  &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_BoolMatch{BoolMatch: is}},
		},
		MatchIfKeyNotFound: wrapperspb.Bool(!is),
	}}}
}

// hasKey passes an entry whose tollway metadata has key (is), or has it not (!is). The
// filter ignores the matcher's invert, so "has not" is "is null, or absent".
func hasKey(key string, is bool) *accesslogv3.AccessLogFilter {
	v := &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}}
	if !is {
		v = &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_NullMatch_{NullMatch: &matcherv3.ValueMatcher_NullMatch{}}}
	}
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_MetadataFilter{MetadataFilter: &accesslogv3.MetadataFilter{
		Matcher: &matcherv3.MetadataMatcher{
			Filter: ir.MetadataNamespace,
			Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: key}}},
			Value:  v,
		},
		MatchIfKeyNotFound: wrapperspb.Bool(!is),
	}}}
}

// allOf passes an entry every filter passes; anyOf one some filter passes.
func allOf(f ...*accesslogv3.AccessLogFilter) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{AndFilter: &accesslogv3.AndFilter{Filters: f}}}
}

func anyOf(f ...*accesslogv3.AccessLogFilter) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_OrFilter{OrFilter: &accesslogv3.OrFilter{Filters: f}}}
}
