package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/test/fakeupstream"
)

func (g *gateway) do(method, key, path, body string) (int, map[string]any) {
	g.t.Helper()
	code, _, out := g.call(method, key, path, body)
	return code, out
}

// call sends body (JSON, if any) with key and returns the status, the headers and the decoded
// answer.
func (g *gateway) call(method, key, path, body string) (int, http.Header, map[string]any) {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.BaseURL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("content-type", "application/json")
	}
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		g.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, out
}

// TestVideoTaskThroughEnvoy: a V1 (MiniMax) video task, end to end through the real Envoy:
// created (the first provider failing its create, the second taking it), stored, polled to
// completion through Envoy's internal listener, its video URL with expiry, billed once at
// request + duration prices, hidden from another account, its callbacks delivered signed; and
// every validation refusal a 400 that names the problem before any provider call.
func TestVideoTaskThroughEnvoy(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	broken := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	var mu sync.Mutex
	var callbacks []string
	var sigs []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		callbacks = append(callbacks, string(b))
		sigs = append(sigs, r.Header.Get(tasks.SignatureHeader))
		mu.Unlock()
	}))
	defer hook.Close()
	g := startGateway(t, fmt.Sprintf(`billing: {enabled: true}
callbacks: {allow_private: [127.0.0.1]}
providers:
  - {name: hailuo-down, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo-down, model: MiniMax-Hailuo-02}, {provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`, broken.MiniMaxURL(), fake.MiniMaxURL()), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	for _, a := range []string{"acme", "other"} {
		if err := g.NewAccount(ctx, a, "10"); err != nil {
			t.Fatal(err)
		}
	}
	key, otherKey := g.newKey("acme"), g.newKey("other")
	broken.FailNext(503, "")

	code, obj := g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a red fox in snow [Pan left]","duration":6,"resolution":"1080P","callback_url":"`+hook.URL+`/v"}`)
	id, _ := obj["id"].(string)
	if code != 200 || !strings.HasPrefix(id, "video_") || obj["object"] != "video" || obj["status"] != "queued" || obj["provider"] != "hailuo" {
		t.Fatalf("create: %d %v", code, obj)
	}
	if code, obj := g.do("GET", otherKey, "/videos/"+id, ""); code != 404 {
		t.Fatalf("another account: %d %v", code, obj)
	}
	var done map[string]any
	waitFor(t, "the task to complete", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	res, _ := done["result"].(map[string]any)
	videos, _ := res["videos"].([]any)
	if len(videos) != 1 || done["cost"] != "0.32" || done["seconds"] != "6" || done["size"] != "1920x1080" || done["expires_at"] == nil {
		t.Fatalf("completed object %v", done)
	}
	url, _ := videos[0].(map[string]any)["url"].(string)
	if resp, err := http.Get(url); err != nil || resp.StatusCode != 200 {
		t.Fatalf("video URL %s: %v %v", url, resp, err)
	}
	waitFor(t, "the usage record", 10*time.Second, func() bool { return len(g.records("account=acme")) == 1 })
	if r := g.records("account=acme")[0]; !r.Cost.Equal(decimal.RequireFromString("0.32")) || r.Model != "hailuo-02" || r.Provider != "hailuo" {
		t.Fatalf("usage record %+v", r)
	}
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("9.68")) {
		t.Fatalf("balance %s", b)
	}
	waitFor(t, "the callbacks", 15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(callbacks) >= 1 && strings.Contains(callbacks[len(callbacks)-1], `"status":"completed"`)
	})
	// Every delivery verifies with the account's callback secret (tollway accounts list shows it).
	_, accounts := g.adminJSON("GET", "/admin/v1/accounts", nil)
	var secret string
	for _, a := range accounts["data"].([]any) {
		if m := a.(map[string]any); m["id"] == "acme" {
			secret, _ = m["callback_secret"].(string)
		}
	}
	mu.Lock()
	for i, sig := range sigs {
		if err := tasks.Verify(secret, sig, []byte(callbacks[i]), time.Now(), 5*time.Minute); err != nil || secret == "" {
			t.Errorf("callback %d (%s): %v", i, sig, err)
		}
	}
	mu.Unlock()

	for body, want := range map[string]string{
		`{"model":"hailuo-02","prompt":"x","duration":10,"resolution":"1080P"}`: "1080P takes 6 s",
		`{"model":"hailuo-02"}`:                                                   "send a prompt",
		`{"model":"hailuo-02","prompt":"x","sound":true}`:                         `does not take field "sound"`,
		`{"model":"hailuo-02","prompt":"x","callback_url":"http://10.0.0.8/cb"}`:  "private address",
		`{"model":"hailuo-02","first_frame_image":"ftp://example.com/frame.png"}`: "an http or https URL",
		`{"model":"gpt-nope","prompt":"x"}`:                                       "not a video model",
	} {
		before := fake.RequestCount()
		code, obj := g.do("POST", key, "/videos", body)
		e, _ := obj["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != 400 || !strings.Contains(msg, want) || e["request_id"] == "" || fake.RequestCount() != before {
			t.Errorf("%s: %d %v; want a 400 saying %q before any provider call", body, code, obj, want)
		}
	}
}

// TestVideoTaskSurvivesRestart: a task created before a restart is found after it, polling
// resumes, and it is billed once, its credits held again meanwhile.
func TestVideoTaskSurvivesRestart(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	dir := t.TempDir()
	body := v1Config(fake)
	g := startGatewayIn(t, dir, body, "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	code, obj := g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a fox","duration":10}`)
	id, _ := obj["id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("create: %d %v", code, obj)
	}
	g.Stop()

	g = startGatewayIn(t, dir, body, "FAKE_PROVIDER_KEY="+providerKey)
	var done map[string]any
	waitFor(t, "the task to complete after the restart", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	if done["cost"] != "0.5" {
		t.Fatalf("completed %v", done)
	}
	waitFor(t, "one usage record", 10*time.Second, func() bool { return len(g.records("account=acme")) == 1 })
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("0.5")) {
		t.Fatalf("balance %s, want 0.5", b)
	}
}

// TestOpenAIPythonSDKVideos: the official Python SDK's videos.create and videos.retrieve
// against a V1 model, to completion, and its errors; and against a V2 model with the prompt
// videos.create requires (no openai.omit), which DashScope gets as input.prompt.
func TestOpenAIPythonSDKVideos(t *testing.T) {
	t.Parallel()
	python := os.Getenv("TOLLWAY_PYTHON")
	if python == "" {
		python = filepath.Join(repoRoot, "tools", "venv", "bin", "python")
	}
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the Python SDK client is not installed (%v): run `make clients`", err)
	}
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, mediaConfig("", fake.MiniMaxURL(), fake.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "py", "5"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(repoRoot, "test", "clients", "python-videos"))
	cmd.Env = append(os.Environ(), "TOLLWAY_BASE_URL="+g.BaseURL, "TOLLWAY_API_KEY="+g.newKey("py"), "TOLLWAY_MODEL=hailuo-02", "TOLLWAY_V2_MODEL=wan-t2v")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil || !strings.Contains(string(out), "3 passed") {
		t.Fatalf("OpenAI Python SDK videos suite failed: %v", err)
	}
	checkSDKPromptReachedDashScope(t, fake)
}

// checkSDKPromptReachedDashScope: the SDK's top-level prompt reached DashScope as input.prompt,
// and nothing at the top level.
func checkSDKPromptReachedDashScope(t *testing.T, fake *fakeupstream.Server) {
	t.Helper()
	sent, _ := lastSent(fake, "/api/v1/services/aigc/video-generation/video-synthesis")
	if in, _ := sent["input"].(map[string]any); in["prompt"] != "a red fox in snow" || sent["prompt"] != nil {
		t.Fatalf("DashScope got %v", sent)
	}
}

// hailuoCatalog is one video model, hailuo-02 on fake's MiniMax API, priced by pricing (a
// pricing: value; "": unpriced).
func hailuoCatalog(fake *fakeupstream.Server, pricing string) string {
	c := fmt.Sprintf(`providers:
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
`, fake.MiniMaxURL())
	if pricing != "" {
		c += "    pricing: " + pricing + "\n"
	}
	return c
}

// TestVideoCreateAsForm: videos.create sent as multipart/form-data (as OpenAI SDKs do when the
// request carries a file) creates the same task as JSON.
func TestVideoCreateAsForm(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, hailuoCatalog(fake, ""), "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	g.postForm(key, "/videos", map[string]string{"model": "hailuo-02", "prompt": "42", "duration": "10", "resolution": "768P", "prompt_optimizer": "false"})
	var sent map[string]any
	for _, r := range fake.Requests() {
		if r.Path == "/v1/video_generation" {
			_ = json.Unmarshal(r.Body, &sent)
		}
	}
	if sent["prompt"] != "42" || sent["duration"] != float64(10) || sent["prompt_optimizer"] != false || sent["model"] != "MiniMax-Hailuo-02" {
		t.Fatalf("MiniMax got %v", sent)
	}
}

// postForm creates a task from a multipart form, as the OpenAI SDKs send videos.create, and
// fails the test unless it is queued.
func (g *gateway) postForm(key, path string, fields map[string]string) {
	g.t.Helper()
	var b strings.Builder
	w := multipart.NewWriter(&b)
	for k, v := range fields {
		_ = w.WriteField(k, v)
	}
	w.Close()
	req, _ := http.NewRequest("POST", g.BaseURL+path, strings.NewReader(b.String()))
	req.Header.Set("content-type", w.FormDataContentType())
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"status":"queued"`) {
		g.t.Fatalf("form create %v: %d %s", fields, resp.StatusCode, body)
	}
}

// TestDashScopeVideoTask: a V2 text-to-video task through Envoy: created with DashScope's async
// header, polled to SUCCEEDED, billed on the duration DashScope reports; V2's rules refused
// before any provider call.
func TestDashScopeVideoTask(t *testing.T) {
	t.Parallel()
	g, fake := startDashScope(t, `{request: "0.01", duration: "0.1"}`)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	if code, obj := g.do("POST", key, "/videos", `{"model":"wan-t2v","input":{"prompt":"a fox"},"parameters":{"ratio":"2:1"}}`); code != 400 || fake.RequestCount() != 0 {
		t.Fatalf("bad ratio: %d %v", code, obj)
	}
	code, obj := g.do("POST", key, "/videos", `{"model":"wan-t2v","input":{"prompt":"a fox"},"parameters":{"duration":8,"ratio":"9:16"}}`)
	id, _ := obj["id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("create: %d %v", code, obj)
	}
	if h := fake.Requests()[0].Header.Get("X-Dashscope-Async"); h != "enable" {
		t.Fatalf("async header %q", h)
	}
	var done map[string]any
	waitFor(t, "the task to complete", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	if done["cost"] != "0.81" || done["seconds"] != "8" || done["provider_status"] != "SUCCEEDED" {
		t.Fatalf("completed %v", done)
	}
	_, models := g.do("GET", key, "/models/wan-t2v", "")
	if fmt.Sprint(models["output_modalities"]) != "[video]" || fmt.Sprint(models["input_modalities"]) != "[text]" {
		t.Fatalf("catalog entry %v", models)
	}
}

// startDashScope runs a billing gateway whose model wan-t2v (V2, text to video) is priced
// pricing (YAML) on a fake DashScope.
func startDashScope(t *testing.T, pricing string) (*gateway, *fakeupstream.Server) {
	t.Helper()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	return startGateway(t, fmt.Sprintf(`billing: {enabled: true}
providers:
  - {name: wan, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: wan-t2v
    family: V2
    variant: t2v
    providers: [{provider: wan, model: wan2.2-t2v-plus}]
    pricing: %s
`, fake.DashScopeURL(), pricing), "FAKE_PROVIDER_KEY="+providerKey), fake
}

// TestKlingVideoTask: a V3 task through Envoy with the key pair from the environment: Kling
// checks the gateway's JWT, runs the model named in model_name, and the task completes and is
// billed on Kling's durations; a Kling provider whose key pair is missing cannot take traffic.
func TestKlingVideoTask(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{KlingAccessKey: "ak-test", KlingSecretKey: "sk-test-secret"})
	g := startGateway(t, fmt.Sprintf(`billing: {enabled: true}
providers:
  - {name: kling, type: kling, base_url: %s, access_key: "${KLING_AK}", secret_key: "${KLING_SK}"}
models:
  - id: kling-2
    family: V3
    providers: [{provider: kling, model: kling-v2-master}]
    pricing: {request: "0", duration: "0.07"}
`, fake.KlingURL()), "KLING_AK=ak-test", "KLING_SK=sk-test-secret")
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	if code, obj := g.do("POST", key, "/videos", `{"model":"kling-2","prompt":"a fox","duration":5}`); code != 400 {
		t.Fatalf("numeric duration: %d %v", code, obj)
	}
	code, obj := g.do("POST", key, "/videos", `{"model":"kling-2","prompt":"a fox","duration":"10","mode":"pro"}`)
	id, _ := obj["id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("create: %d %v", code, obj)
	}
	if m := fake.KlingModels(); len(m) != 1 || m[0] != "kling-v2-master" {
		t.Fatalf("Kling ran %v", m)
	}
	var done map[string]any
	waitFor(t, "the task to complete", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	if done["cost"] != "0.7" || done["provider_status"] != "succeed" {
		t.Fatalf("completed %v", done)
	}
	for _, r := range fake.Requests() {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ey") {
			t.Fatalf("Kling got %q", r.Header.Get("Authorization"))
		}
	}
}

// TestOpenAINodeSDKVideos: the official Node SDK's videos.create and videos.retrieve against a
// V1 model, to completion, and its errors; and against a V2 model with its top-level prompt.
func TestOpenAINodeSDKVideos(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("TOLLWAY_NODE_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot, "test", "clients", "node")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Fatalf("the Node SDK client is not installed (%v): run `make clients`", err)
	}
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, mediaConfig("", fake.MiniMaxURL(), fake.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "node", "5"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "--test", "videos-sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOLLWAY_BASE_URL="+g.BaseURL, "TOLLWAY_API_KEY="+g.newKey("node"), "TOLLWAY_MODEL=hailuo-02", "TOLLWAY_V2_MODEL=wan-t2v")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil || !strings.Contains(string(out), "# pass 3") || !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("OpenAI Node SDK videos suite failed: %v", err)
	}
	checkSDKPromptReachedDashScope(t, fake)
}

// v1Config is a billed gateway with one V1 (MiniMax) video model on fake, priced $0.05 a
// request and $0.045 a second.
func v1Config(fake *fakeupstream.Server) string {
	return fmt.Sprintf(`billing: {enabled: true}
providers:
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`, fake.MiniMaxURL())
}

// TestCallbackAllowListFollowsReload: callbacks.allow_private is read again on reload: a
// loopback callback_url refused at creation before the reload is accepted after it, and its
// deliveries (checked again at every connection) reach the receiver.
func TestCallbackAllowListFollowsReload(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	var delivered sync.WaitGroup
	delivered.Add(1)
	var once sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(delivered.Done)
	}))
	defer hook.Close()
	g := startGateway(t, v1Config(fake), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	create := `{"model":"hailuo-02","prompt":"a fox","callback_url":"` + hook.URL + `/v"}`
	if code, obj := g.do("POST", key, "/videos", create); code != 400 || obj["error"].(map[string]any)["code"] != "invalid_callback_url" {
		t.Fatalf("loopback callback before allow_private: %d %v", code, obj)
	}
	written, err := os.ReadFile(g.CfgPath) // the harness's listen: section and ours
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.CfgPath, append([]byte("callbacks: {allow_private: [127.0.0.1]}\n"), written...), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := g.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %v", code, out)
	}
	code, obj := g.do("POST", key, "/videos", create)
	if code != 200 {
		t.Fatalf("loopback callback after allow_private: %d %v", code, obj)
	}
	done := make(chan struct{})
	go func() { delivered.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no callback delivered to the newly allowed address")
	}
}

// TestSlowCreateOutlastsTheMessageTimeout: a provider that takes longer to accept a task than
// Envoy's ext_proc message timeout (5 s) does not fail the create: ext_proc extends that
// timeout for the create (override_message_timeout).
func TestSlowCreateOutlastsTheMessageTimeout(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, v1Config(fake), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	fake.Script(fakeupstream.Fault{Delay: 7 * time.Second})
	start := time.Now()
	code, obj := g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a slow fox"}`)
	if code != 200 || obj["status"] != "queued" || time.Since(start) < 7*time.Second {
		t.Fatalf("slow create: %d %v after %s", code, obj, time.Since(start))
	}
}

// TestMediaEndpointsMatchTheModelKind: a video model at /v1/images and a chat model at
// /v1/videos are refused with the endpoint to use; a video task is not found under /v1/images.
func TestMediaEndpointsMatchTheModelKind(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	cfg := strings.Replace(v1Config(fake), "models:\n", fmt.Sprintf(`  - {name: chat, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: chatty
    providers: [{provider: chat, model: fake-llama-3}]
`, fake.URL()), 1)
	g := startGateway(t, cfg, "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	for _, c := range []struct{ path, body, want string }{
		{"/images", `{"model":"hailuo-02","prompt":"a fox"}`, "POST /v1/videos"},
		{"/videos", `{"model":"chatty","prompt":"a fox"}`, "POST /v1/chat/completions"},
		{"/images", `{"model":"nope","prompt":"a fox"}`, "GET /v1/models"},
	} {
		code, obj := g.do("POST", key, c.path, c.body)
		e, _ := obj["error"].(map[string]any)
		if code != 400 || e["code"] != "model_not_found" || !strings.Contains(fmt.Sprint(e["message"]), c.want) {
			t.Errorf("POST %s %s: %d %v, want a 400 naming %s", c.path, c.body, code, obj, c.want)
		}
	}
	code, obj := g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a fox"}`)
	if code != 200 {
		t.Fatalf("create: %d %v", code, obj)
	}
	if code, obj := g.do("GET", key, "/images/"+obj["id"].(string), ""); code != 404 || !strings.Contains(fmt.Sprint(obj["error"]), "GET /v1/videos/") {
		t.Fatalf("a video under /v1/images: %d %v", code, obj)
	}
}

// TestKlingVideoFormKeepsDurationAString: a form carries only text; a V3 form's duration "5"
// stays the string Kling requires (its family says so) instead of being read as a number.
func TestKlingVideoFormKeepsDurationAString(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{KlingAccessKey: "ak-test", KlingSecretKey: "sk-test-secret"})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: kling, type: kling, base_url: %s, access_key: "${KLING_AK}", secret_key: "${KLING_SK}"}
models:
  - id: kling-2
    family: V3
    providers: [{provider: kling, model: kling-v2-master}]
`, fake.KlingURL()), "KLING_AK=ak-test", "KLING_SK=sk-test-secret")
	g.postForm(g.newKey("acme"), "/videos", map[string]string{"model": "kling-2", "prompt": "7", "duration": "5", "cfg_scale": "0.5"})
	var sent map[string]any
	for _, r := range fake.Requests() {
		if r.Path == "/v1/videos/text2video" {
			_ = json.Unmarshal(r.Body, &sent)
		}
	}
	if sent["duration"] != "5" || sent["prompt"] != "7" || sent["cfg_scale"] != 0.5 {
		t.Fatalf("Kling got %v", sent)
	}
}

// TestVideoRoutes: media endpoints take route ids like chat (docs/api.md#routes: every
// generation endpoint accepts route and route_mode). A priority route falls back from a model whose
// provider is down to the next model, across families, each validating the body its own way;
// a mode-mapping route picks the model of route_mode; route.provider is ignored under a route;
// a chat route at /v1/videos, an unknown route, a paused one and a bad mode are refused before
// any provider call; the task names the model that ran and the route.
func TestVideoRoutes(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, KlingAccessKey: "ak-test", KlingSecretKey: "sk-test-secret"})
	g := startGateway(t, fmt.Sprintf(`billing: {enabled: true}
providers:
  - {name: hailuo, type: minimax, base_url: %[1]s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: hailuo-down, type: minimax, base_url: "http://127.0.0.1:1", api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: kling, type: kling, base_url: %[2]s, access_key: "${KLING_AK}", secret_key: "${KLING_SK}"}
  - {name: chat, type: openai, base_url: %[3]s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: hailuo-down
    family: V1
    providers: [{provider: hailuo-down, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
  - id: kling-2
    family: V3
    providers: [{provider: kling, model: kling-v2-master}]
    pricing: {request: "0", duration: "0.07"}
  - id: gpt-4o-mini
    providers: [{provider: chat, model: fake-llama-3}]
    pricing: {request: "0", prompt: "0.000001", completion: "0.000002"}
routes:
  - {name: clips, rule: priority_fallback, models: [hailuo-down, hailuo-02]}
  - {name: tiers, rule: mode_mapping, modes: {fast: hailuo-02, balanced: hailuo-02, deep: kling-2}}
  - {name: talk, rule: priority_fallback, models: [gpt-4o-mini]}
  - {name: resting, rule: priority_fallback, models: [hailuo-02], status: paused}
`, fake.MiniMaxURL(), fake.KlingURL(), fake.URL()), "FAKE_PROVIDER_KEY="+providerKey, "KLING_AK=ak-test", "KLING_SK=sk-test-secret")
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	refusals := []struct{ body, code string }{
		{`{"model":"route:nope","prompt":"a fox"}`, "route_not_found"},
		{`{"model":"route:talk","prompt":"a fox"}`, "model_not_found"},
		{`{"model":"route:resting","prompt":"a fox"}`, "route_paused"},
		{`{"model":"route:tiers","route_mode":"slow","prompt":"a fox"}`, "invalid_route_mode"},
		{`{"model":"route:tiers","route_mode":"deep","prompt":"a fox","duration":5}`, "invalid_request"}, // V3 wants "5"
		{`{"model":"route:clips","prompt":"a fox","duration":7}`, "invalid_request"},
	}
	for _, r := range refusals {
		if code, obj := g.do("POST", key, "/videos", r.body); code < 400 || code >= 500 || obj["error"].(map[string]any)["code"] != r.code {
			t.Errorf("%s: %d %v, want %s", r.body, code, obj, r.code)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("refused requests reached a provider %d times", n)
	}
	// Priority: the first model's provider is down, the second model takes the task.
	code, obj := g.do("POST", key, "/videos", `{"model":"route:clips","prompt":"a fox","duration":6,"route":{"provider":"hailuo-down"}}`)
	if code != 200 || obj["model"] != "hailuo-02" || obj["route"] != "route:clips" || obj["provider"] != "hailuo" {
		t.Fatalf("priority route: %d %v", code, obj)
	}
	id := obj["id"].(string)
	var done map[string]any
	waitFor(t, "the routed task to complete", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	if done["cost"] != "0.32" || done["route"] != "route:clips" {
		t.Fatalf("completed %v", done)
	}
	// Mode mapping: deep is Kling (V3, duration a string), the default balanced is MiniMax.
	code, obj = g.do("POST", key, "/videos", `{"model":"route:tiers","route_mode":"deep","prompt":"a fox","duration":"5"}`)
	if code != 200 || obj["model"] != "kling-2" || obj["provider"] != "kling" {
		t.Fatalf("deep: %d %v", code, obj)
	}
	code, obj = g.do("POST", key, "/videos", `{"model":"route:tiers","prompt":"a fox"}`)
	if code != 200 || obj["model"] != "hailuo-02" {
		t.Fatalf("balanced: %d %v", code, obj)
	}
	// A key limited to one model may not use a route reaching another.
	narrow := g.newKey("acme", "--models", "hailuo-02")
	if code, obj := g.do("POST", narrow, "/videos", `{"model":"route:clips","prompt":"a fox"}`); code != 403 {
		t.Fatalf("narrow key: %d %v", code, obj)
	}
}
