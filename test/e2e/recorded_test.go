package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/recorded"
)

// TestRecorded replays every recorded provider answer of the corpus (test/recorded) through the
// real Envoy and gateway: the fake provider sends the recording verbatim, event by event, and
// what the OpenAI client reads is checked like the adapters' corpus test checks the translator.
// Recordings with a status the gateway retries (401, 408, 429, 5xx) are left out: the fake
// replays once, and the retry would get its ordinary answer. recorded.KnownFailing applies here
// too: those recordings must still fail.
func TestRecorded(t *testing.T) {
	recs, real, err := recorded.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	if !real {
		t.Logf("recorded corpus not found (set %s or place it in ../shared/recorded): %d cases written from issue 10 only", recorded.DirEnv, len(recs))
	}
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: time.Millisecond / 10})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: claude, type: anthropic, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: gem, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: rec-anthropic
    providers: [{provider: claude, model: claude-recorded}]
    %s
  - id: rec-gemini
    providers: [{provider: gem, model: gemini-recorded}]
    %s
`, fake.AnthropicURL(), fake.GeminiURL(), sdkPricing, sdkPricing), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "rec", "100000"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("rec")
	ran := 0
	for _, rec := range recs {
		switch s := rec.Meta.Status; {
		case s == 401 || s == 408 || s == 429 || s >= 500:
			continue
		}
		ran++
		t.Run(rec.FullName(), func(t *testing.T) {
			exp, err := recorded.Expect(rec)
			if err != nil {
				t.Fatal(err)
			}
			fake.Replay(rec.Meta.Status, rec.Meta.ContentType, rec.Wire())
			body := fmt.Sprintf(`{"model":"rec-%s","messages":[{"role":"user","content":"replay"}]}`, rec.Provider)
			if rec.Meta.Stream {
				body = fmt.Sprintf(`{"model":"rec-%s","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"replay"}]}`, rec.Provider)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp := g.chat(ctx, key, body)
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if fake.PendingFaults() != 0 {
				t.Fatal("the recording was not replayed")
			}
			if rec.Meta.Stream && resp.StatusCode == http.StatusOK {
				err = exp.CheckStream(out)
			} else { // a whole answer, or a stream refused before it began
				err = exp.CheckBody(resp.StatusCode, out, nil)
			}
			if err := rec.Verdict(err); err != nil {
				t.Error(err)
			}
		})
	}
	if real && ran < 100 {
		t.Fatalf("replayed %d of %d recordings, want the whole corpus", ran, len(recs))
	}
}
