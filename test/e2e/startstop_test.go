package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// modelReady reads one model's is_ready from the public catalog.
func modelReady(t *testing.T, g *gateway, id string) bool {
	t.Helper()
	resp, err := http.Get(g.BaseURL + "/models/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		ID      string `json:"id"`
		IsReady *bool  `json:"is_ready"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 || m.IsReady == nil {
		t.Fatalf("GET /v1/models/%s: %d %v", id, resp.StatusCode, err)
	}
	return *m.IsReady
}

// noKeyProvider is a TLS provider whose credential variable is unset: its chain has no
// attempt Envoy may take.
const noKeyProvider = `  - {name: nokey, type: openai, base_url: "https://127.0.0.1:9/v1", api_key: "${TOLLWAY_TEST_UNSET_KEY}"}
`

// TestModelWithoutCredentialStarts: a model whose only provider has no credential must not stop
// the gateway (Envoy used to reject its chain cluster); it is listed with is_ready false and
// answers 503 model_unavailable, at start and when added by a reload.
func TestModelWithoutCredentialStarts(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := catalog(fake.URL()) + "  - {id: orphan, providers: [{provider: nokey, model: x}]}\n"
	body = strings.Replace(body, "models:\n", noKeyProvider+"models:\n", 1)
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey, "TOLLWAY_TEST_UNSET_KEY=")
	if strings.Contains(g.logs.String(), "REJECTED") {
		t.Fatalf("Envoy rejected the configuration:\n%s", g.logs.String())
	}
	key := g.newKey("acme")
	ctx := context.Background()
	if modelReady(t, g, "orphan") {
		t.Error("orphan: is_ready true without a credential")
	}
	if !modelReady(t, g, "gpt-4o-mini") {
		t.Error("gpt-4o-mini: is_ready false")
	}
	wantError(t, g.chat(ctx, key, `{"model":"orphan","messages":[{"role":"user","content":"hi"}]}`), 503, "model_unavailable")

	// A reload that adds a second such model is accepted too, and the other model keeps serving.
	cfg, _ := os.ReadFile(g.CfgPath)
	added := string(cfg) + "  - {id: orphan-two, providers: [{provider: nokey, model: y}]}\n"
	if err := os.WriteFile(g.CfgPath, []byte(added), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := g.adminJSON("POST", "/admin/v1/reload", nil)
	if code != 200 {
		t.Fatalf("reload with a model without credential: %d %v", code, out)
	}
	if modelReady(t, g, "orphan-two") {
		t.Error("orphan-two: is_ready true without a credential")
	}
	wantError(t, g.chat(ctx, key, `{"model":"orphan-two","messages":[{"role":"user","content":"hi"}]}`), 503, "model_unavailable")
	resp := g.chat(ctx, key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the served model after the reload: %d", resp.StatusCode)
	}
}

// TestEmptyCatalogStarts: a gateway with no providers and no models starts at once, then takes
// a provider and a model through the admin API and serves a chat request.
func TestEmptyCatalogStarts(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := startGateway(t, "")
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("start-up took %s", d)
	}
	fake := fakeupstream.Start(t, fakeupstream.Options{})
	code, out := g.adminJSON("PUT", "/admin/v1/providers/fake", map[string]any{"type": "openai", "base_url": fake.URL()})
	if code != 200 {
		t.Fatalf("PUT provider: %d %v", code, out)
	}
	code, out = g.adminJSON("PUT", "/admin/v1/models/first", map[string]any{
		"providers": []map[string]string{{"provider": "fake", "model": "fake-first"}},
	})
	if code != 200 {
		t.Fatalf("PUT model: %d %v", code, out)
	}
	resp := g.chat(context.Background(), g.newKey("acme"), `{"model":"first","messages":[{"role":"user","content":"hello empty"}]}`)
	defer resp.Body.Close()
	var answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != 200 || len(answer.Choices) == 0 {
		t.Fatalf("chat: %d %v %+v", resp.StatusCode, err, answer)
	}
	if !strings.Contains(answer.Choices[0].Message.Content, "hello empty") {
		t.Fatalf("answer %q", answer.Choices[0].Message.Content)
	}
	if n := fake.RequestCount(); n != 1 {
		t.Fatal(fmt.Sprintf("provider saw %d requests", n))
	}
}
