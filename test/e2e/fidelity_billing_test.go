package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
)

// Money fidelity on answers as providers really write them (issue 26 items 11 and 12), end to
// end through the real Envoy: the fakes answer as the recorded answers show, and each bill is
// checked in its usage record, tokens and cost to the digit.

// clientUsage is the usage an OpenAI client reads, with the gateway's other_models.
type clientUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
		ImageTokens     int64 `json:"image_tokens"`
	} `json:"completion_tokens_details"`
	OtherModels []struct {
		Model            string `json:"model"`
		PromptTokens     int64  `json:"prompt_tokens"`
		CompletionTokens int64  `json:"completion_tokens"`
	} `json:"other_models"`
}

// chatUsageOf sends body and returns the usage the client got: the answer's, or the stream's
// usage chunk.
func chatUsageOf(t *testing.T, g *gateway, key, body string) (clientUsage, string) {
	t.Helper()
	resp := g.chat(context.Background(), key, body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", body, resp.StatusCode, raw)
	}
	var u struct{ Usage *clientUsage }
	if !strings.Contains(body, `"stream":true`) {
		if err := json.Unmarshal(raw, &u); err != nil || u.Usage == nil {
			t.Fatalf("answer without usage: %s", raw)
		}
		return *u.Usage, resp.Header.Get("x-request-id")
	}
	for _, d := range sseEvents(string(raw)) {
		if d != "[DONE]" && json.Unmarshal([]byte(d), &u) == nil && u.Usage != nil {
			return *u.Usage, resp.Header.Get("x-request-id")
		}
	}
	t.Fatalf("stream without a usage chunk: %s", raw)
	return clientUsage{}, ""
}

// recordOf waits for the usage record of account whose id has the part id: a request's id
// (the record's is "<request id>.<suffix>") or a task's ("<request id>.<task id>").
func recordOf(t *testing.T, g *gateway, account, id string) usageRecord {
	t.Helper()
	var r usageRecord
	waitFor(t, "the usage record of "+id, 10*time.Second, func() bool {
		for _, c := range g.records("account=" + account) {
			if id != "" && (strings.HasPrefix(c.RequestID, id+".") || strings.HasSuffix(c.RequestID, "."+id)) {
				r = c
				return true
			}
		}
		return false
	})
	return r
}

// TestAnthropicIterationsBilled: Anthropic answers with usage.iterations, whole and streamed.
// Server-side compaction: the top-level counts are the last iteration's only, and the bill is
// the sum of both iterations (55,096 cache reads among them). An advisor on a model the
// catalog has: the executor's iterations at the model's prices, the advisor's at the catalog
// price of the model serving claude-opus-4-8 on this provider; one on a model the catalog does
// not have: a WARN naming it, not billed. The client sees the counts it is billed for.
func TestAnthropicIterationsBilled(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: claude, type: anthropic, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: sonnet
    providers: [{provider: claude, model: claude-sonnet-5}]
    pricing: {prompt: "0.000003", completion: "0.000015", input_cache_read: "0.0000003"}
  - id: opus
    providers: [{provider: claude, model: claude-opus-4-8}]
    pricing: {prompt: "0.000005", completion: "0.000025", input_cache_read: "0.0000005"}
`, fake.AnthropicURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	d := decimal.RequireFromString
	n := decimal.NewFromInt
	spent := decimal.Zero
	for _, stream := range []bool{false, true} {
		for _, c := range []struct {
			prompt string
			// want: what the client sees and the record holds; cost: the bill.
			prompt1, completion, cached int64
			other                       string
			otherPrompt, otherOut       int64
			cost                        func(answer int64) decimal.Decimal
		}{
			{prompt: "hello " + fakeupstream.AnthropicCompactionTrigger,
				// compaction: 2 in + 55,096 cached, 83 out; message: 181 in, the answer out.
				prompt1: 2 + fakeupstream.AnthropicCompactionCacheRead + fakeupstream.AnthropicCompactedInput, completion: fakeupstream.AnthropicCompactionOutput,
				cached: fakeupstream.AnthropicCompactionCacheRead,
				cost: func(answer int64) decimal.Decimal {
					return d("0.000003").Mul(n(2 + fakeupstream.AnthropicCompactedInput)).Add(d("0.0000003").Mul(n(fakeupstream.AnthropicCompactionCacheRead))).
						Add(d("0.000015").Mul(n(fakeupstream.AnthropicCompactionOutput + answer)))
				}},
			{prompt: "hello " + fakeupstream.AnthropicAdvisorTrigger + "claude-opus-4-8",
				prompt1: 2 + fakeupstream.AnthropicAdvisorResumeInput, completion: fakeupstream.AnthropicAdvisorCallOutput,
				other: "claude-opus-4-8", otherPrompt: fakeupstream.AnthropicAdvisorInput, otherOut: fakeupstream.AnthropicAdvisorOutput,
				cost: func(answer int64) decimal.Decimal {
					return d("0.000003").Mul(n(2 + fakeupstream.AnthropicAdvisorResumeInput)).Add(d("0.000015").Mul(n(fakeupstream.AnthropicAdvisorCallOutput + answer))).
						Add(d("0.000005").Mul(n(fakeupstream.AnthropicAdvisorInput))).Add(d("0.000025").Mul(n(fakeupstream.AnthropicAdvisorOutput)))
				}},
			{prompt: "hello " + fakeupstream.AnthropicAdvisorTrigger + "claude-mystery-9",
				prompt1: 2 + fakeupstream.AnthropicAdvisorResumeInput, completion: fakeupstream.AnthropicAdvisorCallOutput,
				other: "claude-mystery-9", otherPrompt: fakeupstream.AnthropicAdvisorInput, otherOut: fakeupstream.AnthropicAdvisorOutput,
				cost: func(answer int64) decimal.Decimal {
					return d("0.000003").Mul(n(2 + fakeupstream.AnthropicAdvisorResumeInput)).Add(d("0.000015").Mul(n(fakeupstream.AnthropicAdvisorCallOutput + answer)))
				}},
		} {
			name := fmt.Sprintf("%s (stream %v)", c.prompt, stream)
			body := `{"model":"sonnet","messages":[{"role":"user","content":"` + c.prompt + `"}]}`
			if stream {
				body = `{"model":"sonnet","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + c.prompt + `"}]}`
			}
			u, rid := chatUsageOf(t, g, key, body)
			answer := words("Hello from fake/claude-sonnet-5: " + c.prompt) // the fake's answer, a token a word
			completion := c.completion + answer
			if u.PromptTokens != c.prompt1 || u.CompletionTokens != completion || u.PromptTokensDetails.CachedTokens != c.cached {
				t.Fatalf("%s: usage %+v, want %d/%d/%d", name, u, c.prompt1, completion, c.cached)
			}
			if c.other != "" && (len(u.OtherModels) != 1 || u.OtherModels[0].Model != c.other || u.OtherModels[0].PromptTokens != c.otherPrompt || u.OtherModels[0].CompletionTokens != c.otherOut) {
				t.Fatalf("%s: other models %+v", name, u.OtherModels)
			}
			r, want := recordOf(t, g, "acme", rid), c.cost(answer)
			if r.Model != "sonnet" || r.Estimated || r.PromptTokens != c.prompt1 || r.CompletionTokens != completion || r.CachedTokens != c.cached || !r.Cost.Equal(want) {
				t.Fatalf("%s: record %+v, want cost %s", name, r, want)
			}
			spent = spent.Add(want)
		}
	}
	waitFor(t, "the debits", 10*time.Second, func() bool { return g.balance("acme").Equal(decimal.NewFromInt(10).Sub(spent)) })
	if !strings.Contains(g.logs.String(), "usage on a model the catalog does not price is not billed") || !strings.Contains(g.logs.String(), "model=claude-mystery-9") {
		t.Fatal("the advisor's usage on a model the catalog lacks was not logged")
	}
}

// TestGeminiImageTokensBilled: a Gemini image answer whose candidatesTokensDetails lists only
// the IMAGE entry though text and thinking came back (as Gemini writes it) is billed every
// output token: on a model with an image price, the text and thinking at the completion price
// and the image per image; on a model without one, all of it at the completion price. Chat
// and POST /v1/images alike.
func TestGeminiImageTokensBilled(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: gem, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: nb-pro
    family: I3
    variant: pro
    providers: [{provider: gem, model: gemini-3-pro-image-preview}]
    pricing: {request: "0.02", image: "0.134", prompt: "0.000002", completion: "0.000012"}
  - id: nb-pro-tokens
    family: I3
    variant: pro
    providers: [{provider: gem, model: gemini-3-pro-image-preview}]
    pricing: {prompt: "0.000002", completion: "0.00012"}
`, fake.GeminiURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	d := decimal.RequireFromString
	// The fake: "a fox" is 2 prompt tokens; it writes "Here is your image: a fox" (6), thinks 37
	// and draws one 1,120-token image; it lists only the IMAGE entry.
	const prompt, text, thoughts, image = 2, 6, 37, 1120
	costs := map[string]decimal.Decimal{
		"nb-pro":        d("0.02").Add(d("0.134")).Add(d("0.000002").Mul(decimal.NewFromInt(prompt))).Add(d("0.000012").Mul(decimal.NewFromInt(text + thoughts))),
		"nb-pro-tokens": d("0.000002").Mul(decimal.NewFromInt(prompt)).Add(d("0.00012").Mul(decimal.NewFromInt(text + thoughts + image))),
	}
	spent := decimal.Zero
	for _, model := range []string{"nb-pro", "nb-pro-tokens"} {
		u, rid := chatUsageOf(t, g, key, `{"model":"`+model+`","messages":[{"role":"user","content":"a fox"}]}`)
		if u.PromptTokens != prompt || u.CompletionTokens != text+thoughts+image || u.CompletionTokensDetails.ImageTokens != image || u.CompletionTokensDetails.ReasoningTokens != thoughts {
			t.Fatalf("%s chat: usage %+v", model, u)
		}
		if r := recordOf(t, g, "acme", rid); r.Model != model || r.PromptTokens != prompt || r.CompletionTokens != text+thoughts+image || r.Estimated || !r.Cost.Equal(costs[model]) {
			t.Fatalf("%s chat: record %+v, want cost %s", model, r, costs[model])
		}
		code, obj := g.do("POST", key, "/images", i3Create(model, "a fox", ""))
		if code != 200 || obj["status"] != "completed" || obj["cost"] != costs[model].String() {
			t.Fatalf("%s task: %d %v, want cost %s", model, code, obj, costs[model])
		}
		if r := recordOf(t, g, "acme", fmt.Sprint(obj["id"])); r.PromptTokens != prompt || r.CompletionTokens != text+thoughts+image || !r.Cost.Equal(costs[model]) {
			t.Fatalf("%s task: record %+v", model, r)
		}
		spent = spent.Add(costs[model]).Add(costs[model])
	}
	waitFor(t, "the debits", 10*time.Second, func() bool { return g.balance("acme").Equal(decimal.NewFromInt(10).Sub(spent)) })
}
