package e2e

// `make run` for a newcomer with neither OPENAI_API_KEY nor a local model server: what the
// gateway does, pinned, and what the README says it does.

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// localModelServer is where the embedded default's provider local expects an OpenAI-compatible
// server (Ollama's port).
const localModelServer = "127.0.0.1:11434"

// noProviderMessage is the whole message of the 503 a chat request gets then.
const noProviderMessage = "the provider could not be reached (upstream connect error or disconnect/reset before headers. reset reason: remote connection failure); retry later, or use a model that GET /v1/models lists with is_ready: true"

// TestDefaultConfigWithoutProviders: the embedded default with no OPENAI_API_KEY and nothing on
// 127.0.0.1:11434 starts, logs which provider lacks its credential and how to give it one, lists
// gpt-4o-mini with is_ready false, and answers chat (whole and streamed) with 503
// upstream_unavailable whose message says what the client can do; the README says all of it.
func TestDefaultConfigWithoutProviders(t *testing.T) {
	t.Parallel()
	if c, err := net.DialTimeout("tcp", localModelServer, time.Second); err == nil {
		c.Close()
		t.Fatalf("a server listens on %s: this test pins the gateway with no local model server; stop it (e.g. ollama) for the test", localModelServer)
	}
	g := startRun(t, []string{}, "OPENAI_API_KEY=")
	if !strings.Contains(g.logs.String(), `level=WARN msg="provider has no credential; its models skip it: set the environment variable its credential names and restart tollway" provider=openai api_key=${OPENAI_API_KEY}`) {
		t.Errorf("the log does not say how to give openai its key:\n%s", g.logs.String())
	}
	waitFor(t, "gpt-4o-mini not ready", 20*time.Second, func() bool { return g.catalogEntries()["gpt-4o-mini"]["is_ready"] == false })
	wantError(t, g.chat(context.Background(), "", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`), 401, "invalid_api_key")

	if err := g.NewAccount(context.Background(), "acme", "5"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	for _, stream := range []string{"false", "true"} {
		resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`)
		if p := resp.Header.Get("x-tollway-provider"); p != "local" {
			t.Errorf("stream %s: x-tollway-provider %q, want local (openai has no key)", stream, p)
		}
		if e := wantError(t, resp, 503, "upstream_unavailable"); e.Error.Message != noProviderMessage {
			t.Errorf("stream %s: message %q, want %q", stream, e.Error.Message, noProviderMessage)
		}
	}
	// Nothing was charged for the requests that reached no provider.
	bal, avail := g.available("acme")
	if !bal.Equal(avail) || bal.String() != "5" {
		t.Errorf("acme after the 503s: balance %s, available %s; want 5 and 5", bal, avail)
	}

	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted, _ := json.Marshal(noProviderMessage)
	for _, want := range []string{"`is_ready: false`", "`503 upstream_unavailable`", string(quoted), "`make demo`", "OPENAI_API_KEY"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("the README's make run paragraph does not say %s", want)
		}
	}
}
