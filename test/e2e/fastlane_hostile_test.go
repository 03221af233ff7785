package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/fakeupstream"
)

// The fast lane against a hostile client and a misbehaving provider: what it bills and answers
// must be what the chunk lane (routing.fast_lane: false) bills and answers, or the documented
// estimate's bound where the lanes estimate differently (docs/money.md).

// startLane is startFastLane with the lane chosen: fast or the chunk lane.
func startLane(t *testing.T, fast bool, opts fakeupstream.Options) (*gateway, *fakeupstream.Server) {
	t.Helper()
	if fast {
		return startFastLane(t, opts)
	}
	opts.APIKey = providerKey
	fake := fakeupstream.Start(t, opts)
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")+"routing: {fast_lane: false}\n", "FAKE_PROVIDER_KEY="+providerKey)
	return g, fake
}

// send posts body to path with the client's headers hdr.
func (g *gateway) send(ctx context.Context, key, path, body string, hdr http.Header) *http.Response {
	g.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.BaseURL+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header = hdr.Clone()
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

// TestFastLaneCutStreamEstimateBound: a client that asks for text in a script of many tokens a
// character (Egyptian hieroglyphs: a token per UTF-8 byte, 4 a character) and gets the stream
// cut before the provider's usage is billed on the fast lane at least a third of the tokens the
// tokenizer counts in what it got (the chunk lane's estimate): the estimate is one token per
// three bytes of text, and a token is never less than a byte. Counted in characters, the fast
// lane billed about a twelfth.
func TestFastLaneCutStreamEstimateBound(t *testing.T) {
	t.Parallel()
	g, fake := startFastLane(t, fakeupstream.Options{ChunkDelay: 2 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	words := strings.Repeat("𓀀𓀁𓀂𓀃𓀄𓀅𓀆𓀇 ", 40) // the fake echoes the prompt, a word an event
	fake.CutStreamAfter(30)                  // about 28 words passed, then the connection dropped
	resp := g.chat(ctx, g.newKey("acme"), `{"model":"priced","stream":true,"messages":[{"role":"user","content":"`+words+`"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got strings.Builder
	for _, ev := range sseEvents(string(raw)) {
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if json.Unmarshal([]byte(ev), &c) == nil && len(c.Choices) > 0 {
			got.WriteString(c.Choices[0].Delta.Content)
		}
	}
	tokens := int64(billing.CountText(got.String()))
	r := g.waitRecords("acme", 1)[0]
	t.Logf("a cut stream of %d characters, %d bytes, %d tokens was billed %d completion tokens",
		utf8.RuneCountInString(got.String()), got.Len(), tokens, r.CompletionTokens)
	if tokens < 500 {
		t.Fatalf("the client got %q: the test needs most of the stream", got.String())
	}
	if !r.Estimated || 3*r.CompletionTokens < tokens {
		t.Errorf("the fast lane billed a cut stream %+v, under a third of the %d tokens the client got", r, tokens)
	}
}

// TestFastLaneEnvoyRestartBillsWhatPassed: a fast-lane stream whose Envoy dies mid-answer is
// billed what its answer log's periodic entries said passed (as the chunk lane bills what its
// chunks passed), not its prompt alone.
func TestFastLaneEnvoyRestartBillsWhatPassed(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	g, _ := startFastLane(t, fakeupstream.Options{Hold: hold, HoldAfter: 40})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	prompt := strings.Repeat("word ", 60) // echoed: 40 events of about 5 characters pass
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := g.chat(cctx, g.newKey("acme"), `{"model":"priced","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`)
	sc := bufio.NewScanner(resp.Body)
	var passed int
	for passed < 40 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			passed++
		}
	}
	time.Sleep(3 * time.Second) // several periodic entries of the answer log (every 0.5 s)
	if err := syscall.Kill(g.EnvoyPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := g.waitRecords("acme", 1)[0]
	// 40 events of "word " (5 characters): 200 characters, at least 66 tokens however counted.
	if r.CompletionTokens < 60 || !r.Estimated {
		t.Fatalf("a fast-lane stream cut with its Envoy after %d events was billed %+v: want an estimate of what passed", passed, r)
	}
}

// TestFastLaneClientCannotChooseTheLane: a client's own x-tollway-lane (fast or deferred, any
// case, repeated) and other internal headers are removed before the route is chosen: a request
// that must not take the fast lane (the client asked for the usage chunk, a chain with a
// translated provider, a whole answer, embeddings) gets the chunk lane's answer and exact bill,
// and one that takes it (a chain of two OpenAI-shaped models) is billed to its true provider.
func TestFastLaneClientCannotChooseTheLane(t *testing.T) {
	t.Parallel()
	// A pause between chunks, so that Envoy reads them one by one: the chunk lane's messages show.
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 5 * time.Millisecond})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: claude, type: anthropic, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - {id: priced, providers: [{provider: fake, model: fake-priced}], pricing: {prompt: "0.000001", completion: "0.000002"}}
  - {id: twin, providers: [{provider: fake, model: fake-twin}], pricing: {prompt: "0.000001", completion: "0.000002"}}
  - {id: haiku, providers: [{provider: claude, model: claude-haiku}], pricing: {prompt: "0.000001", completion: "0.000005"}}
  - {id: emb, output_modalities: [embeddings], providers: [{provider: fake, model: text-embedding-3-small}], pricing: {prompt: "0.00000002"}}
routes:
  - {name: mixed, rule: priority_fallback, models: [haiku, priced]}
  - {name: openai, rule: priority_fallback, models: [twin, priced]}
routing: {fast_lane: true}
`, fake.URL(), fake.AnthropicURL()), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	hostile := []http.Header{
		{"X-Tollway-Lane": {"fast"}},
		{"X-Tollway-Lane": {"FAST", "fast"}, "X-Tollway-Served": {"claude/haiku"}, "X-Tollway-Attempts": {"9"}},
		{"X-Tollway-Lane": {"deferred"}, "X-Tollway-Cluster": {"priced"}},
	}
	hi := `"messages":[{"role":"user","content":"one two three four five six"}]`
	cases := []struct {
		name, path, body string
		model, provider  string
		chunkLane        bool // the answer must go through ext_proc chunk by chunk
		check            func(t *testing.T, raw string)
	}{
		{"usage asked", "/chat/completions", `{"model":"priced","stream":true,"stream_options":{"include_usage":true},` + hi + `}`, "priced", "fake", true,
			func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"choices":[],"usage":{"prompt_tokens"`) {
					t.Errorf("the client asked for the usage chunk and got none: %s", raw)
				}
			}},
		{"translated chain", "/chat/completions", `{"model":"route:mixed","stream":true,` + hi + `}`, "haiku", "claude", true,
			func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"object":"chat.completion.chunk"`) || !strings.Contains(raw, `"model":"haiku"`) || !strings.Contains(raw, "[DONE]") {
					t.Errorf("a translated stream came untranslated: %s", raw)
				}
			}},
		{"whole answer", "/chat/completions", `{"model":"priced",` + hi + `}`, "priced", "fake", false,
			func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"object":"chat.completion"`) || !strings.Contains(raw, `"model":"priced"`) {
					t.Errorf("whole answer: %s", raw)
				}
			}},
		{"embeddings", "/embeddings", `{"model":"emb","input":"one two three"}`, "emb", "fake", false,
			func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"embedding"`) || !strings.Contains(raw, `"model":"emb"`) {
					t.Errorf("embeddings: %s", raw)
				}
			}},
		{"fast chain", "/chat/completions", `{"model":"route:openai","stream":true,` + hi + `}`, "twin", "fake", false,
			func(t *testing.T, raw string) {
				if strings.Contains(raw, `"usage":{`) || !strings.Contains(raw, `"model":"twin"`) {
					t.Errorf("fast-lane stream: %s", raw)
				}
			}},
	}
	n := 0
	for _, c := range cases {
		for i, h := range hostile {
			before := g.extProcMessages()
			resp := g.send(ctx, key, c.path, c.body, h)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			msgs := g.extProcMessages() - before
			if resp.StatusCode != 200 {
				t.Fatalf("%s, headers %d: %d %s", c.name, i, resp.StatusCode, raw)
			}
			if p := resp.Header.Get("x-tollway-provider"); p != c.provider {
				t.Errorf("%s, headers %d: answered by %q, want %q", c.name, i, p, c.provider)
			}
			if c.chunkLane && msgs < 8 || !c.chunkLane && strings.Contains(c.body, `"stream":true`) && msgs > 6 {
				t.Errorf("%s, headers %d: %v ext_proc messages: the answer took the wrong lane", c.name, i, msgs)
			}
			c.check(t, string(raw))
			n++
			recs := g.waitRecords("acme", n)
			r := recs[0] // the newest first
			if r.Estimated || r.Model != c.model || r.Provider != c.provider || !r.Cost.IsPositive() {
				t.Errorf("%s, headers %d: record %+v, want %s by %s, exact", c.name, i, r, c.model, c.provider)
			}
		}
	}
}

// TestFastLaneOddProviderAnswersMatchTheChunkLane: a provider answering a stream with a whole
// JSON body, with no event at all, with an error event mid-stream, with its usage chunk after
// [DONE], or with usage counts no int64 holds gives the client the same bytes and the account
// the same bill on both lanes (an estimate by each lane's rule). A count no int64 holds was read
// by the stream meter as a double: the usage chunk was dropped and its prompt billed 0 as exact,
// where the chunk lane's decoder refuses the usage, passes the chunk and estimates.
func TestFastLaneOddProviderAnswersMatchTheChunkLane(t *testing.T) {
	t.Parallel()
	chunk := func(delta, finish string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"fake-priced","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	usage := func(p, c string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"fake-priced","choices":[],"usage":{"prompt_tokens":` + p + `,"completion_tokens":` + c + `}}` + "\n\n"
	}
	const done = "data: [DONE]\n\n"
	answers := []struct{ name, ctype, body string }{
		{"whole JSON", "application/json", `{"id":"c1","object":"chat.completion","created":1,"model":"fake-priced","choices":[{"index":0,"message":{"role":"assistant","content":"a whole answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`},
		{"no event", "text/event-stream", ""},
		{"error mid-stream", "text/event-stream", chunk(`{"role":"assistant","content":"Hel"}`, "null") + `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n"},
		{"usage after done", "text/event-stream", chunk(`{"content":"Hello there"}`, "null") + chunk(`{}`, `"stop"`) + done + usage("12", "4")},
		{"usage too large", "text/event-stream", chunk(`{"content":"Hello there"}`, "null") + chunk(`{}`, `"stop"`) + usage("100000000000000000000", "4") + done},
	}
	type result struct {
		client string
		rec    usageRecord
	}
	got := map[bool][]result{}
	for _, fast := range []bool{true, false} {
		g, fake := startLane(t, fast, fakeupstream.Options{})
		ctx := context.Background()
		if err := g.NewAccount(ctx, "acme", "25"); err != nil {
			t.Fatal(err)
		}
		key := g.newKey("acme")
		for i, a := range answers {
			fake.Script(fakeupstream.Fault{ContentType: a.ctype, Replay: []byte(a.body)})
			resp := g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			client := strings.ReplaceAll(string(raw), resp.Header.Get("x-request-id"), "<id>")
			got[fast] = append(got[fast], result{client, g.waitRecords("acme", i+1)[0]})
		}
	}
	for i, a := range answers {
		f, c := got[true][i], got[false][i]
		if f.client != c.client {
			t.Errorf("%s: the client got\n%s\non the fast lane, and\n%s\non the chunk lane", a.name, f.client, c.client)
		}
		// An exact bill is the same to the digit; an estimate is the prompt counted and the
		// completion estimated by each lane's rule (bytes on the fast lane, at least a third).
		same := f.rec.Cost.Equal(c.rec.Cost) && f.rec.CompletionTokens == c.rec.CompletionTokens
		if c.rec.Estimated {
			same = 3*f.rec.CompletionTokens >= c.rec.CompletionTokens
		}
		if !same || f.rec.Estimated != c.rec.Estimated || f.rec.PromptTokens != c.rec.PromptTokens {
			t.Errorf("%s: billed %+v on the fast lane, %+v on the chunk lane", a.name, f.rec, c.rec)
		}
	}
}
