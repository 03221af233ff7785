package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/recorded"
)

// recordedPrices are the catalog prices of TestRecorded's models, by catalog id, and of the
// models an answer may report usage on besides the one asked (an Anthropic advisor), by the
// provider's name for them: claude-opus-4-8 is in the catalog, claude-opus-4-7 is not.
var (
	recordedPrices = map[string]recorded.Prices{
		"rec-anthropic":    {Prompt: "0.000003", Completion: "0.000015", CacheRead: "0.0000003"},
		"rec-gemini":       {Prompt: "0.0000025", Completion: "0.00001"},
		"rec-gemini-image": {Request: "0.01", Image: "0.134", Prompt: "0.000002", Completion: "0.000012"},
	}
	recordedOthers = map[string]recorded.Prices{"claude-opus-4-8": {Prompt: "0.000005", Completion: "0.000025", CacheRead: "0.0000005"}}
)

func pricing(p recorded.Prices) string {
	return fmt.Sprintf(`pricing: {prompt: "%s", completion: "%s", input_cache_read: "%s", request: "%s", image: "%s"}`,
		or0(p.Prompt), or0(p.Completion), or0(p.CacheRead), or0(p.Request), or0(p.Image))
}

func or0(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// TestRecorded replays every recorded provider answer of the corpus (test/recorded) through the
// real Envoy and gateway: the fake provider sends the recording verbatim, event by event, and
// what the OpenAI client reads is checked like the adapters' corpus test checks the translator.
// An answer that reports usage is then checked in its usage record: its tokens and its cost to
// the digit, from the reference reader's counts and the catalog's prices (recorded.Bill).
// Image models' answers (kind image) go to an I3 model. Recordings with a status the gateway
// retries (401, 408, 429, 5xx) are left out: the fake replays once, and the retry would get its
// ordinary answer. recorded.KnownFailing applies here too: those recordings must still fail.
func TestRecorded(t *testing.T) {
	t.Parallel()
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
  - id: rec-advisor
    providers: [{provider: claude, model: claude-opus-4-8}]
    %s
  - id: rec-gemini
    providers: [{provider: gem, model: gemini-recorded}]
    %s
  - id: rec-gemini-image
    family: I3
    variant: pro
    providers: [{provider: gem, model: gemini-recorded-image}]
    %s
`, fake.AnthropicURL(), fake.GeminiURL(), pricing(recordedPrices["rec-anthropic"]), pricing(recordedOthers["claude-opus-4-8"]),
		pricing(recordedPrices["rec-gemini"]), pricing(recordedPrices["rec-gemini-image"])), "FAKE_PROVIDER_KEY="+providerKey)
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
			model := "rec-" + rec.Provider
			if rec.IsImage() {
				model = "rec-gemini-image"
			}
			body := fmt.Sprintf(`{"model":"%s","messages":[{"role":"user","content":"replay"}]}`, model)
			if rec.Meta.Stream {
				body = fmt.Sprintf(`{"model":"%s","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"replay"}]}`, model)
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
			if err == nil && !exp.Fails {
				err = checkRecordedBill(g, exp, model, resp.Header.Get("x-request-id"))
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

// checkRecordedBill checks the usage record of the request rid against what the recording
// reports: its tokens and its cost to the digit; usage on a model the catalog does not price
// is named in a WARN line instead.
func checkRecordedBill(g *gateway, exp *recorded.Expected, model, rid string) error {
	want, ok := exp.Bill(recordedPrices[model], recordedOthers)
	if !ok {
		return nil // no usage reported: billed from an estimate, checked elsewhere
	}
	var r *usageRecord
	deadline := time.Now().Add(10 * time.Second)
	for r == nil && time.Now().Before(deadline) {
		for _, c := range g.records("account=rec") {
			if strings.HasPrefix(c.RequestID, rid+".") {
				r = &c
			}
		}
		if r == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	switch {
	case rid == "" || r == nil:
		return fmt.Errorf("no usage record for request %q", rid)
	case r.Model != model || r.Estimated || r.PromptTokens != exp.Usage.Prompt || r.CompletionTokens != exp.Usage.Completion || r.CachedTokens != exp.Usage.Cached:
		return fmt.Errorf("usage record %+v, want %s prompt/completion/cached %d/%d/%d, not estimated", *r, model, exp.Usage.Prompt, exp.Usage.Completion, exp.Usage.Cached)
	case !r.Cost.Add(r.Overage).Equal(want):
		// What the answer metered is billed up to the hold and the rest kept as overage (a
		// compaction's cache reads pass the hold of the short prompt replayed here).
		return fmt.Errorf("billed %s + overage %s, want %s metered", r.Cost, r.Overage, want)
	case r.Overage.IsPositive() && !strings.Contains(g.logs.String(), "OVERAGE"):
		return fmt.Errorf("overage %s was not logged", r.Overage)
	}
	for _, o := range exp.Usage.Others {
		if _, priced := recordedOthers[o.Model]; !priced && !strings.Contains(g.logs.String(), "model="+o.Model) {
			return fmt.Errorf("usage on %s, which the catalog does not price, was not logged", o.Model)
		}
	}
	return nil
}
