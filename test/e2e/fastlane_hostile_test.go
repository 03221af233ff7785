package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/fakeupstream"
)

// The fast lane against a hostile client and a misbehaving provider: what it bills and answers
// must be what the chunk lane (routing.fast_lane: false) bills and answers, or the documented
// estimate's bound where the lanes estimate differently (docs/money.md).

// startLane is startFastLane with the lane chosen: fast or the chunk lane.
func startLane(t *testing.T, fast bool, opts fakeupstream.Options) (*gateway, *fakeupstream.Server) {
	t.Helper()
	if fast {
		return startFastLane(t, opts)
	}
	opts.APIKey = providerKey
	fake := fakeupstream.Start(t, opts)
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")+"routing: {fast_lane: false}\n", "FAKE_PROVIDER_KEY="+providerKey)
	return g, fake
}

// TestFastLaneCutStreamEstimateBound: a client that asks for text in a script of many tokens a
// character (Egyptian hieroglyphs: a token per UTF-8 byte, 4 a character) and gets the stream
// cut before the provider's usage is billed on the fast lane at least a third of the tokens the
// tokenizer counts in what it got (the chunk lane's estimate): the estimate is one token per
// three bytes of text, and a token is never less than a byte. Counted in characters, the fast
// lane billed about a twelfth.
func TestFastLaneCutStreamEstimateBound(t *testing.T) {
	t.Parallel()
	g, fake := startFastLane(t, fakeupstream.Options{ChunkDelay: 2 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	words := strings.Repeat("𓀀𓀁𓀂𓀃𓀄𓀅𓀆𓀇 ", 40) // the fake echoes the prompt, a word an event
	fake.CutStreamAfter(30)                  // about 28 words passed, then the connection dropped
	resp := g.chat(ctx, g.newKey("acme"), `{"model":"priced","stream":true,"messages":[{"role":"user","content":"`+words+`"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got strings.Builder
	for _, ev := range sseEvents(string(raw)) {
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if json.Unmarshal([]byte(ev), &c) == nil && len(c.Choices) > 0 {
			got.WriteString(c.Choices[0].Delta.Content)
		}
	}
	tokens := int64(billing.CountText(got.String()))
	r := g.waitRecords("acme", 1)[0]
	t.Logf("a cut stream of %d characters, %d bytes, %d tokens was billed %d completion tokens",
		utf8.RuneCountInString(got.String()), got.Len(), tokens, r.CompletionTokens)
	if tokens < 500 {
		t.Fatalf("the client got %q: the test needs most of the stream", got.String())
	}
	if !r.Estimated || 3*r.CompletionTokens < tokens {
		t.Errorf("the fast lane billed a cut stream %+v, under a third of the %d tokens the client got", r, tokens)
	}
}

// TestFastLaneEnvoyRestartBillsWhatPassed: a fast-lane stream whose Envoy dies mid-answer is
// billed what its answer log's periodic entries said passed (as the chunk lane bills what its
// chunks passed), not its prompt alone.
func TestFastLaneEnvoyRestartBillsWhatPassed(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	g, _ := startFastLane(t, fakeupstream.Options{Hold: hold, HoldAfter: 40})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	prompt := strings.Repeat("word ", 60) // echoed: 40 events of about 5 characters pass
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := g.chat(cctx, g.newKey("acme"), `{"model":"priced","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`)
	sc := bufio.NewScanner(resp.Body)
	var passed int
	for passed < 40 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			passed++
		}
	}
	time.Sleep(3 * time.Second) // several periodic entries of the answer log (every 0.5 s)
	if err := syscall.Kill(g.EnvoyPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := g.waitRecords("acme", 1)[0]
	// 40 events of "word " (5 characters): 200 characters, at least 66 tokens however counted.
	if r.CompletionTokens < 60 || !r.Estimated {
		t.Fatalf("a fast-lane stream cut with its Envoy after %d events was billed %+v: want an estimate of what passed", passed, r)
	}
}
