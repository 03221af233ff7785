package e2e

import (
	"bufio"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

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
