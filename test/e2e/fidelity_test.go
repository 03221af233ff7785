package e2e

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestProviderFidelityThroughEnvoy: through the real Envoy, a field the provider has no place
// for, nested or not, is listed in x-tollway-removed-params (the attempt's header reaches the
// router-level filter and no further), and a value the provider cannot take is a 400 naming
// the field and the fix, with nothing sent upstream.
func TestProviderFidelityThroughEnvoy(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]string{
		"anthropic": "messages[].name,seed",
		"gemini":    "messages[].name,tools[].function.strict",
	} {
		t.Run(kind, func(t *testing.T) {
			g, fake := startForSDK(t, kind)
			if err := g.NewAccount(context.Background(), "acme", "5"); err != nil {
				t.Fatal(err)
			}
			key := g.newKey("acme")
			resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","seed":3,"messages":[{"role":"user","content":"hi","name":"alice"}],
				"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{},"additionalProperties":false},"strict":true}}]}`)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("x-tollway-removed-params"); got != want {
				t.Errorf("x-tollway-removed-params = %q, want %q", got, want)
			}
			if got := resp.Header.Get("x-tollway-attempt-removed"); got != "" {
				t.Errorf("the attempt's internal header reached the client: %q", got)
			}
			if reqs := fake.Requests(); len(reqs) != 1 || strings.Contains(string(reqs[0].Body), "alice") {
				t.Errorf("upstream requests %d; the name must not reach the provider", len(reqs))
			}

			refused := map[string]string{
				"anthropic": `{"model":"gpt-4o-mini","temperature":1.7,"messages":[{"role":"user","content":"hi"}]}`,
				"gemini":    `{"model":"gpt-4o-mini","n":2,"messages":[{"role":"user","content":"hi"}]}`,
			}[kind]
			resp = g.chat(context.Background(), key, refused)
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"invalid_request"`) || !strings.Contains(string(body), "send") {
				t.Errorf("status %d: %s; want 400 invalid_request naming the fix", resp.StatusCode, body)
			}
			if n := fake.RequestCount(); n != 1 {
				t.Errorf("the provider saw %d requests; the refused one must not reach it", n)
			}
		})
	}
}
