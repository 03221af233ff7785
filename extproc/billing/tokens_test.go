package billing

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Expected counts come from OpenAI's tiktoken 0.14 (o200k_base) run on the same embedded BPE file.
func TestCountTextKnown(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{"hello world", 2},
		{"Hello, world!", 4},
		{"tiktoken is great!", 6},
		{"antidisestablishmentarianism", 6},
		{"2 + 2 = 4", 7},
		{"お誕生日おめでとう", 8},
		{"<|endoftext|>", 7}, // special-token text in a prompt is plain text
		{"", 0},
		{" ", 1},
		{"  leading and trailing  ", 5},
		{"line one\nline two\n\n\tindented", 9},
		{"Привет, как дела?", 6},
		{"https://example.com/a/b?c=1&d=2", 14},
		{`{"type":"object","properties":{"city":{"type":"string"}}}`, 14},
		{"😀👍🏽", 4},
	} {
		if got := CountText(tc.text); got != tc.want {
			t.Errorf("CountText(%q) = %d, want %d", tc.text, got, tc.want)
		}
	}
}

// Long texts go through eachChunk; cuts before a space must not change the count.
func TestCountTextLongIsExact(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want int
	}{
		{"english", strings.Repeat("The quick brown fox, naïve café owner — jumps over 13 lazy dogs; price: $0.00000015/token.  Tabs\tand\nnewlines.\n\n", 400), 13600},
		{"russian", strings.Repeat("Съешь же ещё этих мягких французских булок, да выпей чаю. ", 300), 5701},
		// No space at all: cut every maxRun bytes; these happen to stay exact.
		{"cjk run", strings.Repeat("漢", 20000), 20000},
		{"one letter", strings.Repeat("a", 50000), 6250},
	} {
		if len(tc.text) <= chunkSize {
			t.Fatalf("%s: %d bytes does not exercise chunking", tc.name, len(tc.text))
		}
		if got := CountText(tc.text); got != tc.want {
			t.Errorf("%s: CountText = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A forced cut may cost a token: the count stays close to tiktoken's 41.
func TestCountTextWhitespaceRun(t *testing.T) {
	got := CountText(strings.Repeat(" ", 5000) + "word")
	if got < 41 || got > 41+5000/maxRun+1 {
		t.Errorf("CountText(5000 spaces + word) = %d, want 41 plus at most a token per cut", got)
	}
}

func TestEachChunkCoversText(t *testing.T) {
	for _, s := range []string{
		"",
		"short",
		strings.Repeat("word ", 5000),
		strings.Repeat("漢字", 3000),
		strings.Repeat("x", 1000) + " " + strings.Repeat("é", 700),
	} {
		var parts []string
		eachChunk(s, func(c string) { parts = append(parts, c) })
		if strings.Join(parts, "") != s {
			t.Fatalf("chunks of a %d-byte text do not rebuild it", len(s))
		}
		for _, p := range parts {
			if len(p) > chunkSize+maxRun+4 {
				t.Errorf("chunk of %d bytes exceeds the bound", len(p))
			}
			if !utf8ValidPrefix(p) {
				t.Errorf("chunk %q splits a character", p[:min(len(p), 20)])
			}
		}
	}
}

func utf8ValidPrefix(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// OpenAI's cookbook example, which counts 124 prompt tokens for gpt-4o (o200k_base).
func TestCountChatPromptCookbook(t *testing.T) {
	body := `{"model":"gpt-4o","messages":[
	 {"role":"system","content":"You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
	 {"role":"system","name":"example_user","content":"New synergies will help drive top-line growth."},
	 {"role":"system","name":"example_assistant","content":"Things working well together will increase revenue."},
	 {"role":"system","name":"example_user","content":"Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
	 {"role":"system","name":"example_assistant","content":"Let's talk later when we're less busy about how to do better."},
	 {"role":"user","content":"This late pivot means we don't have time to boil the ocean for the client deliverable."}]}`
	got, err := CountChatPrompt([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got != 124 {
		t.Errorf("CountChatPrompt(cookbook example) = %d, want 124", got)
	}
}

const toolBody = `{
  "model": "gpt-4o-mini",
  "messages": [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": [
      {"type": "text", "text": "What is the weather in Paris? Here is a photo."},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"}}
    ]},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}
  ],
  "tools": [
    {"type": "function", "function": {
      "name": "get_weather",
      "description": "Current weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}
  ]
}`

func TestCountChatPromptTools(t *testing.T) {
	got, err := CountChatPrompt([]byte(toolBody))
	if err != nil {
		t.Fatal(err)
	}
	// Built from its parts, to pin down what is counted.
	want := tokensReply +
		tokensPerMessage + CountText("system") + CountText("You are a weather bot.") +
		tokensPerMessage + CountText("user") + CountText("What is the weather in Paris? Here is a photo.") + tokensPerImage +
		tokensPerMessage + CountText("assistant") + CountText("get_weather") + CountText(`{"city":"Paris"}`) +
		tokensPerMessage + CountText("tool") + CountText(`{"temp_c": 21}`) +
		CountText(`{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`)
	if got != want {
		t.Errorf("CountChatPrompt = %d, want %d", got, want)
	}
	if got != 177 { // the same sum by OpenAI's tiktoken, pinned so a change in any part shows
		t.Errorf("CountChatPrompt = %d, want 177", got)
	}
	if again, _ := CountChatPrompt([]byte(toolBody)); again != got {
		t.Errorf("second count %d differs from first %d", again, got)
	}
}

func TestCountChatPromptErrors(t *testing.T) {
	for _, body := range []string{
		``,
		`not json`,
		`{"messages": {"role": "user"}}`,
		`{"messages": [{"role": "user", "content": 42}]}`,
		`{"messages": [{"role": "user", "content": [{"type": 1}]}]}`,
	} {
		if _, err := CountChatPrompt([]byte(body)); err == nil {
			t.Errorf("CountChatPrompt(%q) = nil error, want one", body)
		}
	}
	n, err := CountChatPrompt([]byte(`{"messages": []}`))
	if err != nil || n != tokensReply {
		t.Errorf("empty messages = %d, %v; want %d, nil", n, err, tokensReply)
	}
}

func TestCountConcurrent(t *testing.T) {
	texts := []string{"hello world", strings.Repeat("Съешь же ещё этих булок. ", 500), strings.Repeat("漢", 3000)}
	want := make([]int, len(texts))
	for i, s := range texts {
		want[i] = CountText(s)
	}
	wantChat, _ := CountChatPrompt([]byte(toolBody))
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 32 {
		wg.Go(func() {
			i := g % len(texts)
			if got := CountText(texts[i]); got != want[i] {
				errs <- fmt.Sprintf("text %d: %d, want %d", i, got, want[i])
			}
			if got, err := CountChatPrompt([]byte(toolBody)); err != nil || got != wantChat {
				errs <- fmt.Sprintf("chat: %d, %v; want %d", got, err, wantChat)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func BenchmarkCountChatPrompt(b *testing.B) {
	Warm()
	body := []byte(toolBody)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CountChatPrompt(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPromptBoundIsAnUpperBound: the hold's bound is never below the tokenizer's count.
func TestPromptBoundIsAnUpperBound(t *testing.T) {
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"hello world"}]}`,
		`{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":[{"type":"text","text":"日本語のテキスト、絵文字 🎉 and code: func main() {}"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"c","content":"{\"temp\":21}"}]}`,
	} {
		exact, err := CountChatPrompt([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		bound, err := PromptBound([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if bound < exact || exact <= 0 {
			t.Fatalf("bound %d < count %d for %s", bound, exact, body)
		}
	}
}

func BenchmarkPromptBound(b *testing.B) {
	body := []byte(`{"messages":[{"role":"system","content":"You are a helpful assistant that answers briefly."},{"role":"user","content":"What is the weather like in Paris today, and should I take an umbrella?"}]}`)
	for b.Loop() {
		if _, err := PromptBound(body); err != nil {
			b.Fatal(err)
		}
	}
}
