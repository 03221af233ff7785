package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
)

// keyView is GET /v1/key's answer.
type keyView struct {
	Object         string           `json:"object"`
	ID             string           `json:"id"`
	Label          *string          `json:"label"`
	Account        string           `json:"account"`
	MonthlyLimit   *string          `json:"monthly_limit"`
	Month          string           `json:"month"`
	SpentThisMonth *string          `json:"spent_this_month"`
	Held           *string          `json:"held"`
	Remaining      *string          `json:"remaining"`
	Models         []string         `json:"models"`
	RateLimits     *json.RawMessage `json:"rate_limits"`
	CreatedAt      int64            `json:"created_at"`
	LastUsedAt     *int64           `json:"last_used_at"`
}

// getKey sends GET /v1/key with key as the bearer ("" sends none).
func (g *gateway) getKey(key string) *http.Response {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.BaseURL+"/key", nil)
	if key != "" {
		req.Header.Set("authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

// keyView reads GET /v1/key for key, which must answer 200.
func (g *gateway) keyView(key string) (keyView, string) {
	g.t.Helper()
	resp := g.getKey(key)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v keyView
	if resp.StatusCode != 200 || json.Unmarshal(raw, &v) != nil {
		g.t.Fatalf("GET /v1/key: %d %s", resp.StatusCode, raw)
	}
	return v, string(raw)
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// TestKeyInfoEndpoint: GET /v1/key through Envoy answers the calling key's own view: its spend
// this month equal to its usage records, what its limit leaves, when it was last used (kept
// across a restart); a revoked or missing key is 401 key_market_key_invalid. Plain HTTP and the
// official OpenAI Python SDK's raw get alike.
func TestKeyInfoEndpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := catalog(fake.URL(), sdkPricing)
	g := startGatewayIn(t, dir, body, "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "5"); err != nil {
		t.Fatal(err)
	}
	created := time.Now().Unix()
	key := g.newKey("acme", "--name", "ci", "--monthly-limit", "2", "--models", "gpt-4o-mini")
	gone := g.newKey("acme")

	v, raw := g.keyView(key)
	if v.Object != "key" || deref(v.Label) != "ci" || v.Account != "acme" || deref(v.MonthlyLimit) != "2" ||
		v.Month != time.Now().UTC().Format("2006-01") || deref(v.SpentThisMonth) != "0" || deref(v.Remaining) != "2" ||
		strings.Join(v.Models, ",") != "gpt-4o-mini" || v.CreatedAt < created-1 || v.LastUsedAt != nil {
		t.Fatalf("a fresh key: %s", raw)
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal([]byte(raw), &fields)
	if string(fields["rate_limits"]) != "null" || strings.Contains(raw, strings.TrimPrefix(key, "ale-")[:12]) {
		t.Fatalf("a fresh key: rate_limits must be null and the key never shown: %s", raw)
	}

	// Two answers billed: spent is what the usage records say, to the digit.
	used := time.Now().Unix()
	for range 2 {
		resp := g.chat(ctx, key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chat: %d", resp.StatusCode)
		}
	}
	spent := decimal.Zero
	for _, r := range g.waitRecords("acme", 2) {
		spent = spent.Add(r.Cost)
	}
	v, raw = g.keyView(key)
	if !spent.IsPositive() || deref(v.SpentThisMonth) != spent.String() || deref(v.Held) != "0" ||
		deref(v.Remaining) != decimal.NewFromInt(2).Sub(spent).String() {
		t.Fatalf("after two answers of $%s: %s", spent, raw)
	}
	if v.LastUsedAt == nil || *v.LastUsedAt < used || *v.LastUsedAt > time.Now().Unix() {
		t.Fatalf("last_used_at after the answers (at %d or later): %s", used, raw)
	}
	lastUsed := *v.LastUsedAt

	// The official SDK, as a client checks its key.
	_, keys := g.adminJSON("GET", "/admin/v1/keys", nil)
	for _, k := range keys["data"].([]any) {
		if k := k.(map[string]any); strings.HasPrefix(gone, strings.TrimSuffix(k["prefix"].(string), "...")) {
			if _, err := g.cli("keys", "revoke", k["id"].(string)); err != nil {
				t.Fatal(err)
			}
		}
	}
	runPython(t, g, map[string]string{"KEY": key, "GONE": gone, "SPENT": spent.String()}, `
import os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
v = c.get("/key", cast_to=object)
assert v["object"] == "key" and v["label"] == "ci" and v["account"] == "acme", v
assert v["spent_this_month"] == os.environ["SPENT"] and v["monthly_limit"] == "2" and v["rate_limits"] is None, v
gone = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["GONE"], max_retries=0)
try:
    gone.get("/key", cast_to=object)
    raise SystemExit("a revoked key was shown")
except openai.AuthenticationError as e:
    assert e.status_code == 401 and e.body["code"] == "key_market_key_invalid", e.body
    assert "revoked" in e.body["message"] and "tollway " not in e.body["message"], e.body
print("ok")
`)
	e := wantError(t, g.getKey(gone), 401, "key_market_key_invalid")
	if !strings.Contains(e.Error.Message, "revoked") {
		t.Errorf("revoked key: %q", e.Error.Message)
	}
	wantError(t, g.getKey(""), 401, "key_market_key_invalid")
	wantError(t, g.getKey("ale-short"), 401, "key_market_key_invalid")
	// Elsewhere a refused key is still invalid_api_key.
	wantError(t, g.chat(ctx, gone, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`), 401, "invalid_api_key")

	// Checking the key is not a use of it, and the last use survives a restart.
	g.Stop()
	g = startGatewayIn(t, dir, body, "FAKE_PROVIDER_KEY="+providerKey)
	v, raw = g.keyView(key)
	if v.LastUsedAt == nil || *v.LastUsedAt != lastUsed || deref(v.SpentThisMonth) != spent.String() {
		t.Fatalf("after a restart: %s; want last_used_at %d and spent %s", raw, lastUsed, spent)
	}
}

// runPython runs script with the official OpenAI Python SDK against g (BASE set, env added);
// it must print ok.
// sdkClients are the Python with the OpenAI SDK and the directory of the Node one
// (TOLLWAY_PYTHON, TOLLWAY_NODE_DIR; else the repository's own).
func sdkClients() (python, nodeDir string) {
	if python = os.Getenv("TOLLWAY_PYTHON"); python == "" {
		python = filepath.Join(repoRoot, "tools", "venv", "bin", "python")
	}
	if nodeDir = os.Getenv("TOLLWAY_NODE_DIR"); nodeDir == "" {
		nodeDir = filepath.Join(repoRoot, "test", "clients", "node")
	}
	return python, nodeDir
}

func runPython(t *testing.T, g *gateway, env map[string]string, script string) {
	t.Helper()
	python := os.Getenv("TOLLWAY_PYTHON")
	if python == "" {
		python = filepath.Join(repoRoot, "tools", "venv", "bin", "python")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", script)
	cmd.Env = append(os.Environ(), "BASE="+g.BaseURL)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("OpenAI Python SDK: %v\n%s", err, out)
	}
}

// TestClientErrorsSpeakToTheClient: through Envoy, errors tell the client what it can do and
// name no operator command; the operator's log gets the command. A 404 lists every endpoint; a
// POST under a task endpoint (the SDK's images.generate) is pointed to POST /v1/images.
func TestClientErrorsSpeakToTheClient(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL(), sdkPricing)+`routes:
  - name: old
    rule: priority_fallback
    models: [gpt-4o-mini]
    status: paused
`, "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	key := g.newKey("broke") // no credits
	hi := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body   string
		status int
		code   string
		client string // what the client is told it can do
		log    string // the operator's hint in the log ("": none)
	}{
		{`{"model":"route:old",` + hi + `}`, 409, "route_paused", "GET /v1/models", "tollway routes resume route:old"},
		{`{"model":"route:nope",` + hi + `}`, 400, "route_not_found", "GET /v1/models", ""},
		{`{"model":"gpt-4o-mini",` + hi + `}`, 402, "insufficient_credits", "ask the gateway's operator", "tollway accounts credit broke"},
	} {
		e := wantError(t, g.chat(ctx, key, tc.body), tc.status, tc.code)
		if strings.Contains(e.Error.Message, "tollway ") || !strings.Contains(e.Error.Message, tc.client) {
			t.Errorf("%s: %q; want no tollway command and %q", tc.code, e.Error.Message, tc.client)
		}
		if tc.log != "" {
			waitFor(t, "the operator's hint for "+tc.code, 5*time.Second, func() bool { return strings.Contains(g.logs.String(), tc.log) })
		}
	}
	for _, k := range []string{"", "ale-" + strings.Repeat("A", 43)} {
		if e := wantError(t, g.chat(ctx, k, `{}`), 401, "invalid_api_key"); strings.Contains(e.Error.Message, "tollway ") {
			t.Errorf("invalid_api_key: %q names an operator command", e.Error.Message)
		}
	}

	resp, err := http.Get(g.BaseURL + "/completions")
	if err != nil {
		t.Fatal(err)
	}
	e := wantError(t, resp, 404, "not_found")
	for _, ep := range []string{"POST /v1/chat/completions", "GET /v1/models", "POST /v1/videos", "GET /v1/videos/{id}",
		"POST /v1/images", "GET /v1/images/{id}", "GET /v1/key"} {
		if !strings.Contains(e.Error.Message, ep) {
			t.Errorf("the 404 does not name %s: %q", ep, e.Error.Message)
		}
	}
	runPython(t, g, map[string]string{"KEY": key}, `
import os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
try:
    c.images.generate(model="any-image-model", prompt="a lighthouse")
    raise SystemExit("images.generate answered")
except openai.APIStatusError as e:
    assert e.status_code == 405 and e.body["code"] == "method_not_allowed", e.body
    assert "POST /v1/images" in e.body["message"] and "use GET" not in e.body["message"], e.body
print("ok")
`)
}
