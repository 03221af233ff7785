package e2e

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/demo"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/fakeupstream"
)

// Embeddings prices, per input token: the model on OpenAI's API first (then Gemini's), the one
// on Gemini's only.
var (
	embSmallPrice  = decimal.RequireFromString("0.00000002")
	embGeminiPrice = decimal.RequireFromString("0.00000015")
)

// startEmbeddings runs a gateway with embeddings models on a fake OpenAI-compatible provider
// (oa) and a fake Gemini (gm), one with a context_length of 64, one on a provider that is down, a route falling back from it,
// and a chat model; extra is more configuration.
func startEmbeddings(t *testing.T, extra string) (*gateway, *fakeupstream.Server) {
	t.Helper()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := fmt.Sprintf(`providers:
  - {name: oa, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: gm, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: down, type: openai, base_url: http://%s/v1}
models:
  - id: emb-small
    output_modalities: [embeddings]
    providers: [{provider: oa, model: text-embedding-3-small}, {provider: gm, model: gemini-embedding-001}]
    pricing: {prompt: "%s"}
  - id: emb-gemini
    output_modalities: [embeddings]
    providers: [{provider: gm, model: gemini-embedding-001}]
    pricing: {prompt: "%s"}
  - id: emb-ctx
    output_modalities: [embeddings]
    context_length: 64
    providers: [{provider: oa, model: text-embedding-3-small}]
    pricing: {prompt: "%s"}
  - id: emb-down
    output_modalities: [embeddings]
    providers: [{provider: down, model: text-embedding-3-large}]
    pricing: {prompt: "0.00000013"}
  - id: chatty
    providers: [{provider: oa, model: gpt-4o-mini}]
    pricing: {prompt: "0.000001", completion: "0.000002"}
routes:
  - {name: emb-route, rule: priority_fallback, models: [emb-down, emb-gemini]}
%s`, fake.URL(), fake.GeminiURL(), deadAddr, embSmallPrice, embGeminiPrice, embSmallPrice, extra)
	return startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey), fake
}

// embed posts a raw body to /v1/embeddings.
func (g *gateway) embed(key, body string) *http.Response {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/embeddings", strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

type embeddingsAnswer struct {
	Object string
	Model  string
	Data   []struct {
		Object    string
		Index     int
		Embedding json.RawMessage
	}
	Usage struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}
}

// embedOK posts body and reads a 200 answer.
func (g *gateway) embedOK(key, body string) (embeddingsAnswer, http.Header) {
	g.t.Helper()
	resp := g.embed(key, body)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		g.t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var a embeddingsAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		g.t.Fatalf("answer %s: %v", raw, err)
	}
	return a, resp.Header
}

// floats reads an embedding: a JSON array, or OpenAI's base64 of little-endian float32s.
func floats(t *testing.T, raw json.RawMessage) []float32 {
	t.Helper()
	var v []float32
	if json.Unmarshal(raw, &v) == nil {
		return v
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("embedding %s is neither floats nor base64", raw)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("embedding %q is not base64 float32s", s)
	}
	for i := 0; i < len(b); i += 4 {
		v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return v
}

func sameVector(t *testing.T, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("vector of %d, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("vector[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

// TestEmbeddings: POST /v1/embeddings through the real Envoy, on OpenAI's API and Gemini's:
// the shapes, fallback, pinning, the exact bill, and the refusals of admission.
func TestEmbeddings(t *testing.T) {
	t.Parallel()
	g, fake := startEmbeddings(t, "")
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")

	t.Run("plain", func(t *testing.T) {
		fake.Reset()
		a, h := g.embedOK(key, `{"model":"emb-small","input":"hello embeddings world"}`)
		if a.Object != "list" || a.Model != "emb-small" || len(a.Data) != 1 || a.Data[0].Object != "embedding" || a.Usage.PromptTokens != 3 {
			t.Fatalf("answer %+v", a)
		}
		sameVector(t, floats(t, a.Data[0].Embedding), demo.Vector("hello embeddings world", 0))
		if h.Get("x-tollway-provider") != "oa" || h.Get("x-tollway-model") != "emb-small" || h.Get("x-tollway-upstream-model") != "text-embedding-3-small" || h.Get("x-request-id") == "" {
			t.Fatalf("headers %v", h)
		}
		reqs := fake.Requests()
		if len(reqs) != 1 || reqs[0].Path != "/v1/embeddings" || reqs[0].Header.Get("Authorization") != "Bearer "+providerKey {
			t.Fatalf("upstream saw %+v", reqs)
		}
		var up map[string]any
		_ = json.Unmarshal(reqs[0].Body, &up)
		if up["model"] != "text-embedding-3-small" || up["input"] != "hello embeddings world" {
			t.Fatalf("upstream body %s", reqs[0].Body)
		}
	})

	t.Run("base64 and dimensions", func(t *testing.T) {
		a, _ := g.embedOK(key, `{"model":"emb-small","input":["one","two words"],"encoding_format":"base64","dimensions":8}`)
		if len(a.Data) != 2 || a.Data[1].Index != 1 {
			t.Fatalf("answer %+v", a)
		}
		var s string
		if json.Unmarshal(a.Data[0].Embedding, &s) != nil {
			t.Fatalf("embedding %s is not a base64 string", a.Data[0].Embedding)
		}
		sameVector(t, floats(t, a.Data[0].Embedding), demo.Vector("one", 8))
		sameVector(t, floats(t, a.Data[1].Embedding), demo.Vector("two words", 8))
	})

	t.Run("token arrays", func(t *testing.T) {
		a, _ := g.embedOK(key, `{"model":"emb-small","input":[[1,2,3],[4]]}`)
		if len(a.Data) != 2 || a.Usage.PromptTokens != 4 {
			t.Fatalf("answer %+v", a)
		}
		sameVector(t, floats(t, a.Data[1].Embedding), demo.Vector("tokens:4", 0))
		a, _ = g.embedOK(key, `{"model":"emb-small","input":[5,6]}`)
		if len(a.Data) != 1 || a.Usage.PromptTokens != 2 {
			t.Fatalf("one token array: answer %+v", a)
		}
		// Gemini takes no token ids: refused as the client's mistake, naming the way out.
		wantError(t, g.embed(key, `{"model":"emb-gemini","input":[[1,2]]}`), 400, "invalid_request")
	})

	t.Run("gemini", func(t *testing.T) {
		fake.Reset()
		a, h := g.embedOK(key, `{"model":"emb-gemini","input":["The food was delicious"],"encoding_format":"base64","dimensions":16}`)
		sameVector(t, floats(t, a.Data[0].Embedding), demo.Vector("The food was delicious", 16))
		// Gemini reports no usage: the input is counted with the tokenizer.
		if n := int64(billing.CountText("The food was delicious")); a.Usage.PromptTokens != n || a.Model != "emb-gemini" || h.Get("x-tollway-provider") != "gm" {
			t.Fatalf("answer %+v (want %d tokens), headers %v", a, n, h)
		}
		reqs := fake.Requests()
		if len(reqs) != 1 || reqs[0].Path != "/v1beta/models/gemini-embedding-001:batchEmbedContents" || reqs[0].Header.Get("x-goog-api-key") != providerKey || reqs[0].Header.Get("Authorization") != "" {
			t.Fatalf("upstream saw %+v", reqs)
		}
	})

	t.Run("fallback", func(t *testing.T) {
		for _, status := range []int{500, 429, 401} {
			fake.Reset()
			fake.FailNext(status, "")
			a, h := g.embedOK(key, `{"model":"emb-small","input":"fall back"}`)
			if h.Get("x-tollway-provider") != "gm" || a.Model != "emb-small" || h.Get("x-tollway-upstream-model") != "gemini-embedding-001" {
				t.Fatalf("after %d: headers %v answer %+v", status, h, a)
			}
			sameVector(t, floats(t, a.Data[0].Embedding), demo.Vector("fall back", 0))
		}
		// A 400 is the request's fault: not retried elsewhere, answered in the spec's shape with
		// the provider's code.
		fake.Reset()
		fake.FailNext(400, "Invalid 'dimensions'.")
		wantError(t, g.embed(key, `{"model":"emb-small","input":"x"}`), 400, "invalid_request_error")
		if n := fake.RequestCount(); n != 1 {
			t.Fatalf("a 400 was tried %d times", n)
		}
		// route:<name>: its first model's provider is down, its second answers.
		a, h := g.embedOK(key, `{"model":"route:emb-route","input":"via the route"}`)
		if h.Get("x-tollway-provider") != "gm" || h.Get("x-tollway-model") != "emb-gemini" || a.Model != "emb-gemini" {
			t.Fatalf("route: headers %v answer %+v", h, a)
		}
	})

	t.Run("pinned", func(t *testing.T) {
		for _, p := range []string{"gm", "oa"} {
			fake.Reset()
			_, h := g.embedOK(key, `{"model":"emb-small","input":"pin me","route":{"provider":"`+p+`"}}`)
			if h.Get("x-tollway-provider") != p {
				t.Fatalf("pinned to %s, answered by %q", p, h.Get("x-tollway-provider"))
			}
		}
		// A provider refusing the gateway's credential is never blamed on the client's key.
		fake.Reset()
		fake.FailNext(401, "")
		wantError(t, g.embed(key, `{"model":"emb-small","input":"x","route":{"provider":"oa"}}`), 502, "upstream_auth_failed")
		fake.Reset()
		fake.FailNext(500, "") // pinned: no fallback
		wantError(t, g.embed(key, `{"model":"emb-small","input":"x","route":{"provider":"oa"}}`), 500, "server_error")
		wantError(t, g.embed(key, `{"model":"emb-gemini","input":"x","route":{"provider":"oa"}}`), 400, "provider_not_available")
	})

	t.Run("billing is exact", func(t *testing.T) {
		if err := g.NewAccount(ctx, "exact", "1"); err != nil {
			t.Fatal(err)
		}
		k := g.newKey("exact")
		a, _ := g.embedOK(k, `{"model":"emb-small","input":["count these five words","and three more"]}`)
		if a.Usage.PromptTokens != 7 {
			t.Fatalf("usage %+v", a.Usage)
		}
		b, _ := g.embedOK(k, `{"model":"emb-gemini","input":"Gemini counts nothing itself"}`)
		oa := embSmallPrice.Mul(decimal.NewFromInt(7))
		gm := embGeminiPrice.Mul(decimal.NewFromInt(int64(billing.CountText("Gemini counts nothing itself"))))
		recs := g.waitRecords("exact", 2)
		byModel := map[string]usageRecord{}
		for _, r := range recs {
			byModel[r.Model] = r
		}
		if r := byModel["emb-small"]; !r.Cost.Equal(oa) || r.PromptTokens != 7 || r.CompletionTokens != 0 || r.Estimated || r.Provider != "oa" {
			t.Fatalf("openai record %+v, want cost %s", r, oa)
		}
		if r := byModel["emb-gemini"]; !r.Cost.Equal(gm) || r.PromptTokens != b.Usage.PromptTokens || !r.Estimated || r.Provider != "gm" {
			t.Fatalf("gemini record %+v, want cost %s, estimated", r, gm)
		}
		want := decimal.NewFromInt(1).Sub(oa).Sub(gm)
		waitFor(t, "the debit", 10*time.Second, func() bool { return g.balance("exact").Equal(want) })
	})

	t.Run("admission", func(t *testing.T) {
		chatOnly := g.newKey("acme", "--models", "chatty")
		wantError(t, g.embed(chatOnly, `{"model":"emb-small","input":"x"}`), 403, "model_not_allowed")
		tight := g.newKey("acme", "--monthly-limit", "0.0000001")
		e := wantError(t, g.embed(tight, `{"model":"emb-small","input":"`+strings.Repeat("word ", 20)+`"}`), 403, "spend_limit_exceeded")
		if !strings.Contains(e.Error.Message, "send fewer or shorter inputs") {
			t.Fatalf("message %q", e.Error.Message)
		}
		if err := g.NewAccount(ctx, "broke", "0"); err != nil {
			t.Fatal(err)
		}
		wantError(t, g.embed(g.newKey("broke"), `{"model":"emb-small","input":"x"}`), 402, "insufficient_credits")
		wantError(t, g.embed("ale-nope", `{"model":"emb-small","input":"x"}`), 401, "invalid_api_key")
	})

	t.Run("validation", func(t *testing.T) {
		wantError(t, g.embed(key, `{"model":"emb-small","input":[]}`), 400, "invalid_request")
		wantError(t, g.embed(key, `{"model":"emb-small"}`), 400, "missing_input")
		e := wantError(t, g.embed(key, `{"model":"chatty","input":"x"}`), 400, "model_not_found")
		if !strings.Contains(e.Error.Message, "POST /v1/chat/completions") {
			t.Fatalf("message %q", e.Error.Message)
		}
		e = wantError(t, g.chat(ctx, key, `{"model":"emb-small","messages":[{"role":"user","content":"hi"}]}`), 400, "model_not_found")
		if !strings.Contains(e.Error.Message, "POST /v1/embeddings") {
			t.Fatalf("message %q", e.Error.Message)
		}
	})

	t.Run("catalog", func(t *testing.T) {
		resp, err := http.Get(g.BaseURL + "/models/emb-small")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			OutputModalities  []string `json:"output_modalities"`
			SupportedFeatures []string `json:"supported_features"`
			Params            []string `json:"supported_sampling_parameters"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&m)
		if fmt.Sprint(m.OutputModalities) != "[embeddings]" || fmt.Sprint(m.SupportedFeatures) != "[embeddings]" || fmt.Sprint(m.Params) != "[dimensions encoding_format user]" {
			t.Fatalf("catalog entry %+v", m)
		}
	})
}

// TestEmbeddingsSplitGateway: on a split gateway (routing.fast_lane) an embeddings answer takes
// the chunk lane's answer filter, which rewrites and bills it as the router-level filter does.
func TestEmbeddingsSplitGateway(t *testing.T) {
	t.Parallel()
	g, fake := startEmbeddings(t, "routing: {fast_lane: true}\n")
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	a, h := g.embedOK(key, `{"model":"emb-small","input":"split me","encoding_format":"base64"}`)
	if a.Model != "emb-small" || h.Get("x-tollway-provider") != "oa" || a.Usage.PromptTokens != 2 {
		t.Fatalf("answer %+v headers %v", a, h)
	}
	sameVector(t, floats(t, a.Data[0].Embedding), demo.Vector("split me", 0))
	fake.FailNext(500, "")
	a, h = g.embedOK(key, `{"model":"emb-small","input":"split me"}`)
	if h.Get("x-tollway-provider") != "gm" || a.Model != "emb-small" {
		t.Fatalf("fallback: answer %+v headers %v", a, h)
	}
	fake.FailNext(500, "")
	wantError(t, g.embed(key, `{"model":"emb-small","input":"x","route":{"provider":"oa"}}`), 500, "server_error")
	for _, r := range g.waitRecords("acme", 2) {
		if !r.Cost.Equal(embSmallPrice.Mul(decimal.NewFromInt(r.PromptTokens))) || r.PromptTokens != 2 || r.Estimated != (r.Provider == "gm") {
			t.Fatalf("record %+v", r)
		}
	}
	waitFor(t, "the debit", 10*time.Second, func() bool {
		return g.balance("acme").Equal(decimal.NewFromInt(1).Sub(embSmallPrice.Mul(decimal.NewFromInt(4))))
	})
}

// TestEmbeddingsSDKs: the official OpenAI Python and Node SDKs' embeddings.create, unmodified,
// through the gateway: float and base64 (the Python SDK's default, decoded by the SDK) both
// give the fake's vectors.
func TestEmbeddingsSDKs(t *testing.T) {
	t.Parallel()
	python, dir := sdkClients()
	for _, p := range []string{python, filepath.Join(dir, "node_modules", "openai")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("an SDK client is not installed (%v): run `make clients`", err)
		}
	}
	g, _ := startEmbeddings(t, "")
	// The vectors the fake draws, as base64 of their float32s: compared bit for bit.
	want := map[string]string{}
	for _, in := range []string{"hello from the SDK", "second input"} {
		for _, dims := range []int{0, 12} {
			want[fmt.Sprintf("%s|%d", in, dims)] = base64.StdEncoding.EncodeToString(float32Bytes(demo.Vector(in, dims)))
		}
	}
	expected, _ := json.Marshal(want)
	env := func(account string) []string {
		if err := g.NewAccount(context.Background(), account, "5"); err != nil {
			t.Fatal(err)
		}
		return append(os.Environ(), "TOLLWAY_BASE_URL="+g.BaseURL, "TOLLWAY_API_KEY="+g.newKey(account),
			"TOLLWAY_MODEL=emb-small", "TOLLWAY_GEMINI_MODEL=emb-gemini", "TOLLWAY_EXPECTED="+string(expected))
	}
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(repoRoot, "test", "clients", "python-embeddings"))
	cmd.Env = env("py")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil || !strings.Contains(string(out), "4 passed") {
		t.Fatalf("OpenAI Python SDK embeddings suite failed: %v", err)
	}
	cmd = exec.Command("node", "--test", "embeddings-sdk.mjs")
	cmd.Dir, cmd.Env = dir, env("node")
	out, err = cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil || !strings.Contains(string(out), "# pass 4") || !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("OpenAI Node SDK embeddings suite failed: %v", err)
	}
	for _, acct := range []string{"py", "node"} {
		for _, r := range g.waitRecords(acct, 4) {
			if !r.Cost.IsPositive() || r.CompletionTokens != 0 {
				t.Fatalf("%s: record %+v", acct, r)
			}
		}
	}
}

func float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// TestEmbeddingsRateLimits: embeddings requests count against their key's rates like chat: the
// x-ratelimit headers on the answer, the input's token bound counted at admission, and 429
// rate_limit_exceeded with Retry-After once over, reaching no provider.
func TestEmbeddingsRateLimits(t *testing.T) {
	t.Parallel()
	g, fake := startEmbeddings(t, "")
	if err := g.NewAccount(context.Background(), "acme", "5"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--rpm", "1", "--tpm", "100000")
	_, h := g.embedOK(key, `{"model":"emb-small","input":"the sea at night"}`)
	if h.Get("x-ratelimit-limit-requests") != "1" || h.Get("x-ratelimit-remaining-requests") != "0" || h.Get("x-ratelimit-limit-tokens") != "100000" {
		t.Fatalf("answer's rate headers: %v", h)
	}
	// Admitted at the input's bound: a token is at least a byte, 16 of them, and 8 for the
	// special tokens a provider may add to an input.
	if rem := h.Get("x-ratelimit-remaining-tokens"); rem != "99976" {
		t.Fatalf("remaining tokens %q: want the input's bound of 16 bytes + 8 taken from 100000", rem)
	}
	served := fake.RequestCount()
	resp := g.embed(key, `{"model":"emb-small","input":"again"}`)
	e := wantError(t, resp, http.StatusTooManyRequests, "rate_limit_exceeded")
	if ra, err := strconv.Atoi(resp.Header.Get("retry-after")); err != nil || ra < 55 || ra > 61 { // until the first one's second leaves the window
		t.Fatalf("429 retry-after %q (%s)", resp.Header.Get("retry-after"), e.Error.Message)
	}
	if fake.RequestCount() != served {
		t.Fatal("a refused embeddings request reached the provider")
	}

	// The bound (a byte a token, and 8 an input) is about four times an English text's tokens:
	// a request is refused as over the whole tokens per minute only when its tokens counted
	// are, and the refusal names them and what to send instead.
	small := g.newKey("acme", "--tpm", "100")
	words := strings.Repeat("many words here ", 20) // 328 by the bound, 61 tokens
	if _, h := g.embedOK(small, `{"model":"emb-small","input":"`+words+`"}`); h.Get("x-ratelimit-limit-tokens") != "100" {
		t.Fatalf("headers %v", h)
	}
	served = fake.RequestCount()
	e = wantError(t, g.embed(small, `{"model":"emb-small","input":["`+words+`","`+words+`","`+words+`"]}`), http.StatusTooManyRequests, "rate_limit_exceeded")
	if !strings.Contains(e.Error.Message, "alone is over the rate limit on tokens per minute: about 183 tokens, limit 100") ||
		!strings.Contains(e.Error.Message, "fewer, shorter inputs") || strings.Contains(e.Error.Message, "max_tokens") {
		t.Fatalf("429 %q", e.Error.Message)
	}
	if fake.RequestCount() != served {
		t.Fatal("a refused embeddings request reached the provider")
	}
	// Chat on the same key counts against the same tokens per minute: it finds the
	// embeddings' 60 tokens (the fake's usage, corrected at settlement) counted.
	resp = g.chat(context.Background(), small, `{"model":"chatty","messages":[{"role":"user","content":"hi"}]}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if rem, err := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-tokens")); resp.StatusCode != 200 || err != nil || rem > 40 {
		t.Fatalf("chat after embeddings: %d, remaining tokens %q of 100", resp.StatusCode, resp.Header.Get("x-ratelimit-remaining-tokens"))
	}
}

// An input over the model's context_length is refused with its index before the provider is
// asked, the rate spent or anything held or billed; one at the limit goes on.
func TestEmbeddingsContextLength(t *testing.T) {
	t.Parallel()
	g, fake := startEmbeddings(t, "")
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--rpm", "1")
	words := func(n int) string { return `"` + strings.TrimSpace(strings.Repeat(" word", n)) + `"` } // a token a word
	ids := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("7,", n), ",") + "]" }
	before := g.balance("acme")
	refusedUnasked(t, g, fake, key, map[string]string{
		`{"model":"emb-ctx","input":["hi",` + words(64) + `,"there",` + words(70) + `]}`: "input[3] is 70 tokens; model emb-ctx takes at most 64 per input: split it or shorten it",
		`{"model":"emb-ctx","input":[` + ids(2) + `,` + ids(65) + `]}`:                   "input[1] is 65 tokens; model emb-ctx takes at most 64 per input",
	})
	if recs := g.records("account=acme"); len(recs) != 0 {
		t.Fatalf("refusals left usage records %+v", recs)
	}
	if b := g.balance("acme"); !b.Equal(before) {
		t.Fatalf("balance %s after the refusals, was %s", b, before)
	}
	// At the limit it is embedded, on the key's one request a minute the refusals did not take.
	a, _ := g.embedOK(key, `{"model":"emb-ctx","input":["hi",`+words(64)+`]}`)
	if len(a.Data) != 2 || fake.RequestCount() != 1 {
		t.Fatalf("%d embeddings, %d provider requests", len(a.Data), fake.RequestCount())
	}
	if recs := waitRecordsOf(t, g, "acme", 1); len(recs) != 1 {
		t.Fatalf("records %+v", recs)
	}
}
