package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
	"github.com/tollway/tollway/xds/ir"
)

const providerKey = "sk-fake-provider-secret"

// catalog is a providers/models config section with one model served by one fake; extra lines
// (e.g. pricing) are added to the model.
func catalog(fakeURL string, extra ...string) string {
	more := ""
	for _, e := range extra {
		more += "    " + e + "\n"
	}
	return fmt.Sprintf(`providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: gpt-4o-mini
    name: GPT-4o mini
    providers: [{provider: fake, model: fake-llama-3}]
    supported_sampling_parameters: [temperature, top_p, max_tokens, tools, tool_choice, stream_options]
%s`, fakeURL, more)
}

func startWithFake(t *testing.T, opts fakeupstream.Options, extra ...string) (*gateway, *fakeupstream.Server) {
	t.Helper()
	opts.APIKey = providerKey
	fake := fakeupstream.Start(t, opts)
	g := startGateway(t, catalog(fake.URL(), extra...), "FAKE_PROVIDER_KEY="+providerKey)
	return g, fake
}

// sdkPricing prices the SDK suites' model so their requests are billed like production ones.
const sdkPricing = `pricing: {prompt: "0.0000025", completion: "0.00001"}`

// checkBilled asserts every request of account was recorded from the provider's usage (none
// estimated) and that credits = balance + spend to the digit.
func checkBilled(t *testing.T, g *gateway, account string, credits string, requests int) {
	t.Helper()
	recs := g.waitRecords(account, requests)
	spent := decimal.Zero
	for _, r := range recs {
		if r.Estimated || !r.Cost.IsPositive() {
			t.Errorf("record %+v: want a priced record from the provider's usage", r)
		}
		spent = spent.Add(r.Cost)
	}
	if bal := g.balance(account); !bal.Add(spent).Equal(decimal.RequireFromString(credits)) {
		t.Errorf("balance %s + spent %s != %s", bal, spent, credits)
	}
}

func sdkEnv(g *gateway, key string) []string {
	return append(os.Environ(),
		"TOLLWAY_BASE_URL="+g.BaseURL,
		"TOLLWAY_API_KEY="+key,
		"TOLLWAY_MODEL=gpt-4o-mini",
		"TOLLWAY_UPSTREAM_MODEL=fake-llama-3",
	)
}

// sdkProviders are the provider APIs the SDK suites run against: the clients speak OpenAI; the
// gateway translates for the others, streams and tool calls included.
var sdkProviders = []string{"openai", "anthropic", "gemini"}

// startForSDK runs the gateway with one priced model on a fake provider of the given API.
func startForSDK(t *testing.T, kind string) (*gateway, *fakeupstream.Server) {
	t.Helper()
	fake := fakeupstream.Start(t, fakeupstream.Options{ChunkDelay: time.Millisecond, APIKey: providerKey})
	base := map[string]string{"openai": fake.URL(), "anthropic": fake.AnthropicURL(), "gemini": fake.GeminiURL()}[kind]
	body := fmt.Sprintf(`providers:
  - {name: fake, type: %s, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: gpt-4o-mini
    name: GPT-4o mini
    providers: [{provider: fake, model: fake-llama-3}]
    %s
`, kind, base, sdkPricing)
	return startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey), fake
}

func TestOpenAIPythonSDK(t *testing.T) {
	t.Parallel()
	python := os.Getenv("TOLLWAY_PYTHON")
	if python == "" {
		python = filepath.Join(repoRoot, "tools", "venv", "bin", "python")
	}
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the Python SDK client is not installed (%v): run `make clients`", err)
	}
	for _, kind := range sdkProviders {
		t.Run(kind, func(t *testing.T) {
			g, fake := startForSDK(t, kind)
			if err := g.NewAccount(context.Background(), "py", "5"); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(repoRoot, "test", "clients", "python"))
			cmd.Env = sdkEnv(g, g.newKey("py"))
			out, err := cmd.CombinedOutput()
			t.Logf("pytest:\n%s", out)
			if err != nil {
				t.Fatalf("OpenAI Python SDK suite against a %s provider failed: %v", kind, err)
			}
			if !strings.Contains(string(out), "passed") || strings.Contains(string(out), "skipped") {
				t.Fatalf("pytest ran no tests or skipped some")
			}
			checkBilled(t, g, "py", "5", fake.RequestCount())
		})
	}
}

func TestOpenAINodeSDK(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("TOLLWAY_NODE_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot, "test", "clients", "node")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Fatalf("the Node SDK client is not installed (%v): run `make clients`", err)
	}
	for _, kind := range sdkProviders {
		t.Run(kind, func(t *testing.T) {
			g, fake := startForSDK(t, kind)
			if err := g.NewAccount(context.Background(), "node", "5"); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("node", "--test")
			cmd.Dir = dir
			cmd.Env = sdkEnv(g, g.newKey("node"))
			out, err := cmd.CombinedOutput()
			t.Logf("node --test:\n%s", out)
			if err != nil {
				t.Fatalf("OpenAI Node SDK suite against a %s provider failed: %v", kind, err)
			}
			if !strings.Contains(string(out), "# fail 0") || strings.Contains(string(out), "# pass 0") {
				t.Fatalf("node ran no tests or some failed")
			}
			checkBilled(t, g, "node", "5", fake.RequestCount())
		})
	}
}

// TestUpstreamRequestIsRewritten checks what the provider actually receives.
func TestUpstreamRequestIsRewritten(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}],
		"temperature":0.2,"frequency_penalty":1,"logit_bias":{"1":2},"route":{"provider":"fake"},"route_mode":"fast","user":"u-42"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("x-tollway-removed-params"); got != "frequency_penalty,logit_bias" {
		t.Errorf("x-tollway-removed-params = %q", got)
	}
	if resp.Header.Get("x-request-id") == "" {
		t.Error("no x-request-id on a successful response")
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(reqs))
	}
	up := reqs[0]
	if up.Path != "/v1/chat/completions" {
		t.Errorf("upstream path %q", up.Path)
	}
	if got := up.Header.Get("Authorization"); got != "Bearer "+providerKey {
		t.Errorf("upstream Authorization = %q, want the provider key (the client's ale- key must never leave)", got)
	}
	if up.Header.Get("x-tollway-provider") != "" {
		t.Error("internal routing header leaked upstream")
	}
	var sent map[string]json.RawMessage
	if err := json.Unmarshal(up.Body, &sent); err != nil {
		t.Fatal(err)
	}
	if string(sent["model"]) != `"fake-llama-3"` {
		t.Errorf("upstream model = %s", sent["model"])
	}
	for _, gone := range []string{"route", "route_mode", "frequency_penalty", "logit_bias"} {
		if _, ok := sent[gone]; ok {
			t.Errorf("%s reached the provider", gone)
		}
	}
	for _, kept := range []string{"temperature", "user", "messages"} {
		if _, ok := sent[kept]; !ok {
			t.Errorf("%s was dropped", kept)
		}
	}
	if !strings.Contains(string(sent["messages"]), "data:image/png;base64,iVBORw0KGgo=") {
		t.Error("image content part was not passed through")
	}
}

func TestAuthErrors(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	ctx := context.Background()
	wantError(t, g.chat(ctx, "", body), 401, "invalid_api_key")
	wantError(t, g.chat(ctx, "ale-short", body), 401, "invalid_api_key")
	wantError(t, g.chat(ctx, "ale-"+strings.Repeat("A", 43), body), 401, "invalid_api_key")

	key := g.newKey("acme")
	if resp := g.chat(ctx, key, body); resp.StatusCode != 200 {
		t.Fatalf("fresh key: status %d", resp.StatusCode)
	}
	// rotate: the old secret stops, the new one works
	list, err := g.cli("keys", "list")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(list, key) {
		t.Fatal("keys list shows a secret")
	}
	id := strings.Fields(strings.Split(strings.TrimSpace(list), "\n")[1])[0]
	out, err := g.cli("keys", "rotate", id)
	if err != nil {
		t.Fatal(err)
	}
	newKey := strings.TrimSpace(out)
	wantError(t, g.chat(ctx, key, body), 401, "invalid_api_key")
	if resp := g.chat(ctx, newKey, body); resp.StatusCode != 200 {
		t.Fatalf("rotated key: status %d", resp.StatusCode)
	}
	if _, err := g.cli("keys", "revoke", id); err != nil {
		t.Fatal(err)
	}
	wantError(t, g.chat(ctx, newKey, body), 401, "invalid_api_key")
	if n := fake.RequestCount(); n != 2 {
		t.Fatalf("upstream saw %d requests, want only the 2 authenticated ones", n)
	}
	if strings.Contains(g.logs.String(), strings.TrimPrefix(newKey, "ale-")) || strings.Contains(g.logs.String(), providerKey) {
		t.Fatal("a secret reached the logs")
	}
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	ctx := context.Background()
	cases := []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":`, 400, "invalid_json"},
		{`[]`, 400, "invalid_json"},
		{`{"messages":[{"role":"user","content":"hi"}]}`, 400, "missing_model"},
		{`{"model":"gpt-4o-mini"}`, 400, "missing_messages"},
		{`{"model":"gpt-4o-mini","messages":[]}`, 400, "missing_messages"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"robot","content":"hi"}]}`, 400, "invalid_messages"},
		{`{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`, 400, "model_not_found"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"route":{"provider":"elsewhere"}}`, 400, "provider_not_available"},
		// field by field (these four used to be forwarded, or called invalid_messages)
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "invalid_request"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"user":5}`, 400, "invalid_request"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"tool_choice":"sometimes"}`, 400, "invalid_request"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"tools":"x"}`, 400, "invalid_request"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":5}}]}]}`, 400, "invalid_messages"},
		{`{"model":"gpt-4o-mini","messages":[{"role":"tool","content":"42"}]}`, 400, "invalid_messages"},
		{`{"model":"gpt-4o-mini","model":"other","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_json"},
	}
	for _, c := range cases {
		e := wantError(t, g.chat(ctx, key, c.body), c.status, c.code)
		t.Logf("%s -> %s", c.body, e.Error.Message)
		if strings.Contains(e.Error.Message, "billing.") || strings.Contains(e.Error.Message, "chatPrompt") || strings.Contains(e.Error.Message, "json:") {
			t.Errorf("message shows Go internals: %q", e.Error.Message)
		}
	}
	if n := fake.RequestCount(); n != 0 {
		t.Fatalf("invalid requests reached the provider (%d)", n)
	}
	// wrong path and method
	resp, err := http.Get(g.BaseURL + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, resp, 404, "not_found")
	req, _ := http.NewRequest(http.MethodGet, g.BaseURL+"/chat/completions", nil)
	req.Header.Set("authorization", "Bearer "+key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, resp, 405, "method_not_allowed")
}

func TestUpstreamErrorsKeepTheSpecShape(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	fake.FailNext(429, "Rate limit reached for requests")
	e := wantError(t, g.chat(context.Background(), key, body), 429, "rate_limit_exceeded")
	if !strings.Contains(e.Error.Message, "Rate limit") {
		t.Errorf("provider message lost: %q", e.Error.Message)
	}
	// A provider's 401 refuses the gateway's own credential: not the client's key.
	fake.FailNext(401, "Incorrect API key provided.")
	e = wantError(t, g.chat(context.Background(), key, body), 502, "upstream_auth_failed")
	if !strings.Contains(e.Error.Message, "fake") {
		t.Errorf("401 message does not name the provider: %q", e.Error.Message)
	}
	fake.Script(fakeupstream.Fault{Status: 502, Body: "<html>bad gateway</html>"})
	e = wantError(t, g.chat(context.Background(), key, body), 502, "upstream_error")
	if !strings.Contains(e.Error.Message, "fake") || !strings.Contains(e.Error.Message, "bad gateway") {
		t.Errorf("non-JSON upstream error not explained: %q", e.Error.Message)
	}
}

// TestStreamingIsNotBuffered shows chunks reach the client as the provider sends them: the first
// token arrives long before the stream ends.
func TestStreamingIsNotBuffered(t *testing.T) {
	t.Parallel()
	const delay = 40 * time.Millisecond
	g, _ := startWithFake(t, fakeupstream.Options{ChunkDelay: delay})
	key := g.newKey("acme")
	start := time.Now()
	resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"one two three four five six seven eight"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("content-type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	events := 0
	done := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if events == 0 {
			first = time.Since(start)
		}
		events++
		if line == "data: [DONE]" {
			done = true
		}
	}
	total := time.Since(start)
	if !done || events < 10 {
		t.Fatalf("stream incomplete: %d events, [DONE]=%v", events, done)
	}
	if first > total/3 {
		t.Fatalf("first chunk after %s of %s: the stream was buffered", first, total)
	}
	t.Logf("first chunk %s, whole stream %s (%d events)", first, total, events)
}

// TestLargeBodyPasses sends a base64 image through ext_proc's buffered body path in a body of
// exactly the limit, 32 MiB (TestMediaTypeAndSizeLimits has the byte more).
func TestLargeBodyPasses(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	head := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,`
	tail := `"}}]}]}`
	img := strings.Repeat("A", ir.MaxBodyBytes-len(head)-len(tail))
	body := head + img + tail
	resp := g.chat(context.Background(), key, body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %.300s", resp.StatusCode, raw)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), img) {
		t.Fatal("the provider did not receive the whole image")
	}
	// Over the limit: a clear 413, not a hang or a reset.
	huge := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("B", 41<<20) + `"}]}`
	wantError(t, g.chat(context.Background(), key, huge), 413, "request_too_large")
}

// TestConfigChanges edits the file and uses the admin API: each change is a new snapshot; a
// change Envoy rejects is reported and the running configuration stays.
func TestConfigChanges(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	ctx := context.Background()
	_, st := g.adminJSON("GET", "/admin/v1/status", nil)
	v0 := st["accepted_version"].(float64)

	// 1. file edit adds a model
	cfg, _ := os.ReadFile(g.CfgPath)
	added := string(cfg) + "  - id: second-model\n    providers: [{provider: fake, model: fake-second}]\n"
	if err := os.WriteFile(g.CfgPath, []byte(added), 0o600); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"second-model","messages":[{"role":"user","content":"hi"}]}`
	waitFor(t, "the edited file to take effect", 15*time.Second, func() bool {
		resp := g.chat(ctx, key, body)
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	_, st = g.adminJSON("GET", "/admin/v1/status", nil)
	if st["accepted_version"].(float64) <= v0 {
		t.Fatalf("no new snapshot version after a file edit: %v", st)
	}

	// 2. admin API adds a model
	code, out := g.adminJSON("PUT", "/admin/v1/models/third-model", map[string]any{
		"providers": []map[string]string{{"provider": "fake", "model": "fake-third"}},
	})
	if code != 200 {
		t.Fatalf("PUT model: %d %v", code, out)
	}
	resp := g.chat(ctx, key, `{"model":"third-model","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("model added through the admin API: status %d", resp.StatusCode)
	}
	// invalid change: refused with a reason, nothing changes
	code, out = g.adminJSON("PUT", "/admin/v1/models/broken", map[string]any{
		"providers": []map[string]string{{"provider": "nobody", "model": "x"}},
	})
	if code != 400 || !strings.Contains(fmt.Sprint(out), "nobody") {
		t.Fatalf("invalid model: %d %v", code, out)
	}

	// 3. a listener Envoy cannot bind: Envoy NACKs, the old listener keeps serving
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	bad := strings.Replace(added, "public: "+g.Public, "public: "+busy.Addr().String(), 1)
	if err := os.WriteFile(g.CfgPath, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Envoy to reject the listener", 20*time.Second, func() bool {
		_, st = g.adminJSON("GET", "/admin/v1/status", nil)
		return st["last_rejection"] != nil
	})
	if !strings.Contains(g.logs.String(), "ENVOY REJECTED CONFIGURATION") {
		t.Error("the rejection was not logged loudly")
	}
	resp = g.chat(ctx, key, body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after a rejected change the old listener should serve: %d", resp.StatusCode)
	}
	if fake.RequestCount() < 3 {
		t.Fatal("requests did not reach the provider")
	}
}

// TestProviderDown: a provider that refuses connections gives a 503 in the spec's shape.
func TestProviderDown(t *testing.T) {
	t.Parallel()
	g := startGateway(t, catalog("http://"+deadAddr+"/v1"), "FAKE_PROVIDER_KEY="+providerKey)
	e := wantError(t, g.chat(context.Background(), g.newKey("acme"), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`), 503, "upstream_unavailable")
	t.Log(e.Error.Message)
}

// TestTLSProviderWithPrivateCA: an https provider (an in-mesh server with its own CA) is reached
// over TLS verified against ca_file; with the wrong CA the request fails instead of going out
// unverified.
func TestTLSProviderWithPrivateCA(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	target, _ := url.Parse("http://" + fake.Addr())
	tlsSrv := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	dir := t.TempDir()
	good := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong.pem")
	if err := os.WriteFile(wrong, selfSignedCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`providers:
  - {name: mesh, type: openai, base_url: %s/v1, api_key: "${FAKE_PROVIDER_KEY}", ca_file: %s}
  - {name: impostor, type: openai, base_url: %s/v1, api_key: "${FAKE_PROVIDER_KEY}", ca_file: %s}
models:
  - id: gpt-4o-mini
    providers: [{provider: mesh, model: fake-llama-3}]
  - id: unverified
    providers: [{provider: impostor, model: fake-llama-3}]
`, tlsSrv.URL, good, tlsSrv.URL, wrong)
	g := startGateway(t, cfg, "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"over tls"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "over tls") {
		t.Fatalf("via TLS: %d %s", resp.StatusCode, raw)
	}
	e := wantError(t, g.chat(context.Background(), key, `{"model":"unverified","messages":[{"role":"user","content":"x"}]}`), 503, "upstream_unavailable")
	t.Log(e.Error.Message)
	if n := fake.RequestCount(); n != 1 {
		t.Fatalf("provider saw %d requests; the unverified one must not arrive", n)
	}
}

// TestEmbeddedDefaultConfig runs `tollway run` with no --config, as `make run` on a fresh
// machine does, moved to free ports by TOLLWAY_* overrides. OpenAI has no key here, so the
// model falls to the local provider, which is not running: a clear 503.
func TestEmbeddedDefaultConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	public, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(tollwayBin, "run")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ENVOY_BIN="+envoyBin, "OPENAI_API_KEY=",
		"TOLLWAY_LISTEN_PUBLIC="+public, "TOLLWAY_LISTEN_ADMIN="+admin)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	waitFor(t, "the ready line", 30*time.Second, func() bool { return strings.Contains(logs.String(), "tollway ready") })
	if strings.Contains(logs.String(), "REJECTED") {
		t.Fatalf("Envoy rejected the default configuration:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "tollway.db")); err != nil {
		t.Fatalf("default store not created: %v", err)
	}
	g := &gateway{t: t, Gateway: &harness.Gateway{BaseURL: "http://" + public + "/v1"}}
	if out, err := exec.Command(tollwayBin, "accounts", "create", "me", "--credits", "1", "--admin", "http://"+admin).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := exec.Command(tollwayBin, "keys", "create", "--account", "me", "--admin", "http://"+admin).Output()
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, g.chat(context.Background(), strings.TrimSpace(string(out)), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`), 503, "upstream_unavailable")
}

// selfSignedCA makes a CA certificate unrelated to httptest's built-in one.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(7),
		Subject:               pkix.Name{CommonName: "not the provider's CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
