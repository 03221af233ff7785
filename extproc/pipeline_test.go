package extproc

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/xds/ir"
)

// pipelined sends msgs as Envoy's pipelined protocol does (all at once, no reply awaited) and
// reads want replies.
func (s *stream) pipelined(want int, msgs ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	s.t.Helper()
	for _, m := range msgs {
		if err := s.s.Send(m); errors.Is(err, io.EOF) {
			// The server ended the stream (an immediate answer to an earlier message): gRPC
			// gives its status to Recv, which reads what it sent before.
			break
		} else if err != nil {
			s.t.Fatalf("Send: %v", err)
		}
	}
	out := make([]*extprocv3.ProcessingResponse, 0, want)
	for range want {
		resp, err := s.s.Recv()
		if err != nil {
			s.t.Fatalf("Recv after %d replies: %v", len(out), err)
		}
		out = append(out, resp)
	}
	return out
}

// answers is pipelined, counting apart the message-timeout extensions among the replies (one
// per chunk of a body still being read).
func (s *stream) answers(want int, msgs ...*extprocv3.ProcessingRequest) (out []*extprocv3.ProcessingResponse, timeouts int) {
	s.t.Helper()
	s.pipelined(0, msgs...)
	for len(out) < want {
		r := s.pipelined(1)[0]
		if r.GetOverrideMessageTimeout() != nil {
			timeouts++
			continue
		}
		out = append(out, r)
	}
	return out, timeouts
}

// withLength is h with a content-length: bodies under 1,000,000 bytes that declare it are
// pipelined (ir.Pipelined); others Envoy buffers.
func withLength(h *extprocv3.ProcessingRequest, n int) *extprocv3.ProcessingRequest {
	hs := h.GetRequestHeaders().GetHeaders()
	hs.Headers = append(hs.Headers, hdr("content-length", strconv.Itoa(n), true))
	return h
}

// chunk is one body chunk as Envoy's HTTP/1 codec delivers them: the data, then an empty chunk
// that ends the body.
func chunk(request bool, body string, eos bool) *extprocv3.ProcessingRequest {
	b := &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos}
	if request {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: b}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: b}}
}

func answerWith(status, contentType string, extra ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
	hs := append([]*corev3.HeaderValue{hdr(":status", status, true), hdr("content-type", contentType, true)}, extra...)
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}},
	}}
}

// directChat plays a chat request of one attempt on an OpenAI-shaped provider over the
// pipelined protocol, its body in two chunks: the headers' reply, held until the body was read,
// carries the routing and the rewrite's headers; the chunks' replies carry the new body.
func directChat(t *testing.T, s *stream) {
	t.Helper()
	body := `{"model":"free","messages":[{"role":"user","content":"hi"}],"top_k":3}`
	h := chatHeaders("Bearer "+validSecret, "req-pipe", true)
	hs := h.GetRequestHeaders().GetHeaders()
	hs.Headers = append(hs.Headers, hdr("content-length", strconv.Itoa(len(body)), true),
		hdr("openai-organization", "org-1", true), hdr("x-forwarded-proto", "http", true), hdr(ir.ProviderHeader, "spoofed", true))
	// The body is whole at its first chunk (its content-length says so): no longer timeout is
	// asked for; the new body goes in the last chunk's reply.
	out, timeouts := s.answers(3, h, chunk(true, body, false), chunk(true, "", true))
	if timeouts != 0 {
		t.Errorf("%d message timeouts extended for a body that came whole", timeouts)
	}
	hr := out[0].GetRequestHeaders().GetResponse()
	if hr == nil {
		t.Fatalf("first reply %v, want the request headers' reply", out[0])
	}
	if !hr.GetClearRouteCache() {
		t.Error("the headers' reply must clear the route cache: it names the cluster")
	}
	set := setHeaders(t, hr.GetHeaderMutation())
	removed := hr.GetHeaderMutation().GetRemoveHeaders()
	if set[ir.ClusterHeader] != "provider.local" || set[":authority"] != "127.0.0.1:11434" || set[":path"] != "/v1/chat/completions" {
		t.Errorf("headers' reply sets %v; want the direct rewrite to provider.local", set)
	}
	if contains(removed, ir.ClusterHeader) {
		t.Errorf("removes %v: the cluster header it sets would be removed (Envoy removes after it sets)", removed)
	}
	for _, k := range []string{"authorization", "openai-organization", ir.ProviderHeader} {
		if !contains(removed, k) {
			t.Errorf("removes %v: the client's %s must not reach the provider", removed, k)
		}
	}
	if contains(removed, "x-forwarded-proto") {
		t.Errorf("removes %v: Envoy matches no route without x-forwarded-proto (the route removes it)", removed)
	}
	if c := out[1].GetRequestBody().GetResponse(); !c.GetBodyMutation().GetClearBody() {
		t.Errorf("first chunk's reply %v, want it cleared (the new body goes in the last)", c)
	}
	up := out[2].GetRequestBody().GetResponse().GetBodyMutation().GetBody()
	if got := jsonString(t, decodeObject(t, up)["model"]); got != "qwen2.5:7b" {
		t.Errorf("provider's model %q, want qwen2.5:7b", got)
	}
	if set["content-length"] != strconv.Itoa(len(up)) {
		t.Errorf("content-length %q for a %d-byte body", set["content-length"], len(up))
	}
}

// streamed is a FULL_DUPLEX_STREAMED body reply's body and end (t fails on any other reply).
func streamed(t *testing.T, r *extprocv3.ProcessingResponse) ([]byte, bool) {
	t.Helper()
	sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
	if sr == nil {
		t.Fatalf("reply %v, want a streamed body", r)
	}
	return sr.GetBody(), sr.GetEndOfStream()
}

// TestPipelinedDirectChat: a plain answer is read whole and sent on with the headers' reply
// (provider, content-length of the rewritten answer) and the catalog model in its body: one
// streamed reply with the whole new body (answers are FULL_DUPLEX_STREAMED on Tollway's routes).
func TestPipelinedDirectChat(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.openPhase(ir.PhaseRouter)
	directChat(t, s)
	// An answer without a content-length, in two chunks: read whole at the one that ends it, Envoy
	// asked to wait past its message timeout in between.
	out, timeouts := s.answers(2, answerWith("200", "application/json", hdr(ir.ServedHeader, "local/", true)),
		chunk(false, `{"id":"c1","object":"chat.completion",`, false), chunk(false, `"model":"qwen2.5:7b","choices":[]}`, true))
	if timeouts != 1 {
		t.Errorf("%d message timeouts extended, want 1 (after the first chunk)", timeouts)
	}
	set := setHeaders(t, out[0].GetResponseHeaders().GetResponse().GetHeaderMutation())
	if set[ir.ProviderHeader] != "local" {
		t.Errorf("answer's headers %v, want %s: local", set, ir.ProviderHeader)
	}
	body, end := streamed(t, out[1])
	if !end {
		t.Error("the answer's body does not end")
	}
	if want := `{"id":"c1","object":"chat.completion","model":"free","choices":[]}`; string(body) != want {
		t.Errorf("answer %s, want %s", body, want)
	}
	if set["content-length"] != strconv.Itoa(len(body)) {
		t.Errorf("content-length %q for a %d-byte answer", set["content-length"], len(body))
	}
	s.close()
}

// TestPipelinedStreamedAnswer: an SSE answer is never held: its headers are answered at once
// (a provider's content-length removed, as chunks change length) and each chunk as it comes.
func TestPipelinedStreamedAnswer(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.openPhase(ir.PhaseRouter)
	directChat(t, s)
	out := s.pipelined(1, answerWith("200", "text/event-stream", hdr("content-length", "999", true), hdr(ir.ServedHeader, "local/", true)))
	if rm := out[0].GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !contains(rm, "content-length") {
		t.Errorf("SSE headers' reply removes %v, want content-length removed", rm)
	}
	out = s.pipelined(1, chunk(false, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"qwen2.5:7b\",\"choices\":[]}\n\n", false))
	if got, end := streamed(t, out[0]); !strings.Contains(string(got), `"model":"free"`) || end {
		t.Errorf("streamed chunk %q (end %v), want the catalog model", got, end)
	}
	// A chunk the answer leaves as it is goes on as it came: ext_proc sends the client's body.
	out = s.pipelined(1, chunk(false, ": keep-alive\n\n", false))
	if got, _ := streamed(t, out[0]); string(got) != ": keep-alive\n\n" {
		t.Errorf("unchanged chunk went on as %q", got)
	}
	out = s.pipelined(1, chunk(false, "data: [DONE]\n\n", true))
	if got, end := streamed(t, out[0]); string(got) != "data: [DONE]\n\n" || !end {
		t.Errorf("last chunk's reply %q (end %v)", got, end)
	}
	s.close()
}

// TestPipelinedTrailersEndTheBody: a request body that ends with trailers (no chunk marked the
// end) is read whole at the trailers, which are answered after its chunks.
func TestPipelinedTrailersEndTheBody(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.openPhase(ir.PhaseRouter)
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	body := `{"model":"free","messages":[{"role":"user","content":"hi"}]}`
	out, _ := s.answers(3, withLength(chatHeaders("Bearer "+validSecret, "req-trailers", true), len(body)), chunk(true, body, false), trailers)
	if setHeaders(t, out[0].GetRequestHeaders().GetResponse().GetHeaderMutation())[ir.ClusterHeader] != "provider.local" {
		t.Errorf("headers' reply %v, want the request routed", out[0])
	}
	if out[1].GetRequestBody().GetResponse().GetBodyMutation().GetBody() == nil {
		t.Errorf("chunk's reply %v, want the rewritten body", out[1])
	}
	if out[2].GetRequestTrailers() == nil {
		t.Errorf("third reply %v, want the trailers'", out[2])
	}
}

// TestPipelinedRefusals: what the buffered protocol refused, the pipelined one refuses the same.
func TestPipelinedRefusals(t *testing.T) {
	e := startServer(t, testRuntime())
	immediateStatus := func(t *testing.T, resp *extprocv3.ProcessingResponse, want int) *extprocv3.ImmediateResponse {
		t.Helper()
		ir := resp.GetImmediateResponse()
		if ir == nil || int(ir.GetStatus().GetCode()) != want {
			t.Fatalf("reply %v, want an immediate %d", resp, want)
		}
		return ir
	}
	t.Run("a big body, or one without a length, is buffered by Envoy", func(t *testing.T) {
		// Its route has Envoy buffer it (translator: the -buffered routes): the headers are
		// answered at once, the whole body in one message, as in the buffered protocol.
		s := e.openPhase(ir.PhaseRouter)
		out := s.pipelined(1, chatHeaders("Bearer "+validSecret, "req-big", true))
		if out[0].GetRequestHeaders() == nil || setHeaders(t, out[0].GetRequestHeaders().GetResponse().GetHeaderMutation())[ir.ClusterHeader] != "" {
			t.Fatalf("headers' reply %v, want it at once, without the routing", out[0])
		}
		out = s.pipelined(1, requestBody(`{"model":"free","messages":[{"role":"user","content":"hi"}]}`))
		rb := out[0].GetRequestBody().GetResponse()
		if setHeaders(t, rb.GetHeaderMutation())[ir.ClusterHeader] != "provider.local" || !rb.GetClearRouteCache() || rb.GetBodyMutation().GetBody() == nil {
			t.Errorf("body's reply %v, want the routing and the rewrite", out[0])
		}
	})
	t.Run("a bad key, before the body", func(t *testing.T) {
		s := e.openPhase(ir.PhaseRouter)
		out := s.pipelined(1, chatHeaders("Bearer ale-nope", "req-key", true), chunk(true, "{}", true))
		immediateStatus(t, out[0], http.StatusUnauthorized)
		s.expectClosed()
	})
	t.Run("an invalid request id is replaced, then refused", func(t *testing.T) {
		s := e.openPhase(ir.PhaseRouter)
		out := s.pipelined(2, chatHeaders("Bearer "+validSecret, "bad id", true), chunk(true, "{}", true))
		id := setHeaders(t, out[0].GetRequestHeaders().GetResponse().GetHeaderMutation())["x-request-id"]
		if id == "" || id == "bad id" {
			t.Fatalf("headers' reply %v, want a fresh x-request-id", out[0])
		}
		refusal := immediateStatus(t, out[1], http.StatusBadRequest)
		if got := setHeaders(t, refusal.GetHeaders())["x-request-id"]; got != id {
			t.Errorf("refusal carries x-request-id %q, want the replacement %q", got, id)
		}
	})
	t.Run("an answer to a request ext_proc never saw passes untouched", func(t *testing.T) {
		s := e.openPhase(ir.PhaseRouter)
		out := s.pipelined(2, answerWith("431", "text/plain"), chunk(false, "headers too large", true))
		if h := out[0].GetResponseHeaders(); h == nil || h.GetResponse() != nil {
			t.Errorf("headers' reply %v, want an empty one", out[0])
		}
		if body, end := streamed(t, out[1]); string(body) != "headers too large" || !end || out[1].GetResponseBody().GetResponse().GetHeaderMutation() != nil {
			t.Errorf("chunk's reply %v, want the chunk as it came", out[1])
		}
		s.close()
	})
	t.Run("a provider's error is shaped whole", func(t *testing.T) {
		s := e.openPhase(ir.PhaseRouter)
		directChat(t, s)
		out, _ := s.answers(2, answerWith("429", "application/json", hdr(ir.ServedHeader, "local/", true)),
			chunk(false, `{"error":{"message":"slow down",`, false), chunk(false, `"code":"rate_limit_exceeded"}}`, true))
		set := setHeaders(t, out[0].GetResponseHeaders().GetResponse().GetHeaderMutation())
		body, end := streamed(t, out[1])
		if !strings.Contains(string(body), "slow down") || set["content-length"] != strconv.Itoa(len(body)) || set["content-type"] != "application/json" || !end {
			t.Errorf("error answer %s with headers %v; want the spec's shape, sized", body, set)
		}
		s.close()
	})
}

// TestMergeMutations: one mutation does what the headers' reply and then the body's would.
func TestMergeMutations(t *testing.T) {
	first := &extprocv3.HeaderMutation{
		SetHeaders:    []*corev3.HeaderValueOption{core.SetHeader("a", "1"), core.SetHeader("b", "1")},
		RemoveHeaders: []string{"x-cluster", "c"},
	}
	second := &extprocv3.HeaderMutation{
		SetHeaders:    []*corev3.HeaderValueOption{core.SetHeader("x-cluster", "chain"), core.SetHeader("b", "2")},
		RemoveHeaders: []string{"a"},
	}
	m := mergeMutations(first, second)
	set := setHeaders(t, m)
	if len(set) != 2 || set["x-cluster"] != "chain" || set["b"] != "2" {
		t.Errorf("sets %v, want x-cluster: chain and b: 2 (a removed by the second)", set)
	}
	if rm := m.GetRemoveHeaders(); contains(rm, "x-cluster") || !contains(rm, "c") || !contains(rm, "a") {
		t.Errorf("removes %v, want c and a, never the x-cluster the second sets", rm)
	}
	if mergeMutations(nil, second) != second || mergeMutations(first, nil) != first {
		t.Error("a missing mutation must leave the other as it is")
	}
}

// TestPipelinedSlowBodyGetsTime: while a body is read chunk by chunk, ext_proc asks Envoy for
// more than its message timeout after each chunk (Envoy restarts it at every chunk it sends).
func TestPipelinedSlowBodyGetsTime(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.openPhase(ir.PhaseRouter)
	body := `{"model":"free","messages":[{"role":"user","content":"hi"}]}`
	out := s.pipelined(1, withLength(chatHeaders("Bearer "+validSecret, "req-slow", true), len(body)), chunk(true, body[:10], false))
	if d := out[0].GetOverrideMessageTimeout().AsDuration(); d != slowBodyGap {
		t.Fatalf("reply to a chunk with more to come %v, want a message timeout of %v", out[0], slowBodyGap)
	}
	out, timeouts := s.answers(4, chunk(true, body[10:], false), chunk(true, "", true))
	// The second chunk completes the declared length: no timeout is asked for after it.
	if timeouts != 0 || out[0].GetRequestHeaders() == nil || out[3].GetRequestBody().GetResponse().GetBodyMutation().GetBody() == nil {
		t.Errorf("replies %v (%d timeouts), want the headers' and the three chunks', no more timeout", out, timeouts)
	}
	s.close()
}

// TestSilentStreamEndsWithAnError: a streamed answer whose provider goes silent mid-answer is
// ended by ext_proc, on its own, with one error event in the spec's shape (upstream_timeout,
// the request id) that ends the body; chunks that keep coming put the end off, and what Envoy
// sends after it goes nowhere.
func TestSilentStreamEndsWithAnError(t *testing.T) {
	rt := testRuntime()
	rt.Silence = 300 * time.Millisecond
	e := startServer(t, rt)
	s := e.openPhase(ir.PhaseRouter)
	directChat(t, s)
	s.pipelined(1, answerWith("200", "text/event-stream", hdr(ir.ServedHeader, "local/", true)))
	ev := "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"qwen2.5:7b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	start := time.Now()
	for range 5 { // a chunk every 100 ms: never silent for long
		time.Sleep(100 * time.Millisecond)
		if got, end := streamed(t, s.pipelined(1, chunk(false, ev, false))[0]); !strings.Contains(string(got), `"content":"hi"`) || end {
			t.Fatalf("chunk's reply %q (end %v)", got, end)
		}
	}
	got, end := streamed(t, s.pipelined(1)[0]) // then nothing: ext_proc ends the answer
	silent := time.Since(start) - 500*time.Millisecond
	var e2 struct {
		Error struct {
			Code, Message string
			RequestID     string `json:"request_id"`
		}
	}
	data, ok := strings.CutPrefix(string(got), "data: ")
	if !ok || !strings.HasSuffix(data, "\n\n") || json.Unmarshal([]byte(data), &e2) != nil || !end ||
		e2.Error.Code != "upstream_timeout" || e2.Error.RequestID != "req-pipe" || !strings.Contains(e2.Error.Message, "300ms") {
		t.Fatalf("after the provider went silent: %q (end %v), want one upstream_timeout event ending the answer", got, end)
	}
	if silent < 250*time.Millisecond || silent > 3*time.Second {
		t.Errorf("ended after %s of silence, want about 300ms", silent)
	}
	// The provider speaks again before Envoy tore the stream down: nothing more reaches the client.
	if err := s.s.Send(chunk(false, ev, false)); err != nil {
		t.Fatal(err)
	}
	s.close()
}

// TestPipelinedAnswerEndedByTrailers: an answer whose body ends with trailers (no chunk marked
// the end) is read whole at the trailers: its headers' reply, the body it goes on with, not
// ended (the trailers end it), then the trailers' reply.
func TestPipelinedAnswerEndedByTrailers(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.openPhase(ir.PhaseRouter)
	directChat(t, s)
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
	out, _ := s.answers(3, answerWith("200", "application/json", hdr(ir.ServedHeader, "local/", true)),
		chunk(false, `{"id":"c1","object":"chat.completion","model":"qwen2.5:7b","choices":[]}`, false), trailers)
	if out[0].GetResponseHeaders() == nil {
		t.Fatalf("first reply %v, want the headers'", out[0])
	}
	if body, end := streamed(t, out[1]); !strings.Contains(string(body), `"model":"free"`) || end {
		t.Errorf("body %s (end %v), want the rewritten answer, ended by the trailers", body, end)
	}
	if out[2].GetResponseTrailers() == nil {
		t.Errorf("third reply %v, want the trailers'", out[2])
	}
	s.close()
}
