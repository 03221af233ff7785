package chat

import (
	"strings"
	"testing"
)

// largeChatBody is a chat request with a ~30 MiB base64 image, the size e2e TestLargeBodyPasses sends.
func largeChatBody() []byte {
	img := strings.Repeat("A", 30<<20)
	return []byte(`{"model":"gpt","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}}]}]}`)
}

// BenchmarkLargeBody is the router-level work on a 30 MiB body: validate it, bound the prompt
// (in the same pass) and plan.
func BenchmarkLargeBody(b *testing.B) {
	rt := testRuntime()
	body := largeChatBody()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, e := planChat(rt, body); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkLargeBodyAttempt is the per-attempt rewrite of the same body.
func BenchmarkLargeBodyAttempt(b *testing.B) {
	rt := testRuntime()
	body := largeChatBody()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := AttemptRequest(rt, body, rt.Models["gpt"], rt.Providers["openai"]); err != nil {
			b.Fatal(err)
		}
	}
}
