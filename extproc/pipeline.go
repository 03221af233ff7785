package extproc

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tollway/tollway/extproc/core"

	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/xds/ir"
)

// This file owns how Envoy's messages reach a processor (framing): the buffered protocol, one
// reply per message (oneByOne, at the end), and the pipelined protocol of Tollway's own Envoys
// (xds/translator ExtProc): Envoy sends a body right behind its headers, chunk by chunk,
// without waiting for the headers' reply, and takes no mode override. A pipeline turns that into the exchange's own protocol
// (headers, then a whole buffered body, with mode overrides saying which bodies it reads): it
// holds the headers' reply until the body is read, then sends it with one reply per chunk. Each
// direction is one round trip instead of two, and the exchange stays the same for the Istio
// filter (MeshExtProc), which speaks the buffered protocol.

// flowState is what a pipeline does with one direction's body.
type flowState int

const (
	passing    flowState = iota // not read: each chunk goes on untouched
	collecting                  // read whole: the headers' reply waits for the last chunk
	streaming                   // read as it comes (an SSE answer): each chunk is handled at once
	// buffered: a big request body (ir.Pipelined) that Envoy buffers and sends whole once the
	// headers are answered: the buffered protocol, one reply per message.
	buffered
)

// flow is one direction (request or response) of a pipeline.
type flow struct {
	state  flowState
	held   *extprocv3.ProcessingResponse // the headers' reply, sent with the body's
	body   []byte                        // the chunks so far, while collecting
	chunks int                           // chunks Envoy sent, each owed a reply
	limit  int                           // the most body a collecting flow takes
	// declared is the body's content-length, -1 if none: a body that has it all needs no
	// longer message timeout for the rest.
	declared int64
	// envoyBuffers: Envoy buffers this body and sends it whole after the headers' reply.
	envoyBuffers bool
	// duplex: the body is FULL_DUPLEX_STREAMED (an answer on Tollway's routes): every reply
	// carries the body the client gets (streamedBody), not a change to Envoy's copy.
	duplex bool
}

// pipeline runs one exchange over the pipelined protocol.
type pipeline struct {
	x *exchange
	// mode is the exchange's processing mode as Envoy would hold it: the filter's own until an
	// answer overrides it (readBody, deferRefusal, responseHeaders).
	mode          *extprocv3filter.ProcessingMode
	request, resp flow
}

func newPipeline(x *exchange) *pipeline {
	m := core.WithResponseBody(extprocv3filter.ProcessingMode_NONE)
	m.ResponseHeaderMode = extprocv3filter.ProcessingMode_SKIP // until a request is accepted
	return &pipeline{
		x:       x,
		mode:    m,
		request: flow{limit: ir.MaxBodyBytes, declared: -1},
		resp:    flow{limit: ir.BufferLimitBytes, declared: -1},
	}
}

// errAnswerTooLarge refuses an answer the gateway would have to hold whole (an error body or a
// JSON answer) that is over Envoy's buffer limit, as Envoy's buffered mode would.
var errAnswerTooLarge = core.Errorf(http.StatusBadGateway, "upstream_error",
	"the provider's answer is over the gateway's %d MiB buffer, so it cannot be passed on; ask for a shorter answer", ir.BufferLimitBytes>>20)

// errEmbeddingsTooLarge is errAnswerTooLarge for embeddings, whose answers grow with the inputs
// and their encoding rather than with max_tokens.
var errEmbeddingsTooLarge = core.Errorf(http.StatusBadGateway, "upstream_error",
	"the provider's answer is over the gateway's %d MiB buffer, so it cannot be passed on; send fewer inputs per request, or ask for encoding_format base64, several times smaller than floats", ir.BufferLimitBytes>>20)

// answerTooLarge is the refusal of an answer over the buffer, worded for the request's endpoint.
func (x *exchange) answerTooLarge() *core.APIError {
	if x.Head.Path == core.EmbeddingsPath {
		return errEmbeddingsTooLarge
	}
	return errAnswerTooLarge
}

// The pipeline's framing (stream.go) answers each of Envoy's messages with the replies it is
// owed now: none while a body is being collected, the held headers' reply and one per chunk
// once it is whole.

func (p *pipeline) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	x := p.x
	cl := headerNamed(h, "content-length")
	p.request.declared = declaredLength(cl)
	// The route Envoy matched for a big body (or none declared) buffers it: the headers'
	// reply is what lets the body come (translator's -buffered routes).
	p.request.envoyBuffers = !ir.Pipelined(cl)
	resp := x.requestHeaders(h)
	x.logMetadata(resp, req)
	return p.headers(&p.request, resp, h.GetEndOfStream(), func(m *extprocv3filter.ProcessingMode) extprocv3filter.ProcessingMode_BodySendMode {
		return m.RequestBodyMode
	}), nil
}

func (p *pipeline) requestBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	x := p.x
	if p.request.state == buffered || (p.request.state == passing && x.deferred != nil) {
		return p.logged(x.requestBody(b), req), nil // refused at its first chunk
	}
	return p.body(&p.request, b, requestBodyReply, x.requestBody, core.ErrTooLarge), nil
}

func (p *pipeline) requestTrailers(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	out := p.end(&p.request, requestBodyReply, p.x.requestBody, false)
	return append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{},
	}}), nil
}

func (p *pipeline) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	x := p.x
	p.resp.duplex = true
	if p.mode.ResponseHeaderMode == extprocv3filter.ProcessingMode_SKIP {
		// An answer the buffered protocol would not have shown ext_proc (a request it
		// never accepted): it goes on untouched.
		p.resp.state = passing
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{},
		}}}, nil
	}
	p.resp.declared = declaredLength(headerNamed(h, "content-length"))
	resp := x.responseHeaders(h)
	x.logMetadata(resp, req)
	out := p.headers(&p.resp, resp, h.GetEndOfStream(), func(m *extprocv3filter.ProcessingMode) extprocv3filter.ProcessingMode_BodySendMode {
		return m.ResponseBodyMode
	})
	if p.resp.state == streaming && x.Rewriting {
		// Chunks may be rewritten: the provider's length, if it sent one, no longer holds.
		common := out[0].GetResponseHeaders().GetResponse()
		if common.HeaderMutation == nil {
			common.HeaderMutation = &extprocv3.HeaderMutation{}
		}
		common.HeaderMutation.RemoveHeaders = append(common.HeaderMutation.RemoveHeaders, "content-length")
		x.watchSilence()
	}
	return out, nil
}

func (p *pipeline) responseBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	x := p.x
	switch {
	case x.silenced:
		return nil, nil // the watchdog ended the answer: what Envoy still sends goes nowhere
	case p.resp.state == streaming:
		x.heard(b.GetEndOfStream())
		return p.logged(streamedReply(x.responseBody(b), b), req), nil
	case p.resp.state == collecting:
		return p.body(&p.resp, b, responseBodyReply, x.responseBody, x.answerTooLarge()), nil
	}
	return []*extprocv3.ProcessingResponse{streamedBody(b.GetBody(), b.GetEndOfStream())}, nil // passing
}

func (p *pipeline) responseTrailers(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	if p.x.silenced {
		return nil, nil
	}
	var out []*extprocv3.ProcessingResponse
	if p.resp.state == collecting {
		out = p.end(&p.resp, responseBodyReply, p.x.responseBody, false)
	}
	return append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{},
	}}), nil
}

// After its headers, a router-level request's messages go from the framing straight to the
// processor its path chose (chosen), through the checks every kind shares.

func (x *exchange) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if e := x.bodyRefusal(b); e != nil {
		return x.Fail(e)
	}
	resp, _ := x.chosen().RequestBody(b) // a router-level processor never ends the stream
	return resp
}

// bodyRefusal is the answer a request body gets before its processor sees it: a refusal
// deferred from the headers, or a body over the limit; nil: none.
func (x *exchange) bodyRefusal(b *extprocv3.HttpBody) *core.APIError {
	if x.deferred != nil {
		return x.deferred // Envoy sends no body after deferRefusal; should one come anyway
	}
	if len(b.GetBody()) > ir.MaxBodyBytes {
		return core.ErrTooLarge // sent without a content-length (chunked)
	}
	return nil
}

func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if x.deferred != nil {
		return x.Fail(x.deferred) // the unrouted reply to a request refused at its headers
	}
	resp, _ := x.chosen().ResponseHeaders(h)
	if hr := resp.GetResponseHeaders(); hr != nil {
		if rh := x.RateHeaders(); rh != nil { // every answer to a key with rate limits
			if hr.Response == nil {
				hr.Response = &extprocv3.CommonResponse{}
			}
			common := hr.Response
			if common.HeaderMutation == nil {
				common.HeaderMutation = &extprocv3.HeaderMutation{}
			}
			core.AddHeaders(common.HeaderMutation, rh)
		}
	}
	return resp
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	resp, _ := x.chosen().ResponseBody(b)
	return resp
}

// chosen is the processor the request's path chose (processor: a chat's for a request whose
// headers never chose one).
func (x *exchange) chosen() Processor {
	if x.kind != nil {
		return x.kind
	}
	return x.processor()
}

// logged is one reply, its access-log metadata added.
func (p *pipeline) logged(resp *extprocv3.ProcessingResponse, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	p.x.logMetadata(resp, req)
	return []*extprocv3.ProcessingResponse{resp}
}

// headers takes the exchange's reply to headers: sent now, or held while the body is collected.
// The reply's mode override (ignored by Envoy here) says what the exchange wants of the body.
func (p *pipeline) headers(f *flow, resp *extprocv3.ProcessingResponse, endOfStream bool, bodyMode func(*extprocv3filter.ProcessingMode) extprocv3filter.ProcessingMode_BodySendMode) []*extprocv3.ProcessingResponse {
	if resp.ModeOverride != nil {
		p.mode = resp.ModeOverride
		resp.ModeOverride = nil
	}
	if _, done := resp.Response.(*extprocv3.ProcessingResponse_ImmediateResponse); done || endOfStream {
		return []*extprocv3.ProcessingResponse{resp}
	}
	switch bodyMode(p.mode) {
	case extprocv3filter.ProcessingMode_BUFFERED:
		if f.envoyBuffers {
			f.state = buffered
			break
		}
		f.state, f.held = collecting, resp
		return nil
	case extprocv3filter.ProcessingMode_STREAMED:
		f.state = streaming
	default:
		f.state = passing
	}
	return []*extprocv3.ProcessingResponse{resp}
}

// body takes one chunk: passed on, or collected until the last one.
func (p *pipeline) body(f *flow, b *extprocv3.HttpBody, reply func(*extprocv3.CommonResponse) *extprocv3.ProcessingResponse,
	handle func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse, tooLarge *core.APIError) []*extprocv3.ProcessingResponse {
	f.chunks++
	if f.state != collecting {
		return []*extprocv3.ProcessingResponse{reply(&extprocv3.CommonResponse{})}
	}
	if len(f.body)+len(b.GetBody()) > f.limit {
		resp := p.x.Fail(tooLarge)
		p.x.logMetadata(resp, bodyRequest(f == &p.request, b))
		return []*extprocv3.ProcessingResponse{resp}
	}
	f.body = append(f.body, b.GetBody()...)
	if b.GetEndOfStream() {
		return p.end(f, reply, handle, true)
	}
	if int64(len(f.body)) == f.declared {
		// All of it is in: the chunk that ends it follows at once (Envoy's HTTP/1 codec ends a
		// body with an empty one), and the replies then go out together.
		return nil
	}
	// More is coming. Envoy restarts its message timeout at every chunk it sends while the
	// headers' reply is held: a client (or provider) on a slow link gets more than that between
	// chunks, as it had when Envoy buffered the body before ext_proc saw it.
	if err := p.x.Envoy.ExtendTimeout(slowBodyGap); err != nil {
		return []*extprocv3.ProcessingResponse{p.x.Fail(core.ErrLostEnvoy)}
	}
	return nil
}

// slowBodyGap is how long a body being read may pause between chunks. A body that arrives
// whole in one read (with its content-length) costs no message for it.
const slowBodyGap = 60 * time.Second

// declaredLength is a content-length's value, -1 if there is none (or it is not a number).
func declaredLength(cl string) int64 {
	if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
		return n
	}
	return -1
}

// headerNamed is the value of h's header k, "" if it has none.
func headerNamed(h *extprocv3.HttpHeaders, k string) string {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == k {
			return core.HeaderValue(hv)
		}
	}
	return ""
}

// end hands a collected body to the exchange, whole, and sends the held headers' reply merged
// with the exchange's answer to the body, then one reply per chunk: the new body in the last,
// or every chunk untouched when the exchange left the body as it was (a duplex body: one reply
// with the body as it goes on, ending it unless trailers follow, endOfStream false).
func (p *pipeline) end(f *flow, reply func(*extprocv3.CommonResponse) *extprocv3.ProcessingResponse,
	handle func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse, endOfStream bool) []*extprocv3.ProcessingResponse {
	if f.state != collecting {
		return nil
	}
	f.state = passing
	whole := &extprocv3.HttpBody{Body: f.body, EndOfStream: true}
	f.body = nil
	resp := handle(whole)
	p.x.logMetadata(resp, bodyRequest(f == &p.request, whole))
	if _, done := resp.Response.(*extprocv3.ProcessingResponse_ImmediateResponse); done {
		return []*extprocv3.ProcessingResponse{resp}
	}
	var answer *extprocv3.CommonResponse
	switch r := resp.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestBody:
		answer = r.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		answer = r.ResponseBody.GetResponse()
	}
	held := f.held
	f.held = nil
	common := headersCommon(held)
	common.HeaderMutation = mergeMutations(common.HeaderMutation, answer.GetHeaderMutation())
	common.ClearRouteCache = common.ClearRouteCache || answer.GetClearRouteCache()
	held.DynamicMetadata = mergeMetadata(held.DynamicMetadata, resp.DynamicMetadata)
	out := make([]*extprocv3.ProcessingResponse, 0, 1+f.chunks)
	out = append(out, held)
	mut := answer.GetBodyMutation()
	if f.duplex {
		f.chunks = 0
		body := whole.Body
		if mut != nil {
			body = mut.GetBody() // nil when cleared
		}
		return append(out, streamedBody(body, endOfStream))
	}
	for i := 0; i < f.chunks; i++ {
		c := &extprocv3.CommonResponse{}
		switch {
		case mut == nil: // the chunk goes on as it came
		case i < f.chunks-1:
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
		default:
			c.BodyMutation = mut
		}
		out = append(out, reply(c))
	}
	f.chunks = 0
	return out
}

// headersCommon is a headers reply's common response, made if it has none.
func headersCommon(resp *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	var h *extprocv3.HeadersResponse
	switch r := resp.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		h = r.RequestHeaders
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		h = r.ResponseHeaders
	}
	if h.Response == nil {
		h.Response = &extprocv3.CommonResponse{}
	}
	return h.Response
}

// mergeMutations is one mutation that does what first then second would (Envoy applies a
// mutation's removals after its sets): first's sets that second removes are dropped, and so are
// first's removals of headers second sets.
func mergeMutations(first, second *extprocv3.HeaderMutation) *extprocv3.HeaderMutation {
	if second == nil {
		return first
	}
	if first == nil {
		return second
	}
	removed := map[string]bool{}
	for _, k := range second.RemoveHeaders {
		removed[k] = true
	}
	set := map[string]bool{}
	for _, hv := range second.SetHeaders {
		set[hv.GetHeader().GetKey()] = true
	}
	out := &extprocv3.HeaderMutation{}
	for _, hv := range first.SetHeaders {
		if !removed[hv.GetHeader().GetKey()] && !set[hv.GetHeader().GetKey()] {
			out.SetHeaders = append(out.SetHeaders, hv)
		}
	}
	out.SetHeaders = append(out.SetHeaders, second.SetHeaders...)
	for _, k := range first.RemoveHeaders {
		if !set[k] {
			out.RemoveHeaders = append(out.RemoveHeaders, k)
		}
	}
	out.RemoveHeaders = append(out.RemoveHeaders, second.RemoveHeaders...)
	return out
}

func requestBodyReply(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}}
}

func responseBodyReply(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: c}}}
}

// bodyRequest is the buffered protocol's message for a whole body, for the access log.
func bodyRequest(request bool, b *extprocv3.HttpBody) *extprocv3.ProcessingRequest {
	if request {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: b}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: b}}
}

// mergeMetadata is first's dynamic metadata with second's added, namespace by namespace, as
// Envoy merges what two replies set.
func mergeMetadata(first, second *structpb.Struct) *structpb.Struct {
	if first == nil {
		return second
	}
	merged := &extprocv3.ProcessingResponse{DynamicMetadata: first}
	for ns, v := range second.GetFields() {
		core.AddMetadata(merged, ns, v.GetStructValue().GetFields())
	}
	return first
}

// oneByOne is the buffered protocol: each message gets its processor's one reply. log, when
// set, adds the access log's metadata to each reply.
type oneByOne struct {
	p   Processor
	log func(*extprocv3.ProcessingResponse, *extprocv3.ProcessingRequest)
}

// one is the reply call makes to req.
func (o oneByOne) one(req *extprocv3.ProcessingRequest, call func() (*extprocv3.ProcessingResponse, error)) ([]*extprocv3.ProcessingResponse, error) {
	resp, err := call()
	if err != nil {
		return nil, err
	}
	if o.log != nil {
		o.log(resp, req)
	}
	return []*extprocv3.ProcessingResponse{resp}, nil
}

func (o oneByOne) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.RequestHeaders(h) })
}

func (o oneByOne) requestBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.RequestBody(b) })
}

func (o oneByOne) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.ResponseHeaders(h) })
}

func (o oneByOne) responseBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	return o.one(req, func() (*extprocv3.ProcessingResponse, error) { return o.p.ResponseBody(b) })
}

// Trailers are never asked for in the buffered protocol (processing modes skip them).
func (o oneByOne) requestTrailers(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return nil, unexpected(req)
}

func (o oneByOne) responseTrailers(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return nil, unexpected(req)
}
