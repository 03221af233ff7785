package e2e

// The first run that works offline: `tollway run --demo` and the README's "Try it" block.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/harness"
)

// startRun starts `tollway run ARGS...` with no config file: listen addresses and store come
// from TOLLWAY_* overrides.
func startRun(t *testing.T, args []string, env ...string) *gateway {
	t.Helper()
	return startWith(t, harness.Options{RunArgs: args, Env: env})
}

// catalogEntries is GET /v1/models by id.
func (g *gateway) catalogEntries() map[string]map[string]any {
	g.t.Helper()
	resp, err := http.Get(g.BaseURL + "/models")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		g.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, m := range list.Data {
		out[m["id"].(string)] = m
	}
	return out
}

// TestDemoTryIt runs the README's "Try it" block, kept in testdata/tryit.sh and pasted into
// README.md as it is, against `tollway run --demo` with no provider key and no model server:
// every command must succeed and print what the README says, in order, so the README cannot
// drift from what the product does.
func TestDemoTryIt(t *testing.T) {
	t.Parallel()
	block, err := os.ReadFile("testdata/tryit.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Terminal 1 is `make demo` (build, then `tollway run --demo`): the test starts the same.
	first, script, _ := strings.Cut(string(block), "\n")
	if !strings.HasPrefix(first, "make demo ") {
		t.Fatalf("the block starts with %q, want `make demo` in terminal 1", first)
	}
	g := startRun(t, []string{"--demo"}, "OPENAI_API_KEY=")
	if !strings.Contains(g.logs.String(), `level=WARN msg="DEMO PROVIDER demo: answers are canned by Tollway, not from a language model"`) {
		t.Error("no DEMO PROVIDER warning in the log")
	}
	// The provider that is down is seen as such before the route is tried (health checks).
	waitFor(t, "down-chat not ready", 20*time.Second, func() bool { return g.catalogEntries()["down-chat"]["is_ready"] == false })

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tollwayBin, filepath.Join(dir, "bin", "tollway")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.ReplaceAll(script, "localhost:8080", g.Public))
	cmd.Dir = dir
	// The CLI finds the admin API from the embedded default's listen.admin, moved like the gateway's.
	cmd.Env = append(os.Environ(), "TOLLWAY_LISTEN_ADMIN="+g.Admin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the Try it block failed: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}

	// What the README promises, in the order the commands print it.
	rest := string(out)
	for _, want := range []string{
		"account acme created with 25 credits",
		`"id":"demo-chat","object":"model","owned_by":"tollway-demo","name":"Demo chat (demo: canned answers, no LLM)"`,
		`"id":"down-chat","object":"model","owned_by":"tollway"`,
		`"content":"Tollway demo model (offline, no LLM): you said \"Hello\"."`,
		`"usage":{"prompt_tokens":`,
		`data: {"id":"chatcmpl-demo`, `"delta":{"content":"Tollway "}`, `"finish_reason":"stop"`, "data: [DONE]",
		`"tool_calls":[{"id":"call_demo`, `"function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}`, `"finish_reason":"tool_calls"`,
		`"content":"Tollway demo model (offline, no LLM): get_weather returned \"18 C and light rain\"."`,
		`{"data":[{"object":"embedding","index":0,"embedding":[`, `"demo":"Tollway demo model (offline, no LLM): deterministic vectors`,
		`"model":"demo-embed","object":"list","usage":{"prompt_tokens":1,"total_tokens":1}}`,
		"HTTP/1.1 200 OK", "x-tollway-provider: demo", "x-tollway-model: demo-chat",
		"200 200 200 200 403 \n",
		`"code":"spend_limit_exceeded"`,
		`"monthly_limit":"0.05"`, `"spent_this_month":"0.04076","held":"0","remaining":"0.00924"`,
		"demo-chat", "TOTAL",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the output lacks %q after what came before; output:\n%s\nstderr:\n%s", want, out, stderr.String())
		}
		rest = rest[i+len(want):]
	}

	// The books: five answers and an embedding on KEY, four on LIMITED, the refused ones not
	// billed.
	var total usageSummary
	waitFor(t, "10 durable usage records", 10*time.Second, func() bool {
		total = g.usage("account=acme")
		return total.Requests >= 10
	})
	if total.Requests != 10 || total.Cost.IsZero() || total.EstimatedRequests != 0 {
		t.Errorf("usage %+v: want 10 requests billed from the demo's usage", total)
	}
	embedded := 0
	for _, r := range g.records("account=acme") {
		if r.Model == "demo-embed" {
			embedded++
			continue
		}
		if r.Provider != "demo" || r.Model != "demo-chat" {
			t.Errorf("record %+v: every answer came from demo/demo-chat", r)
		}
	}
	if embedded != 1 {
		t.Errorf("%d embeddings records, want 1", embedded)
	}
}

// TestDemoStreamUsage: a client that asks for usage in a demo stream gets it, as from OpenAI.
func TestDemoStreamUsage(t *testing.T) {
	t.Parallel()
	g := startRun(t, []string{"--demo"}, "OPENAI_API_KEY=")
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	resp := g.chat(context.Background(), key, `{"model":"demo-chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"count me"}]}`)
	if p := resp.Header.Get("x-tollway-provider"); p != "demo" {
		t.Errorf("x-tollway-provider %q", p)
	}
	events := readStream(t, resp)
	var last struct {
		Choices []any
		Usage   *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil || len(last.Choices) != 0 || last.Usage == nil || last.Usage.PromptTokens != 2 || last.Usage.CompletionTokens == 0 {
		t.Errorf("usage chunk %s (%v)", events[len(events)-2], err)
	}
}

// TestNoDemoUnlessNamed: the embedded default configuration has no demo provider and starts no
// demo server; a provider of type demo added later through the admin API starts one and is
// labelled like the demo config's.
func TestNoDemoUnlessNamed(t *testing.T) {
	t.Parallel()
	// No provider key: the default's providers cannot answer, and nothing leaves loopback.
	g := startRun(t, []string{}, "OPENAI_API_KEY=")
	for id, m := range g.catalogEntries() {
		if m["owned_by"] != "tollway" || strings.Contains(m["name"].(string), "demo") {
			t.Errorf("default catalog model %s: owned_by %v name %v", id, m["owned_by"], m["name"])
		}
	}
	_, out := g.adminJSON("GET", "/admin/v1/providers", nil)
	for _, p := range out["data"].([]any) {
		if p.(map[string]any)["type"] == "demo" {
			t.Errorf("the default config has a demo provider: %v", p)
		}
	}
	if logs := g.logs.String(); strings.Contains(logs, "DEMO PROVIDER") || strings.Contains(logs, "demo model server started") {
		t.Errorf("the default config started the demo:\n%s", logs)
	}

	// Named explicitly, later: the demo server starts and answers through the gateway.
	if code, out := g.adminJSON("PUT", "/admin/v1/providers/play", map[string]any{"type": "demo"}); code != http.StatusOK {
		t.Fatalf("PUT provider: %d %v", code, out)
	}
	if code, out := g.adminJSON("PUT", "/admin/v1/models/play-chat", map[string]any{
		"providers": []map[string]string{{"provider": "play", "model": "play-chat"}},
		"pricing":   map[string]string{"prompt": "0.000001", "completion": "0.000002"},
	}); code != http.StatusOK {
		t.Fatalf("PUT model: %d %v", code, out)
	}
	if !strings.Contains(g.logs.String(), `DEMO PROVIDER play: answers are canned by Tollway`) {
		t.Error("no DEMO PROVIDER warning after the admin API named one")
	}
	if m := g.catalogEntries()["play-chat"]; m["owned_by"] != "tollway-demo" || m["name"] != "play-chat (demo: canned answers, no LLM)" {
		t.Errorf("play-chat in the catalog: %v", m)
	}
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	resp := g.chat(context.Background(), g.newKey("acme"), `{"model":"play-chat","messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	var c struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 ||
		c.Choices[0].Message.Content != `Tollway demo model (offline, no LLM): you said "hi".` || resp.Header.Get("x-tollway-provider") != "play" {
		t.Errorf("chat via play: %d %+v %v (provider %q)", resp.StatusCode, c, err, resp.Header.Get("x-tollway-provider"))
	}
}

// TestReadmeTryItIsTested: the README's Try it block is the one TestDemoTryIt runs.
func TestReadmeTryItIsTested(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	block, err2 := os.ReadFile("testdata/tryit.sh")
	if err != nil || err2 != nil || !strings.Contains(string(readme), "```sh\n"+string(block)+"```\n") {
		t.Fatalf("README.md's Try it block differs from test/e2e/testdata/tryit.sh (%v, %v); change both", err, err2)
	}
}
