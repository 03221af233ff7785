package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestClientGoneStopsTheTaskCreate: a client that hangs up while the first provider is answering
// its video create (Envoy then ends the ext_proc stream) gets no task from the second provider:
// nothing is created, run or billed for a client that is gone. The create already sent runs to
// its answer (deliberately: a task a provider accepted must be recorded).
func TestClientGoneStopsTheTaskCreate(t *testing.T) {
	t.Parallel()
	first := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	second := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, fmt.Sprintf(`billing: {enabled: true}
providers:
  - {name: first, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: second, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: hailuo-02
    family: V1
    providers: [{provider: first, model: MiniMax-Hailuo-02}, {provider: second, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`, first.MiniMaxURL(), second.MiniMaxURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	const answerAfter = 3 * time.Second
	first.Script(fakeupstream.Fault{Delay: answerAfter, Status: 503})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.BaseURL+"/videos", strings.NewReader(`{"model":"hailuo-02","prompt":"a fox"}`))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	go func() {
		waitFor(t, "the create to reach the first provider", 10*time.Second, func() bool { return first.RequestCount() > 0 })
		cancel() // the client hangs up while the first provider works on it
	}()
	sent := time.Now()
	if resp, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("the create the client abandoned: %v %v", resp, err)
	}
	time.Sleep(answerAfter + time.Second - time.Since(sent)) // the first provider has answered
	if n := second.RequestCount(); n != 0 {
		t.Fatalf("the second provider got %d requests after the client had gone: a task nobody asked for any more", n)
	}
}

// TestClientGoneCancelsTheVerify: a paid request whose client hangs up while the facilitator
// is verifying its credential cancels the /verify (the facilitator sees its caller hang up at
// once, not after x402.facilitator_timeout), and the business call never runs.
func TestClientGoneCancelsTheVerify(t *testing.T) {
	t.Parallel()
	p := startPaid(t)
	sig := p.capture("chat-mini", paidChat, "--scheme", "exact").Signature
	p.reset()
	p.control(`{"delay_ms": 30000}`)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", p.paidURL("chat-mini"), strings.NewReader(paidChat))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("payment-signature", sig)
	go func() {
		waitFor(t, "the facilitator's /verify", 20*time.Second, func() bool { v, _ := p.facilitatorCalls(); return v > 0 })
		cancel() // the client hangs up while the facilitator verifies
	}()
	if resp, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("the paid request the client abandoned: %v %v", resp, err)
	}
	var verify map[string]any
	waitFor(t, "the /verify to be cancelled", 3*time.Second, func() bool {
		verify = p.lastCall("/verify")
		return verify["aborted"] == true
	})
	t.Logf("the facilitator saw its /verify cancelled %v ms after it arrived", verify["aborted_ms"])
	if n := p.fake.RequestCount(); n != 0 {
		t.Fatalf("the business call ran %d times for a client that had gone", n)
	}
}

// lastCall is the facilitator's last call to path, as /__calls lists it.
func (p *paidGateway) lastCall(path string) map[string]any {
	p.t.Helper()
	resp, err := http.Get(p.bed.FacilitatorURL + "/__calls")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct{ Calls []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		p.t.Fatal(err)
	}
	for i := len(c.Calls) - 1; i >= 0; i-- {
		if c.Calls[i]["path"] == path {
			return c.Calls[i]
		}
	}
	return nil
}
