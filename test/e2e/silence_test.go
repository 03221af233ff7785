package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/xds/ir"
)

// startSilentProvider starts a gateway with routing (its section) on a fake whose streams go
// silent after two events, and a key of the account acme with 10 credits.
func startSilentProvider(t *testing.T, routing string) (*gateway, string) {
	t.Helper()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, Hold: hold, HoldAfter: 2})
	g := startGateway(t, routing+pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1"), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	return g, g.newKey("acme")
}

// TestSilentProviderMidStreamEndsWithAnError: a provider that goes silent mid-stream for
// routing.attempt_timeout ends the client's stream with one error event in the spec's shape
// (upstream_timeout, the request id) after what was sent, and no [DONE]; the request is billed
// from what was sent, like a cut stream. That is the chunk lane's (routing.fast_lane: false): its
// ext_proc sees every chunk and ends the answer itself; on the fast lane (the default) Envoy
// can only cut the stream (TestFastLaneSilentProviderMidStreamIsCut).
func TestSilentProviderMidStreamEndsWithAnError(t *testing.T) {
	// Runs alone (no t.Parallel): it times a provider's silence.
	g, key := startSilentProvider(t, "routing: {attempt_timeout: 1s, fast_lane: false}\n")
	ctx := context.Background()
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

// TestFastLaneSilentProviderMidStreamIsCut: on the fast lane (the default) Envoy alone carries
// the answer, and Lua has no timer: a provider silent mid-stream for routing.attempt_timeout has
// the client's stream cut by Envoy's per-try idle timeout about that long after the last chunk
// (no error event, no [DONE]). The request is billed once as an estimate of the text that
// passed, and its access log line, metrics and WARN name it upstream_timeout as the chunk
// lane's do.
func TestFastLaneSilentProviderMidStreamIsCut(t *testing.T) {
	// Runs alone (no t.Parallel): it times a provider's silence.
	g, key := startSilentProvider(t, "routing: {attempt_timeout: 1s}\n")
	ctx := context.Background()
	resp := g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"one two three four five six"}]}`)
	rid := resp.Header.Get("x-request-id")
	if resp.StatusCode != 200 || rid == "" {
		t.Fatalf("stream: %d, request id %q", resp.StatusCode, rid)
	}
	var (
		events []string
		chars  int64
		last   time.Time
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events, last = append(events, d), time.Now()
			var c struct {
				Choices []struct{ Delta struct{ Content string } }
			}
			if json.Unmarshal([]byte(d), &c) == nil && len(c.Choices) > 0 {
				chars += int64(len(c.Choices[0].Delta.Content))
			}
		}
	}
	cut, readErr := time.Now(), sc.Err()
	resp.Body.Close()
	joined := strings.Join(events, "\n")
	if len(events) == 0 || chars == 0 || strings.Contains(joined, "[DONE]") || readErr == nil {
		t.Fatalf("want text, then a cut stream (a read error, no [DONE]); got error %v after:\n%s", readErr, joined)
	}
	if gap := cut.Sub(last); gap < 800*time.Millisecond || gap > 4*time.Second {
		t.Fatalf("the stream was cut %s after its last chunk; attempt_timeout is 1s", gap)
	}

	recs := g.waitRecords("acme", 1)
	r := recs[0]
	lo, hi := billing.TokensFromBytes(chars), billing.TokensFromBytes(chars+ir.MeterLagBytes)
	if !r.Estimated || r.CompletionTokens < lo || r.CompletionTokens > hi || !r.Cost.IsPositive() {
		t.Fatalf("record %+v: want an estimate of the %d bytes of text that passed (%d to %d completion tokens)", r, chars, lo, hi)
	}
	time.Sleep(1500 * time.Millisecond) // a second bill would come with the answer log's next entry
	if recs = g.records("account=acme"); len(recs) != 1 {
		t.Fatalf("%d usage records, want 1: %+v", len(recs), recs)
	}
	if got, want := g.balance("acme"), decimal.RequireFromString("10").Sub(r.Cost); !got.Equal(want) {
		t.Fatalf("balance %s, want %s: 10 less the one estimate (the hold released)", got, want)
	}

	line := g.accessLine(rid)
	for k, v := range map[string]any{"code": "upstream_timeout", "estimated": true, "cost": r.Cost.String(), "provider": "fake"} {
		if line[k] != v {
			t.Errorf("access line %s = %v, want %v (%v)", k, line[k], v, line)
		}
	}
	if n := strings.Count(g.logs.String(), `"request_id":"`+rid+`"`); n != 1 {
		t.Errorf("request %s has %d access log lines, want 1", rid, n)
	}
	if !strings.Contains(g.logs.String(), "went silent mid-answer") {
		t.Errorf("no WARN says the provider went silent")
	}
	counted := regexp.MustCompile(`tollway_requests_total\{[^}]*code="upstream_timeout"[^}]*model="priced"[^}]*\} 1\n`)
	var status int
	var metrics string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, metrics = g.adminRaw("GET", "/metrics", "", nil); counted.MatchString(metrics) {
			break
		}
	}
	if !counted.MatchString(metrics) {
		t.Errorf("tollway_requests_total does not count the request as upstream_timeout (GET /metrics: %d):\n%s", status, grepLines(metrics, "tollway_requests_total"))
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			b.WriteString(l)
		}
	}
	return b.String()
}
