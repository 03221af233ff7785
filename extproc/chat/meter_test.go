package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const sseStream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello \"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\"}}]}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,\"total_tokens\":19,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n" +
	"data: [DONE]\n\n"

// feed sends s to a metered answer in pieces of n bytes, as Envoy's body chunks would arrive,
// and returns what the client gets.
func feed(m *meter, s string, n int, dropUsage bool) string {
	a := newAnswer("gpt", m, dropUsage)
	var out strings.Builder
	for i := 0; i < len(s); i += n {
		end := min(i+n, len(s))
		b, _ := a.chunk([]byte(s[i:end]), end == len(s))
		out.Write(b)
	}
	return out.String()
}

func TestMeterStreamPassThrough(t *testing.T) {
	for _, n := range []int{1, 7, 64, len(sseStream)} {
		m := &meter{}
		if got := feed(m, sseStream, n, false); got != sseStream {
			t.Fatalf("chunk size %d: client stream changed:\n%q", n, got)
		}
		u, est := m.result(func() int64 { return 99 })
		if est || u.PromptTokens != 12 || u.CompletionTokens != 7 || u.CachedTokens != 4 {
			t.Fatalf("chunk size %d: usage %+v estimated=%v", n, u, est)
		}
	}
}

func TestMeterDropsUsageTheClientDidNotAskFor(t *testing.T) {
	for _, n := range []int{1, 5, 33, len(sseStream)} {
		m := &meter{}
		got := feed(m, sseStream, n, true)
		if strings.Contains(got, "prompt_tokens") {
			t.Fatalf("chunk size %d: usage chunk reached the client", n)
		}
		if !strings.HasSuffix(got, "data: [DONE]\n\n") || !strings.Contains(got, "Hello ") || strings.Count(got, "data: ") != 5 {
			t.Fatalf("chunk size %d: other events damaged:\n%q", n, got)
		}
		if u, est := m.result(func() int64 { return 0 }); est || u.CompletionTokens != 7 {
			t.Fatalf("chunk size %d: usage lost: %+v", n, u)
		}
	}
}

func TestMeterEstimatesCutStreams(t *testing.T) {
	cut := sseStream[:strings.Index(sseStream, "data: {\"choices\":[]")]
	m := &meter{}
	feed(m, cut, 10, false)
	u, est := m.result(func() int64 { return 12 })
	if !est || u.PromptTokens != 12 {
		t.Fatalf("usage %+v estimated=%v", u, est)
	}
	// "Hello " + "get_weather" + "{\"city\":" are what was sent: a real token count, not zero
	if u.CompletionTokens < 3 || u.CompletionTokens > 12 {
		t.Fatalf("completion estimate %d for %q", u.CompletionTokens, m.text.String())
	}
}

func TestMeterBody(t *testing.T) {
	m := &meter{}
	m.body([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"}}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
	if u, est := m.result(func() int64 { return 0 }); est || u.PromptTokens != 3 || u.CompletionTokens != 2 {
		t.Fatalf("usage %+v", u)
	}
	m = &meter{}
	m.body([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"}}]}`))
	if u, est := m.result(func() int64 { return 5 }); !est || u.PromptTokens != 5 || u.CompletionTokens != 2 {
		t.Fatalf("no usage: want estimate, got %+v est=%v", u, est)
	}
}

// TestUsageWithWhitespace: an OpenAI-compatible server that writes "usage": {...} (Python's
// json.dumps does) is billed from its usage, and its usage-only chunk is recognised.
func TestUsageWithWhitespace(t *testing.T) {
	for _, ev := range []string{
		`{"id":"x","choices":[],"usage": {"prompt_tokens":3,"completion_tokens":4}}`,
		`{"id":"x","choices":[],"usage" :` + "\n\t" + `{"prompt_tokens":3,"completion_tokens":4}}`,
	} {
		var m meter
		if !m.event([]byte(ev)) || m.usage == nil || m.usage.CompletionTokens != 4 {
			t.Errorf("%s: usage-only %v, usage %+v", ev, isUsageOnly([]byte(ev)), m.usage)
		}
	}
	if hasUsageObject([]byte(`{"usage":null}`)) || hasUsageObject([]byte(`{"x":"usage"}`)) {
		t.Error("a null or absent usage is not a usage object")
	}
}

// TestStorableUsage: a provider's usage is bounded to what a usage record holds before it is
// billed, so the ledger and the store agree (a negative count used to be billed as 0 and then
// refused by the store, making the request free after a restart).
func TestStorableUsage(t *testing.T) {
	got := storable(ir.Usage{PromptTokens: -4, CompletionTokens: 1 << 40, CachedTokens: 9})
	if got.PromptTokens != 0 || got.CompletionTokens != store.MaxTokens || got.CachedTokens != 0 {
		t.Errorf("storable = %+v", got)
	}
	got = storable(ir.Usage{PromptTokens: 10, CachedTokens: 20, CompletionTokens: 5})
	if got.PromptTokens != 10 || got.CachedTokens != 10 || got.CompletionTokens != 5 {
		t.Errorf("storable = %+v", got)
	}
}

// TestMeterHoldsALongStreamBounded: a stream's content events are kept for an estimate, but
// not raw for the whole answer. Kept raw, a 2,000-token answer held about 1 MiB per open stream
// (1,000 streams mid-answer: 99 MB of Tollway's heap in the bench's streams scenario); folded
// into their text as they pile up, the meter holds a bounded window plus the text, and the
// estimate of a cut stream is the same count of the same text.
func TestMeterHoldsALongStreamBounded(t *testing.T) {
	const events = 2000
	var stream, text strings.Builder
	for i := range events {
		word := fmt.Sprintf("w%d ", i)
		text.WriteString(word)
		fmt.Fprintf(&stream, `data: {"id":"chatcmpl-1234567890abcdef","object":"chat.completion.chunk","created":1764000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0123456789","choices":[{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n", word)
	}
	m := &meter{}
	feed(m, stream.String(), 4096, false) // cut: no usage, no [DONE]
	if held := cap(m.events) + m.text.Cap(); held > 64<<10 {
		t.Errorf("the meter holds %d KiB for a %d KiB stream: want at most 64 KiB", held>>10, stream.Len()>>10)
	}
	u, est := m.result(func() int64 { return 7 })
	if want := int64(billing.CountText(text.String())); !est || u.CompletionTokens != want || u.PromptTokens != 7 {
		t.Errorf("estimate %+v (estimated %v), want %d completion tokens", u, est, want)
	}
	// Once the provider's usage has arrived, no estimate needs the text: nothing more is kept.
	m = &meter{}
	m.event([]byte(`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	m.event([]byte(`{"choices":[{"index":0,"delta":{"content":"b"}}]}`))
	if len(m.events) != 0 || m.text.Len() != 0 {
		t.Errorf("after the usage the meter kept %d bytes of events and %q", len(m.events), m.text.String())
	}
}

// BenchmarkMeterLongStream is a metered 500-chunk stream that ends with the provider's usage
// (the common case: no estimate needed), one chunk per ext_proc message; ns/op is per stream.
func BenchmarkMeterLongStream(b *testing.B) {
	var chunks [][]byte
	for i := range 500 {
		chunks = append(chunks, fmt.Appendf(nil, `data: {"id":"chatcmpl-1234567890abcdef","object":"chat.completion.chunk","created":1764000000,"model":"fake-llama-3","system_fingerprint":"fp_0123456789","choices":[{"index":0,"delta":{"content":"w%d "},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n", i))
	}
	chunks = append(chunks, []byte(`data: {"id":"chatcmpl-1234567890abcdef","object":"chat.completion.chunk","created":1764000000,"model":"fake-llama-3","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":500,"total_tokens":512}}`+"\n\n"), []byte("data: [DONE]\n\n"))
	for b.Loop() {
		a := newAnswer("gpt-4o-mini", &meter{}, false)
		for i, c := range chunks {
			a.chunk(c, i == len(chunks)-1)
		}
	}
}

// TestMeterCountsReasoning: a reasoning model's stream cut before its answer's text started is
// estimated from the reasoning that passed (reasoning_content: DeepSeek, vLLM; reasoning:
// OpenRouter, Ollama), counted once when a server sends it under both names; a whole answer's
// message reasoning too; and the provider's usage, when it comes, is still the bill.
func TestMeterCountsReasoning(t *testing.T) {
	thought := strings.Repeat("Let me weigh the options carefully. ", 20)
	want := int64(billing.CountText(thought))
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for name, delta := range map[string]func(string) string{
		"reasoning_content": func(p string) string { return `{"content":null,"reasoning_content":` + q(p) + `}` },
		"reasoning": func(p string) string {
			return `{"content":"","reasoning":` + q(p) + `,"reasoning_details":[{"type":"reasoning.text","text":` + q(p) + `,"index":0}]}`
		},
		"both names": func(p string) string { return `{"reasoning_content":` + q(p) + `,"reasoning":` + q(p) + `}` },
	} {
		var stream strings.Builder
		for _, p := range strings.SplitAfter(thought, " ") {
			if p != "" {
				fmt.Fprintf(&stream, "data: {\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":null}]}\n\n", delta(p))
			}
		}
		m := &meter{}
		feed(m, stream.String(), 37, false) // cut before the answer's text: no usage, no [DONE]
		u, est := m.result(func() int64 { return 9 })
		if !est || u.CompletionTokens != want {
			t.Errorf("%s: a stream cut during reasoning was estimated %+v (estimated %v), want %d completion tokens", name, u, est, want)
		}
		m = &meter{}
		feed(m, stream.String()+sseStream, 64, false)
		if u, est := m.result(func() int64 { return 9 }); est || u.CompletionTokens != 7 {
			t.Errorf("%s: with the provider's usage the bill is %+v (estimated %v), want its 7 completion tokens", name, u, est)
		}
	}
	m := &meter{}
	m.body([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"","reasoning_content":` + q(thought) + `}}]}`))
	if u, est := m.result(func() int64 { return 5 }); !est || u.CompletionTokens != want {
		t.Errorf("a whole answer's reasoning without usage was estimated %+v, want %d completion tokens", u, want)
	}
}
