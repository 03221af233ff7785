package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// routeFixture: three providers, one of them down, two models and three routes.
//
//	primary: down (connection refused), then a
//	backup:  c
//	route:support-bot  priority_fallback [primary, backup]
//	route:tiers        mode_mapping {fast: backup, balanced: primary, deep: primary}
//	route:old          paused
type routeFixture struct {
	g    *gateway
	a, c *fakeupstream.Server
	key  string
}

func startRoutes(t *testing.T) *routeFixture {
	t.Helper()
	a := fakeupstream.Start(t, fakeupstream.Options{Name: "a", APIKey: providerKey})
	c := fakeupstream.Start(t, fakeupstream.Options{Name: "c", APIKey: providerKey, ChunkDelay: 20 * time.Millisecond})
	body := fmt.Sprintf(`providers:
  - {name: down, type: openai, base_url: http://%s/v1, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: a, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: c, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: primary
    providers: [{provider: down, model: down-model}, {provider: a, model: a-model}]
    pricing: {prompt: "0.000001", completion: "0.000002"}
  - id: backup
    providers: [{provider: c, model: c-model}]
    pricing: {prompt: "0.000003", completion: "0.000004"}
routes:
  - name: Support Bot
    rule: priority_fallback
    models: [primary, backup]
  - name: tiers
    rule: mode_mapping
    modes: {fast: backup, balanced: primary, deep: primary}
  - name: old
    rule: priority_fallback
    models: [backup]
    status: paused
`, deadAddr, a.URL(), c.URL())
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	return &routeFixture{g: g, a: a, c: c, key: g.newKey("acme")}
}

// ask sends a chat request and returns status, body, the served provider and model headers.
func (f *routeFixture) ask(t *testing.T, body string) (int, string, string, string) {
	t.Helper()
	resp := f.g.chat(context.Background(), f.key, body)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header.Get("x-tollway-provider"), resp.Header.Get("x-tollway-model")
}

const hi = `"messages":[{"role":"user","content":"hello there"}]`

func TestFallbackInsideOneRequest(t *testing.T) {
	t.Parallel()
	f := startRoutes(t)

	// A provider that refuses connections: the model's next provider answers the same request.
	code, body, prov, model := f.ask(t, `{"model":"primary",`+hi+`}`)
	if code != 200 || prov != "a" || model != "primary" || !strings.Contains(body, "Hello from a/a-model") {
		t.Fatalf("primary: %d %s %s %s", code, prov, model, body)
	}

	// Through a route, 5xx and 429 from the first model fall to the next model, transparently.
	for _, fail := range []int{500, 503, 429} {
		f.a.FailNext(fail, "provider trouble")
		code, body, prov, model = f.ask(t, `{"model":"route:support-bot",`+hi+`}`)
		if code != 200 || prov != "c" || model != "backup" || !strings.Contains(body, "Hello from c/c-model") {
			for _, r := range f.a.Requests() {
				t.Logf("a saw %s %s", r.Path, r.Body)
			}
			t.Fatalf("after a %d: %d %s %s %s (a saw %d, c saw %d, faults left %d)", fail, code, prov, model, body, f.a.RequestCount(), f.c.RequestCount(), f.a.PendingFaults())
		}
	}
	// And streamed, before the first byte.
	f.a.FailNext(502, "bad gateway")
	resp := f.g.chat(context.Background(), f.key, `{"model":"route:support-bot","stream":true,`+hi+`}`)
	events := readStream(t, resp)
	if resp.Header.Get("x-tollway-provider") != "c" || !strings.Contains(strings.Join(events, ""), "c-model") {
		t.Fatalf("streamed fallback: provider %q, events %v", resp.Header.Get("x-tollway-provider"), events)
	}

	// A 400 is the request's own fault: no retry, the client gets it.
	f.a.FailNext(400, "bad parameter")
	before := f.c.RequestCount()
	code, body, _, _ = f.ask(t, `{"model":"route:support-bot",`+hi+`}`)
	if code != 400 || !strings.Contains(body, "bad parameter") || f.c.RequestCount() != before {
		t.Fatalf("400 retried or reshaped: %d %s (c saw %d more)", code, body, f.c.RequestCount()-before)
	}

	// Every served request is recorded with the model, provider and route that served it.
	recs := f.g.waitRecords("acme", 5)
	served := map[string]int{}
	for _, r := range recs {
		served[r.Model+"@"+r.Provider]++
	}
	if served["primary@a"] != 1 || served["backup@c"] != 4 {
		t.Fatalf("records by model@provider: %v", served)
	}
}

func TestModeMappingAndRouteErrors(t *testing.T) {
	t.Parallel()
	f := startRoutes(t)
	for mode, want := range map[string]string{`"fast"`: "backup", `"deep"`: "primary", "null": "primary"} {
		code, body, _, model := f.ask(t, `{"model":"route:tiers","route_mode":`+mode+`,`+hi+`}`)
		if code != 200 || model != want {
			t.Fatalf("route_mode %s: %d %s %s", mode, code, model, body)
		}
	}
	ctx := context.Background()
	e := wantError(t, f.g.chat(ctx, f.key, `{"model":"route:tiers","route_mode":"turbo",`+hi+`}`), 400, "invalid_route_mode")
	if !strings.Contains(e.Error.Message, "fast, balanced, deep") {
		t.Errorf("message does not name the allowed values: %s", e.Error.Message)
	}
	wantError(t, f.g.chat(ctx, f.key, `{"model":"route:old",`+hi+`}`), 409, "route_paused")
	wantError(t, f.g.chat(ctx, f.key, `{"model":"route:nope",`+hi+`}`), 400, "route_not_found")

	// Pinning: only that provider; with a route the route decides and route.provider is ignored.
	code, _, prov, _ := f.ask(t, `{"model":"primary","route":{"provider":"a"},`+hi+`}`)
	if code != 200 || prov != "a" {
		t.Fatalf("pinned: %d %s", code, prov)
	}
	f.a.FailNext(500, "down")
	wantError(t, f.g.chat(ctx, f.key, `{"model":"primary","route":{"provider":"a"},`+hi+`}`), 500, "server_error")
	code, _, prov, _ = f.ask(t, `{"model":"route:tiers","route_mode":"fast","route":{"provider":"a"},`+hi+`}`)
	if code != 200 || prov != "c" {
		t.Fatalf("route.provider must be ignored with a route: %d %s", code, prov)
	}
	wantError(t, f.g.chat(ctx, f.key, `{"model":"backup","route":{"provider":"a"},`+hi+`}`), 400, "provider_not_available")
}

// TestRoutesWithTheOpenAISDK sends route and route_mode in extra_body, as spec rule 4.1.6 says.
func TestRoutesWithTheOpenAISDK(t *testing.T) {
	t.Parallel()
	python := os.Getenv("TOLLWAY_PYTHON")
	if python == "" {
		python = filepath.Join(repoRoot, "tools", "venv", "bin", "python")
	}
	f := startRoutes(t)
	script := `
import os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
r = c.chat.completions.create(model="route:tiers", messages=[{"role": "user", "content": "hi"}], extra_body={"route_mode": "fast"})
assert "c-model" in r.choices[0].message.content, r
r = c.chat.completions.create(model="primary", messages=[{"role": "user", "content": "hi"}], extra_body={"route": {"provider": "a"}})
assert "a-model" in r.choices[0].message.content, r
try:
    c.chat.completions.create(model="route:old", messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("paused route answered")
except openai.APIStatusError as e:
    assert e.status_code == 409 and e.body["code"] == "route_paused", e
print("ok")
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", script)
	cmd.Env = append(os.Environ(), "BASE="+f.g.BaseURL, "KEY="+f.key)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("SDK: %v\n%s", err, out)
	}
}

// TestRoutesAdminAndLiveEdits creates, lists, pauses and resumes routes through the CLI while
// a stream runs on one of them: the stream is not dropped, later requests see the change, and the
// list shows health and per-route usage.
func TestRoutesAdminAndLiveEdits(t *testing.T) {
	t.Parallel()
	f := startRoutes(t)
	out, err := f.g.cli("routes", "create", "Night Shift", "--rule", "priority_fallback", "--models", "backup,primary")
	if err != nil || !strings.Contains(out, "route:night-shift") {
		t.Fatalf("routes create: %v %s", err, out)
	}
	if _, err := f.g.cli("routes", "create", "night shift", "--rule", "priority_fallback", "--models", "backup"); err == nil {
		t.Fatal("a second route with the same id was created")
	}
	if _, err := f.g.cli("routes", "create", "bad", "--rule", "mode_mapping", "--modes", "fast=nope"); err == nil {
		t.Fatal("a route with an unknown model was created")
	}

	// A stream on the route, and the route paused while it runs (c streams with a chunk delay).
	ctx := context.Background()
	resp := f.g.chat(ctx, f.key, `{"model":"route:night-shift","stream":true,"messages":[{"role":"user","content":"one two three four five six seven eight nine ten eleven twelve"}]}`)
	if _, err := f.g.cli("routes", "pause", "route:night-shift"); err != nil {
		t.Fatal(err)
	}
	events := readStream(t, resp) // fails unless the stream ends with [DONE]
	if len(events) < 5 {
		t.Fatalf("stream cut short: %v", events)
	}
	wantError(t, f.g.chat(ctx, f.key, `{"model":"route:night-shift",`+hi+`}`), 409, "route_paused")
	if _, err := f.g.cli("routes", "resume", "route:night-shift"); err != nil {
		t.Fatal(err)
	}
	if code, _, prov, _ := f.ask(t, `{"model":"route:night-shift",`+hi+`}`); code != 200 || prov != "c" {
		t.Fatalf("resumed route: %d %s", code, prov)
	}

	f.g.waitRecords("acme", 2)
	out, err = f.g.cli("routes", "list")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "route:night-shift ") {
			line = l
		}
	}
	// backup (first) is served by c, which is up: healthy; two requests recorded on the route.
	if f := strings.Fields(line); len(f) < 9 || f[len(f)-5] != "active" || f[len(f)-4] != "none/none" || f[len(f)-3] != "healthy" || f[len(f)-2] != "2" {
		t.Fatalf("routes list line %q in\n%s", line, out)
	}
	if !strings.Contains(out, "route:old") || !strings.Contains(out, "paused") {
		t.Fatalf("routes list misses the paused route:\n%s", out)
	}
}

// TestFallbackAcrossProviderAPIs: a route whose first model is on Anthropic and second on Gemini.
// When Anthropic is overloaded, Gemini answers the same request, translated back to OpenAI's
// shape; a request Anthropic cannot express is the client's 400; a prompt Gemini blocks is a 400
// content_filter, never a half answer.
func TestFallbackAcrossProviderAPIs(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{Name: "native", APIKey: providerKey})
	body := fmt.Sprintf(`providers:
  - {name: claude, type: anthropic, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: google, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: haiku
    providers: [{provider: claude, model: claude-haiku}]
    pricing: {prompt: "0.000001", completion: "0.000005"}
  - id: flash
    providers: [{provider: google, model: gemini-flash}]
    pricing: {prompt: "0.0000003", completion: "0.0000025"}
routes:
  - {name: mixed, rule: priority_fallback, models: [haiku, flash]}
`, fake.AnthropicURL(), fake.GeminiURL())
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	f := &routeFixture{g: g, key: g.newKey("acme")}

	code, out, prov, model := f.ask(t, `{"model":"route:mixed",`+hi+`}`)
	if code != 200 || prov != "claude" || model != "haiku" || !strings.Contains(out, "claude-haiku") {
		t.Fatalf("first choice: %d %s %s %s", code, prov, model, out)
	}
	fake.FailNext(529, "Overloaded")
	code, out, prov, model = f.ask(t, `{"model":"route:mixed",`+hi+`}`)
	if code != 200 || prov != "google" || model != "flash" || !strings.Contains(out, `"object":"chat.completion"`) || !strings.Contains(out, "gemini-flash") {
		t.Fatalf("fallback to gemini: %d %s %s %s", code, prov, model, out)
	}
	fake.FailNext(500, "internal")
	resp := g.chat(ctx, f.key, `{"model":"route:mixed","stream":true,`+hi+`}`)
	events := readStream(t, resp)
	if resp.Header.Get("x-tollway-provider") != "google" || !strings.Contains(strings.Join(events, ""), "chat.completion.chunk") {
		t.Fatalf("streamed fallback to gemini: %s %v", resp.Header.Get("x-tollway-provider"), events)
	}

	// Tool-call arguments that are not JSON cannot be sent to Anthropic: the client's 400.
	e := wantError(t, g.chat(ctx, f.key, `{"model":"haiku","messages":[{"role":"user","content":"x"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"not json"}}]},
		{"role":"tool","tool_call_id":"c1","content":"ok"}]}`), 400, "invalid_request")
	t.Log(e.Error.Message)
	// A prompt Gemini blocks.
	e = wantError(t, g.chat(ctx, f.key, `{"model":"flash","messages":[{"role":"user","content":"#block-me please"}]}`), 400, "content_filter")
	t.Log(e.Error.Message)

	recs := g.waitRecords("acme", 3)
	byProvider := map[string]int{}
	for _, r := range recs {
		if r.Estimated {
			t.Errorf("record %+v estimated: translated usage was lost", r)
		}
		byProvider[r.Provider]++
	}
	if byProvider["claude"] != 1 || byProvider["google"] != 2 {
		t.Fatalf("records by provider %v", byProvider)
	}
}

// TestFallbackOnResetAndTimeout: a provider that drops the connection before answering, and one
// that stays silent past routing.attempt_timeout, both give way to the next provider.
func TestFallbackOnResetAndTimeout(t *testing.T) {
	t.Parallel()
	a := fakeupstream.Start(t, fakeupstream.Options{Name: "a", APIKey: providerKey})
	c := fakeupstream.Start(t, fakeupstream.Options{Name: "c", APIKey: providerKey})
	body := fmt.Sprintf(`routing: {attempt_timeout: 500ms}
providers:
  - {name: a, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: c, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: m
    providers: [{provider: a, model: a-model}, {provider: c, model: c-model}]
`, a.URL(), c.URL())
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey)
	f := &routeFixture{g: g, key: g.newKey("acme")}
	for name, fault := range map[string]fakeupstream.Fault{
		"reset":   {Reset: true},
		"timeout": {Delay: 3 * time.Second},
	} {
		a.Script(fault)
		start := time.Now()
		code, out, prov, _ := f.ask(t, `{"model":"m",`+hi+`}`)
		if code != 200 || prov != "c" || !strings.Contains(out, "c-model") {
			t.Fatalf("%s: %d %s %s", name, code, prov, out)
		}
		if name == "timeout" && time.Since(start) > 2*time.Second {
			t.Fatalf("timeout fallback took %s; the attempt timeout is 500ms", time.Since(start))
		}
	}
}
