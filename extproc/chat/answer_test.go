package chat

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"weak"

	"github.com/tollway/tollway/extproc/sse"
)

// providerStream is an OpenAI stream as a provider sends it: its own model name in every chunk,
// CRLF line ends in one event, the usage chunk the gateway asked for.
const providerStream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"llama3.2:8b\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
	"data: {\"id\":\"c1\",\"model\":\"llama3.2:8b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"say \\\"model\\\": x\"}}]}\r\n\r\n" +
	"data: {\"id\":\"c1\",\"model\":\"llama3.2:8b\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"c1\",\"model\":\"llama3.2:8b\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n" +
	"data: [DONE]\n\n"

// TestAnswerNamesTheCatalogModelInEveryChunk: however the stream is cut, each event goes out
// whole with the catalog id in its model field, content untouched, and nothing is held back
// past the end of an event.
func TestAnswerNamesTheCatalogModelInEveryChunk(t *testing.T) {
	want := strings.ReplaceAll(providerStream, `"model":"llama3.2:8b"`, `"model":"gpt"`)
	for _, n := range []int{1, 2, 3, 7, 50, len(providerStream)} {
		for _, billing := range []bool{false, true} {
			var m *meter
			if billing {
				m = &meter{}
			}
			a := newAnswer("gpt", m, false)
			var out strings.Builder
			for i := 0; i < len(providerStream); i += n {
				end := min(i+n, len(providerStream))
				b, _ := a.chunk([]byte(providerStream[i:end]), end == len(providerStream))
				out.Write(b)
				// Every event whose end has arrived has gone out.
				var f sse.Framer
				whole := 0
				_ = f.Feed([]byte(providerStream[:end]), false, func([]byte) error { whole++; return nil })
				if got := strings.Count(out.String(), "data: "); got < whole {
					t.Fatalf("pieces of %d: %d whole events sent, %d went out", n, whole, got)
				}
			}
			if out.String() != want {
				t.Fatalf("pieces of %d, billing %v:\n got %q\nwant %q", n, billing, out.String(), want)
			}
			if billing {
				if u, est := m.result(func() int64 { return 0 }); est || u.CompletionTokens != 2 {
					t.Fatalf("usage %+v est=%v", u, est)
				}
			}
		}
	}
}

// TestAnswerDropsUsageWithoutBilling: the usage chunk the gateway asked for is removed for a
// client that did not ask, also when nothing is billed.
func TestAnswerDropsUsageWithoutBilling(t *testing.T) {
	a := newAnswer("gpt", nil, true)
	out, changed := a.chunk([]byte(providerStream), true)
	if !changed || strings.Contains(string(out), "usage") || !strings.HasSuffix(string(out), "data: [DONE]\n\n") {
		t.Fatalf("out %q", out)
	}
}

func TestAnswerBody(t *testing.T) {
	m := &meter{}
	a := newAnswer("route-model", m, false)
	in := `{"id":"x","object":"chat.completion","model":"claude-3-5-haiku-20241022","choices":[{"message":{"role":"assistant","content":"{\"model\":\"no\"}"}}],"usage":{"prompt_tokens":1,"completion_tokens":4}}`
	out, changed := a.body([]byte(in))
	if want := strings.Replace(in, `"claude-3-5-haiku-20241022"`, `"route-model"`, 1); !changed || string(out) != want {
		t.Fatalf("got %s", out)
	}
	if u, _ := m.result(nil); u.CompletionTokens != 4 {
		t.Fatalf("usage %+v", u)
	}
}

func TestReplaceModel(t *testing.T) {
	q := []byte(`"gpt"`)
	for in, want := range map[string]string{
		`{"model":"x","a":1}`:                         `{"model":"gpt","a":1}`,
		`{"a":{"model":"nested"},"model" : "x" }`:     `{"a":{"model":"nested"},"model" : "gpt" }`,
		`{"model":"gpt"}`:                             "", // already right: unchanged
		`{"choices":[{"delta":{"content":"model"}}]}`: "",
		`{"model":null}`:                              "",
		`{"model":"x"`:                                `{"model":"gpt"`, // cut after the value: the value is whole
		`[{"model":"x"}]`:                             "",
		`{"error":{"message":"m","model":"x"}}`:       "",
	} {
		out, changed := replaceModel(newAnswer("gpt", nil, false).decoder([]byte(in)), []byte(in), q)
		if want == "" {
			if changed || string(out) != in {
				t.Errorf("replaceModel(%s) = %s, %v; want unchanged", in, out, changed)
			}
			continue
		}
		if !changed || string(out) != want {
			t.Errorf("replaceModel(%s) = %s, want %s", in, out, want)
		}
	}
}

// BenchmarkAnswerStream is the router-level cost of naming the catalog model in a 13-chunk
// stream, one chunk per ext_proc message, without billing.
func BenchmarkAnswerStream(b *testing.B) {
	var chunks [][]byte
	for i := 0; i < 12; i++ {
		chunks = append(chunks, []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"fake-llama-3","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}`+"\n\n"))
	}
	chunks = append(chunks, []byte("data: [DONE]\n\n"))
	for b.Loop() {
		a := newAnswer("gpt-4o-mini", nil, false)
		for i, c := range chunks {
			a.chunk(c, i == len(chunks)-1)
		}
	}
}

// BenchmarkAnswerBody is the same for a plain answer.
func BenchmarkAnswerBody(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"fake-llama-3","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from fake/fake-llama-3: Say hello in five words"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`)
	for b.Loop() {
		newAnswer("gpt-4o-mini", nil, false).body(body)
	}
}

// TestStreamErrorEventsCarryTheRequestID: an error event inside a 200 stream, written by a
// provider ({"error": {...}}, OpenAI's mid-stream shape, or a bare string) or by a translator,
// reaches the client in the spec's shape with the request's id, like every other error
// (issue 10: {"error":{"message":"Overloaded","code":"overloaded_error"}} had none).
func TestStreamErrorEventsCarryTheRequestID(t *testing.T) {
	for in, want := range map[string]string{
		`{"error":{"message":"Overloaded","code":"overloaded_error"}}`:                        `{"error":{"message":"Overloaded","code":"overloaded_error","request_id":"req-9"}}`,
		`{"error": {"message": "server had an error", "type": "server_error", "code": null}}`: `{"error":{"message":"server had an error","code":"server_error","request_id":"req-9"}}`,
		`{"error":"rate limited"}`: `{"error":{"message":"rate limited","code":"upstream_error","request_id":"req-9"}}`,
	} {
		for _, m := range []*meter{nil, {}} {
			a := newAnswer("gpt", m, false)
			a.requestID = "req-9"
			stream := "data: {\"id\":\"c1\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"an error is coming\"}}]}\n\ndata: " + in + "\n\n"
			out, _ := a.chunk([]byte(stream), true)
			if !strings.HasSuffix(string(out), "data: "+want+"\n\n") || !strings.Contains(string(out), `"content":"an error is coming"`) {
				t.Errorf("%s became\n%s\nwant it to end with %s", in, out, want)
			}
		}
	}
}

// TestEstimatedUsageChunk: a client that asked for usage (stream_options.include_usage) gets a
// usage chunk even when the provider sent none (a Gemini stream without usageMetadata, an
// OpenAI-compatible server that ignores stream_options): estimated from what was sent, marked
// estimated, and billed exactly as it says (issue 10, item 5).
func TestEstimatedUsageChunk(t *testing.T) {
	stream := "data: {\"id\":\"c7\",\"created\":1700000000,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		"data: {\"id\":\"c7\",\"created\":1700000000,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello there, friend\"}}]}\n\n" +
		"data: {\"id\":\"c7\",\"created\":1700000000,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: [DONE]\n\n"
	m := &meter{}
	a := newAnswer("gpt", m, false)
	a.promptTokens = func() int64 { return 11 }
	var out strings.Builder
	for i := 0; i < len(stream); i += 9 {
		b, _ := a.chunk([]byte(stream[i:min(i+9, len(stream))]), i+9 >= len(stream))
		out.Write(b)
	}
	want := `data: {"id":"c7","object":"chat.completion.chunk","created":1700000000,"model":"gpt","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0},"estimated":true}}` + "\n\ndata: [DONE]\n\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Fatalf("client got\n%s\nwant it to end with\n%s", out.String(), want)
	}
	if u, est := m.result(func() int64 { return 999 }); !est || u.PromptTokens != 11 || u.CompletionTokens != 4 {
		t.Fatalf("billed %+v (estimated %v); want what the chunk said", u, est)
	}

	// A provider that sent usage gets no second chunk.
	m = &meter{}
	a = newAnswer("gpt", m, false)
	a.promptTokens = func() int64 { return 11 }
	got, _ := a.chunk([]byte(providerStream), true)
	if strings.Count(string(got), `"usage"`) != 1 || strings.Contains(string(got), "estimated") {
		t.Fatalf("with the provider's usage the client got\n%s", got)
	}
}

// TestStreamEndingUnfinishedGetsAnError: an OpenAI-shaped provider that ends its body without a
// finish_reason or [DONE] cut the answer short; the client gets one error event with the
// request id instead of a quiet end. A stream that finished is left alone.
func TestStreamEndingUnfinishedGetsAnError(t *testing.T) {
	cut := "data: {\"id\":\"c1\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Half an ans\"}}]}\n\n"
	a := newAnswer("gpt", &meter{}, false)
	a.requestID = "req-3"
	out, _ := a.chunk([]byte(cut), true)
	if !strings.HasSuffix(string(out), `"code":"upstream_error","request_id":"req-3"}}`+"\n\n") || !strings.Contains(string(out), "Half an ans") {
		t.Fatalf("cut stream became\n%s", out)
	}
	finished := "data: {\"id\":\"c1\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\": \"stop\"}]}\n\n"
	for _, in := range []string{cut + finished, providerStream, cut + "data: [DONE]\n\n"} {
		a := newAnswer("gpt", nil, false)
		if out, _ := a.chunk([]byte(in), true); strings.Contains(string(out), `"error"`) {
			t.Errorf("a finished stream got an error:\n%s", out)
		}
	}
}

// TestZeroUsageChunkIsReplacedByTheEstimate: a provider's usage chunk with no counts (recorded
// from Anthropic's resumed programmatic tool calls: input 0, output 0) is no usage; the answer
// is billed from an estimate, and the client that asked sees that estimate, once.
func TestZeroUsageChunkIsReplacedByTheEstimate(t *testing.T) {
	stream := "data: {\"id\":\"c7\",\"created\":1,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello there, friend\"},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"id\":\"c7\",\"created\":1,\"model\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0}}\n\n" +
		"data: [DONE]\n\n"
	m := &meter{}
	a := newAnswer("gpt", m, false)
	a.promptTokens = func() int64 { return 11 }
	out, _ := a.chunk([]byte(stream), true)
	if strings.Count(string(out), `"usage"`) != 1 || !strings.Contains(string(out), `"prompt_tokens":11,"completion_tokens":4`) {
		t.Fatalf("client got\n%s", out)
	}
}

// TestAnswerDoesNotPinChunks: once a chunk is answered, the stream's state must not keep it
// alive. The reused JSON decoder read each event in place and kept the last one, pinning its
// chunk (and the ext_proc message it came in) for as long as the stream stayed open: about 17
// KiB per open stream with 1,000 streams held mid-answer (the bench's streams scenario).
func TestAnswerDoesNotPinChunks(t *testing.T) {
	a := newAnswer("gpt-4o-mini", &meter{}, false)
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"fake-llama-3","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	chunk = append(chunk, make([]byte, 16<<10)...)[:len(chunk)] // a big buffer, as a burst's is
	gone := weak.Make(&chunk[0])
	if out, changed := a.chunk(chunk, false); !changed || !bytes.Contains(out, []byte(`"model":"gpt-4o-mini"`)) {
		t.Fatalf("chunk not rewritten: %s", out)
	}
	chunk = nil
	runtime.GC()
	runtime.GC()
	if gone.Value() != nil {
		t.Error("the answer still holds the chunk after answering it")
	}
	runtime.KeepAlive(a)
}
