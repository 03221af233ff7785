package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/extproc/provider"
	adapters "github.com/tollway/tollway/extproc/provider/chat"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/xds/ir"
)

// Attempt is one upstream try of a request, seen by the upstream ext_proc filter after Envoy
// chose the endpoint: the request is rewritten for that endpoint's provider and, when the
// provider speaks another API, its answer is translated back.
type Attempt struct {
	sh        *core.Shared
	rt        *core.Runtime
	requestID string
	provider  *ir.Provider
	model     *core.Model
	translate provider.ResponseTranslator
	status    int
	streaming bool
	// refusal reads an error answer that may refuse the gateway's credential without a 401.
	refusal adapters.CredentialRefusal
	removed []string // nested fields the adapter dropped (provider.Upstream.Removed)
	// embeddings: the attempt is an embeddings request's (POST /v1/embeddings), rewritten by
	// the embeddings adapters (EmbedRequest)
	embeddings bool
	// envoy brings the attributes sent with the request headers (the chosen endpoint's
	// metadata among them) and takes a timeout override for a big body.
	envoy *core.EnvoyStream
	trace trace.SpanContext // the attempt's stream's (zero: untraced)
}

// NewAttempt is the processor of one upstream attempt under rt, on Envoy stream env, traced
// under parent (zero: untraced).
func NewAttempt(sh *core.Shared, rt *core.Runtime, env *core.EnvoyStream, parent trace.SpanContext) *Attempt {
	return &Attempt{sh: sh, rt: rt, envoy: env, trace: parent}
}

// The attempt is the upstream attempt filter's processor.

func (a *Attempt) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	if isTaskRequest(h) {
		return passTask(), nil
	}
	if err := a.target(a.envoy.Attributes(), h); err != nil {
		// Fails the attempt closed (Envoy answers 500); never forwards unrewritten.
		a.sh.Log.Error("upstream attempt without a target", "error", err)
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	// Only the headers a provider may see go on (upstreamForwarded).
	var strip []string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch {
		case hv.Key == "x-request-id":
			a.requestID = core.HeaderValue(hv)
		case hv.Key == ":path":
			path, _, _ := strings.Cut(core.HeaderValue(hv), "?")
			a.embeddings = path == core.EmbeddingsPath
		case core.UpstreamDropped(hv.Key):
			strip = append(strip, hv.Key)
		}
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: strip},
		}},
	}}
	if a.provider.SpeaksOpenAI() {
		// An OpenAI-shaped answer needs nothing from this filter: the route tags it with
		// the endpoint's provider and model, the router-level filter rewrites it, and a
		// 401 reaches Tollway through the router's refusal log. Skipping the response
		// headers saves a round trip per request.
		resp.ModeOverride = &extprocv3filter.ProcessingMode{
			RequestHeaderMode:   extprocv3filter.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3filter.ProcessingMode_BUFFERED,
			RequestTrailerMode:  extprocv3filter.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3filter.ProcessingMode_SKIP,
			ResponseBodyMode:    extprocv3filter.ProcessingMode_NONE,
			ResponseTrailerMode: extprocv3filter.ProcessingMode_SKIP,
		}
	}
	return resp, nil
}

func (a *Attempt) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	if len(b.GetBody()) > bigChatBody {
		// Rewriting tens of megabytes may outlast the message timeout (as at the router).
		if err := a.envoy.ExtendTimeout(bigChatTimeout); err != nil {
			return nil, err
		}
	}
	span := a.translation()
	resp, err := a.requestBody(b)
	span.End()
	if errors.Is(err, provider.ErrBadRequest) {
		// The client's request cannot be said in this provider's API: its fault, a 400.
		e := core.Errorf(http.StatusBadRequest, "invalid_request", "%v", err)
		return core.Immediate(a.requestID, e.Status, e.Body(a.requestID), ir.ErrorCodeDetailsPrefix+e.Code), nil
	}
	if err != nil {
		a.sh.Log.Error("upstream attempt rewrite failed", "provider", a.provider.Name, "error", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return resp, nil
}

func (a *Attempt) ResponseHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return a.responseHeaders(h), nil
}

func (a *Attempt) ResponseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return a.responseBody(b), nil
}

// translation opens the translation span of an attempt whose provider speaks another API
// than the client's (the zero Span otherwise).
func (a *Attempt) translation() spans.Span {
	if a.provider == nil || a.provider.SpeaksOpenAI() {
		return spans.Span{}
	}
	s := a.sh.Spans.Start(a.trace, spans.Translation)
	if s.Recording() {
		s.Set(spans.Provider(a.provider.Name)...)
		op := spans.OpChat
		if a.embeddings {
			op = spans.OpEmbeddings
		}
		s.Set(spans.OperationKey.String(op), spans.RequestModelKey.String(a.model.ID), spans.RequestIDKey.String(a.requestID))
	}
	return s
}

// Done: an attempt holds nothing to release.
func (a *Attempt) Done() {}

// target finds the attempt's provider and catalog model: from the chosen endpoint's metadata,
// or, for a cluster pinned to one provider, the model from the router-level ext_proc's header.
func (a *Attempt) target(attrs map[string]*structpb.Struct, h *extprocv3.HttpHeaders) error {
	var md map[string]string
	for _, st := range attrs {
		if md = findTollway(structpb.NewStructValue(st), a.rt.Endpoints); md != nil {
			break
		}
	}
	if md == nil {
		// Names only: the values are whole protobuf dumps of Envoy's metadata.
		return fmt.Errorf("the endpoint has no tollway metadata (xds.upstream_host_metadata); attributes sent: %v", slices.Sorted(maps.Keys(attrs)))
	}
	modelID := md["model"]
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ir.ModelHeader && modelID == "" {
			modelID = core.HeaderValue(hv)
		}
	}
	a.provider = a.rt.Providers[md["provider"]]
	a.model = a.rt.Models[modelID]
	if a.provider == nil || a.model == nil {
		return fmt.Errorf("unknown provider %q or model %q", md["provider"], modelID)
	}
	return nil
}

// findTollway looks for the endpoint metadata namespace in an attribute value. Envoy 1.40 sends
// xds.upstream_host_metadata as the Metadata message in protobuf text format; a structured
// rendering is accepted too. Parsed text is remembered in memo (nil: not remembered): an
// endpoint's metadata is the same text on every request, and parsing it was about 7% of
// the process's CPU.
func findTollway(v *structpb.Value, memo *core.MetadataMemo) map[string]string {
	if txt := v.GetStringValue(); txt != "" {
		if md, ok := memo.Get(txt); ok {
			return md
		}
		var md corev3.Metadata
		if prototext.Unmarshal([]byte(txt), &md) != nil {
			return nil
		}
		st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for ns, f := range md.GetFilterMetadata() {
			st.Fields[ns] = structpb.NewStructValue(f)
		}
		found := findTollway(structpb.NewStructValue(st), nil)
		memo.Put(txt, found)
		return found
	}
	st := v.GetStructValue()
	if st == nil {
		return nil
	}
	if ns := st.GetFields()[ir.MetadataNamespace].GetStructValue(); ns != nil {
		out := map[string]string{}
		for k, f := range ns.GetFields() {
			out[k] = f.GetStringValue()
		}
		return out
	}
	for _, f := range st.GetFields() {
		if md := findTollway(f, memo); md != nil {
			return md
		}
	}
	return nil
}

func (a *Attempt) requestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	var up *provider.Upstream
	var err error
	if a.embeddings {
		up, err = EmbedRequest(b.GetBody(), a.model, a.provider)
	} else {
		up, _, err = AttemptRequest(a.rt, b.GetBody(), a.model, a.provider)
	}
	if err != nil {
		return nil, err
	}
	a.translate, a.removed = up.Response, up.Removed
	set, remove := UpstreamHeaders(a.provider, up)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: up.Body}},
		}},
	}}, nil
}

// AttemptRequest builds the upstream request of one attempt: the client's body for catalog model m on
// provider p, without the gateway's own fields and the parameters m does not support, with the
// model's output cap and stream usage requested, in p's API.
func AttemptRequest(rt *core.Runtime, body []byte, m *core.Model, p *ir.Provider) (*provider.Upstream, []string, error) {
	req, err := provider.SplitValidated(body) // the router-level filter validated it
	if err != nil {
		return nil, nil, err
	}
	var target string
	for _, t := range m.Targets {
		if t.Provider == p.Name {
			target = t.Model
		}
	}
	if target == "" {
		return nil, nil, errors.New("provider " + p.Name + " does not serve model " + m.ID)
	}
	for _, f := range core.GatewayFields {
		delete(req, f)
	}
	asked, _ := maxTokensOf(req) // read before removal: the hold was sized from it
	removed := m.Unsupported(p.Name, slices.Collect(maps.Keys(req)))
	for _, f := range removed {
		delete(req, f)
	}
	capOutput(req, m, asked, func(f string) bool { return m.Carries(p.Name, f) })
	removed = slices.DeleteFunc(removed, func(f string) bool { _, kept := req[f]; return kept })
	var stream *bool
	if raw, ok := req["stream"]; ok && json.Unmarshal(raw, &stream) == nil && stream != nil && *stream {
		// Streams are billed from the provider's final usage chunk, so always ask for it; the
		// router-level ext_proc removes it again for clients that did not ask.
		if _, e := requestUsage(req); e != nil {
			return nil, nil, errors.New(e.Message)
		}
	}
	adapter, ok := m.Adapters[p.Name] // chosen when the runtime was compiled
	if !ok {
		if adapter, err = adapters.For(p.Type, m.Family); err != nil { // its type has none
			return nil, nil, err
		}
	}
	up, err := adapter.Chat(p, &m.Model, target, req)
	return up, removed, err
}

// capOutput writes the answer's bound into the attempt: the client's cap (asked; 0 for none),
// lowered to the model's max_output_length, under a cap field the provider carries (the
// client's own field when carried, else the other: o-series models take only
// max_completion_tokens, many servers only max_tokens). The hold was sized from this bound, so
// the provider must see it; only when it carries neither field is the hold sized without the
// client's cap (see capCarried).
func capOutput(req provider.Request, m *core.Model, asked int64, carried func(string) bool) {
	bound := asked
	if m.MaxOutputLength > 0 && (bound <= 0 || bound > m.MaxOutputLength) {
		bound = m.MaxOutputLength
	}
	if bound <= 0 {
		return // nothing to bound: no client cap, no model cap
	}
	fields := []string{"max_tokens", "max_completion_tokens"}
	if _, ok := req["max_completion_tokens"]; ok {
		fields[0], fields[1] = fields[1], fields[0]
	}
	for _, f := range fields {
		if carried(f) {
			delete(req, "max_tokens")
			delete(req, "max_completion_tokens")
			req[f] = json.RawMessage(strconv.FormatInt(bound, 10))
			return
		}
	}
}

// maxTokensOf reads the client's output cap; max_completion_tokens wins over the older max_tokens.
func maxTokensOf(req provider.Request) (int64, *core.APIError) {
	var out int64
	for _, f := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := req[f]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 {
			return 0, core.Errorf(http.StatusBadRequest, "invalid_request", "%s must be a positive integer", f)
		}
		out = n
	}
	return out, nil
}

// requestUsage sets stream_options.include_usage on a streamed request and reports whether the
// client had set it. Other stream_options are kept.
func requestUsage(req provider.Request) (bool, *core.APIError) {
	opts := map[string]json.RawMessage{}
	if raw, ok := req["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			return false, core.Errorf(http.StatusBadRequest, "invalid_request", `stream_options must be an object like {"include_usage": true}`)
		}
	}
	asked := string(opts["include_usage"]) == "true"
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	req["stream_options"] = raw
	return asked, nil
}

// UpstreamHeaders is the header side of an attempt's rewrite up for provider p, wherever it is
// made (this filter, or the router-level one for a direct request): the provider's path and
// authority, the rewritten body's length, and the adapter's headers ("" removes one).
func UpstreamHeaders(p *ir.Provider, up *provider.Upstream) (set []*corev3.HeaderValueOption, remove []string) {
	set = []*corev3.HeaderValueOption{
		core.SetHeader(":path", p.BasePath+up.Path),
		core.SetHeader(":authority", p.Authority()),
		core.SetHeader("content-length", strconv.Itoa(len(up.Body))),
	}
	for _, k := range core.SortedKeys(up.Headers) {
		if v := up.Headers[k]; v != "" {
			set = append(set, core.SetHeader(k, v))
		} else {
			remove = append(remove, k)
		}
	}
	return set, remove
}

func (a *Attempt) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ":status" {
			a.status, _ = strconv.Atoi(core.HeaderValue(hv))
		}
	}
	// Every attempt on a provider in another API passes here (a plain 401 also reaches the
	// refusal log; recording it twice only counts it twice).
	switch {
	case a.status == http.StatusUnauthorized:
		a.sh.Refused(a.provider.Name)
	case a.status < 400:
		a.sh.Accepted(a.provider.Name)
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{},
	}}
	if len(a.removed) > 0 {
		// The router-level ext_proc lists them in x-tollway-removed-params.
		resp.GetResponseHeaders().Response = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{core.SetHeader(ir.AttemptRemovedHeader, strings.Join(a.removed, ","))},
		}}
	}
	// Answers in another API are translated; errors pass as they are (the router-level ext_proc
	// shapes them, and Envoy decides on retries from the status), except that an error that
	// may be a refused credential in disguise is read first.
	if r, ok := a.translate.(adapters.CredentialRefusal); ok && a.status >= 400 && a.status != http.StatusUnauthorized {
		a.refusal = r
		resp.ModeOverride = &extprocv3filter.ProcessingMode{ResponseBodyMode: extprocv3filter.ProcessingMode_BUFFERED}
		return resp
	}
	if a.translate != nil && a.status < 400 {
		a.streaming = IsEventStream(h)
		mode := extprocv3filter.ProcessingMode_BUFFERED
		if a.streaming {
			mode = extprocv3filter.ProcessingMode_STREAMED
		}
		resp.ModeOverride = &extprocv3filter.ProcessingMode{ResponseBodyMode: mode}
	}
	return resp
}

func (a *Attempt) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{}
	if a.refusal != nil {
		// The status goes to 401 before Envoy sees it: the next provider is tried, and the
		// client is told the gateway's credential failed, not that its request was bad.
		if a.refusal.RefusesCredential(a.status, b.GetBody()) {
			a.sh.Refused(a.provider.Name)
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{core.SetHeader(":status", "401")}}
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: common},
		}}
	}
	var out []byte
	var err error
	if a.streaming {
		out, err = a.translate.Chunk(b.GetBody(), b.GetEndOfStream())
	} else {
		out, err = a.translate.Body(b.GetBody())
	}
	if err != nil {
		// The provider answered 2xx with something that is no answer (a blocked prompt, a
		// broken body): the client gets an error, never a half-translated reply.
		e := core.Errorf(http.StatusBadGateway, "upstream_error", "provider %s: %v", a.provider.Name, err)
		var blocked *provider.BlockedError
		var failed *provider.UpstreamFailure
		switch {
		case errors.As(err, &blocked):
			e = core.Errorf(http.StatusBadRequest, "content_filter", "%v", err)
		case errors.As(err, &failed):
			e = core.Errorf(http.StatusBadGateway, failed.Code, "provider %s failed: %s", a.provider.Name, failed.Message)
		}
		if !a.streaming {
			out = e.Body(a.requestID)
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				core.SetHeader(":status", strconv.Itoa(e.Status)),
				core.SetHeader("content-type", "application/json"),
			}}
		} else {
			// The chunks translated before the fault go first: what the client sees must not
			// depend on where Envoy cut the body. The translator stays silent afterwards.
			out = append(append(append(out, "data: "...), e.Body(a.requestID)...), "\n\n"...)
		}
	}
	if !a.streaming {
		if common.HeaderMutation == nil {
			common.HeaderMutation = &extprocv3.HeaderMutation{}
		}
		common.HeaderMutation.SetHeaders = append(common.HeaderMutation.SetHeaders,
			core.SetHeader("content-length", strconv.Itoa(len(out))), core.SetHeader("content-type", "application/json"))
	}
	if len(out) == 0 {
		common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
	} else {
		common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: common},
	}}
}

// isTaskRequest reports whether an attempt is one of the gateway's own task requests, sent
// through the internal listener already in the provider's API (extproc/tasks).
func isTaskRequest(h *extprocv3.HttpHeaders) bool {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ir.TaskHeader {
			return true
		}
	}
	return false
}

// passTask lets a task request through untouched (its marker removed): nothing to rewrite,
// nothing to translate.
func passTask() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{ir.TaskHeader}},
		}}},
		ModeOverride: &extprocv3filter.ProcessingMode{
			RequestHeaderMode: extprocv3filter.ProcessingMode_SEND, RequestBodyMode: extprocv3filter.ProcessingMode_NONE,
			RequestTrailerMode: extprocv3filter.ProcessingMode_SKIP, ResponseHeaderMode: extprocv3filter.ProcessingMode_SKIP,
			ResponseBodyMode: extprocv3filter.ProcessingMode_NONE, ResponseTrailerMode: extprocv3filter.ProcessingMode_SKIP,
		},
	}
}
