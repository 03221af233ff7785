package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestSilentProviderMidStreamEndsWithAnError: a provider that goes silent mid-stream for
// routing.attempt_timeout ends the client's stream with one error event in the spec's shape
// (upstream_timeout, the request id) after what was sent, and no [DONE]; the request is billed
// from what was sent, like a cut stream.
func TestSilentProviderMidStreamEndsWithAnError(t *testing.T) {
	// Runs alone (no t.Parallel): it times a provider's silence.
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, Hold: hold, HoldAfter: 2})
	g := startGateway(t, "routing: {attempt_timeout: 1s}\n"+pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1"), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	start := time.Now()
	resp := g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"one two three four five six"}]}`)
	rid := resp.Header.Get("x-request-id")
	events := streamEvents(t, resp)
	took := time.Since(start)
	joined := strings.Join(events, "\n")
	var last struct {
		Error struct {
			Message, Code string
			RequestID     string `json:"request_id"`
		}
	}
	if len(events) < 2 || json.Unmarshal([]byte(events[len(events)-1]), &last) != nil || last.Error.Code != "upstream_timeout" ||
		last.Error.RequestID != rid || rid == "" || strings.Contains(joined, "[DONE]") || !strings.Contains(joined, `"content"`) {
		t.Fatalf("stream of a provider silent mid-answer (request id %q, %s):\n%s", rid, took, joined)
	}
	if took > 10*time.Second {
		t.Fatalf("the stream ended after %s; attempt_timeout is 1s", took)
	}
	recs := g.waitRecords("acme", 1)
	if r := recs[0]; !r.Estimated || r.CompletionTokens == 0 || !r.Cost.IsPositive() {
		t.Fatalf("record %+v: want an estimate of what was sent", r)
	}
	logs := g.logs.String()
	if !strings.Contains(logs, `"code":"upstream_timeout"`) || !strings.Contains(logs, "went silent mid-answer") {
		t.Fatalf("the access log and the WARN do not say the provider went silent:\n%s", logs)
	}
}
