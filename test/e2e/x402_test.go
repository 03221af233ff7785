package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// The x402 tests pay through the real Envoy with the official reference clients (test/x402's
// pay.mjs and pay.py) against a local chain, a real EIP-3009 token, Permit2 and a real
// facilitator (the offline test bed), and check balances on chain.

// paidGateway is a gateway whose paid endpoints run chat on fake and video tasks on MiniMax,
// paid in the bed's token; pay_url is the gateway's own public address.
type paidGateway struct {
	*gateway
	bed  *harness.Bed
	fake *fakeupstream.Server
}

// x402Config is the x402: section of the paid gateway; %[1]s is the bed's network, %[2]s its
// token, %[3]s pay_to, %[4]s the facilitator's URL, %[5]s its signer, http://pay-url.invalid the gateway's.
const x402Config = `x402:
  pay_url: http://pay-url.invalid
  facilitator_url: %[4]s
  endpoints:
    - slug: chat-mini
      target: /v1/chat/completions
      models: [gpt-4o-mini]
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.01", asset_decimals: 6, extra: {name: USDC, version: "2"}, max_timeout_seconds: 60}
        - {scheme: upto, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", max_price: "0.05", asset_decimals: 6, extra: {name: USDC, version: "2", facilitatorAddress: "%[5]s"}}
    - slug: chat-quote
      target: /v1/chat/completions
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", asset_decimals: 6, extra: {name: USDC, version: "2"}}
    - slug: chat-keyed
      target: /v1/chat/completions
      require_key: true
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.002", asset_decimals: 6, extra: {name: USDC, version: "2"}}
    - slug: video
      target: /v1/videos
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.5", asset_decimals: 6, extra: {name: USDC, version: "2"}}
`

func startPaid(t *testing.T, bedArgs ...string) *paidGateway {
	t.Helper()
	bed, err := harness.StartBed(bedArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bed.Stop)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := fmt.Sprintf(`billing: {enabled: true}
callbacks: {allow_private: [127.0.0.1]}
providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: gpt-4o-mini
    providers: [{provider: fake, model: fake-llama-3}]
    max_output_length: 256
    pricing: {request: "0.001", prompt: "0.000001", completion: "0.000002"}
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`, fake.URL(), fake.MiniMaxURL()) + fmt.Sprintf(x402Config, bed.Network, bed.Asset, bed.PayTo, bed.FacilitatorURL, bed.FacilitatorAddress)
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey)
	// pay_url is the public address the harness picked: written in and reloaded.
	cfg, err := os.ReadFile(g.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.CfgPath, bytes.ReplaceAll(cfg, []byte("http://pay-url.invalid"), []byte("http://"+g.Public)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := g.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %v", code, out)
	}
	return &paidGateway{gateway: g, bed: bed, fake: fake}
}

// paidURL is {pay_url}/x402/{slug}.
func (p *paidGateway) paidURL(slug string) string { return "http://" + p.Public + "/x402/" + slug }

// payResult is what a reference client printed.
type payResult struct {
	Status          int               `json:"status"`
	Headers         map[string]string `json:"headers"`
	PaymentResponse map[string]any    `json:"payment_response"`
	Body            string            `json:"body"`
	Signature       string            `json:"payment_signature"`
	Error           string            `json:"error"`
}

// payNode pays for one request with the official Node client (@x402/fetch); extra are more
// pay.mjs flags (--scheme, --header).
func (p *paidGateway) payNode(slug, body string, extra ...string) payResult {
	p.t.Helper()
	args := append([]string{"pay.mjs", "--url", p.paidURL(slug), "--body", body, "--key", p.bed.PayerKey,
		"--rpc-url", p.bed.RPCURL, "--asset", p.bed.Asset}, extra...)
	return p.runClient("node", args)
}

// payPython is payNode with the official Python client (PyPI x402).
func (p *paidGateway) payPython(slug, body string, extra ...string) payResult {
	p.t.Helper()
	py := filepath.Join(p.bed.Dir, ".venv", "bin", "python")
	args := append([]string{"pay.py", "--url", p.paidURL(slug), "--body", body, "--key", p.bed.PayerKey,
		"--rpc-url", p.bed.RPCURL}, extra...)
	return p.runClient(py, args)
}

func (p *paidGateway) runClient(bin string, args []string) payResult {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = p.bed.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r payResult
	if jerr := json.Unmarshal(bytes.TrimSpace(out), &r); jerr != nil || r.Error != "" {
		p.t.Fatalf("%s %s: %v %s\nstdout: %s\nstderr: %s", bin, args[0], err, r.Error, out, stderr.String())
	}
	return r
}

// tokenBalance is an address's balance of the bed's token, in atomic units, read on chain.
func (p *paidGateway) tokenBalance(addr string) *big.Int {
	p.t.Helper()
	resp, err := http.Get(p.bed.FacilitatorURL + "/__balance?address=" + addr)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		p.t.Fatal(err)
	}
	n, ok := new(big.Int).SetString(b.Token, 10)
	if !ok {
		p.t.Fatalf("balance %q", b.Token)
	}
	return n
}

// facilitatorCalls is how many /verify and /settle calls the facilitator served.
func (p *paidGateway) facilitatorCalls() (verify, settle int) {
	p.t.Helper()
	resp, err := http.Get(p.bed.FacilitatorURL + "/__calls")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		Counts map[string]int `json:"counts"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &c); err != nil {
		p.t.Fatalf("__calls: %v %s", err, raw)
	}
	return c.Counts["verify"], c.Counts["settle"]
}

// control sets the facilitator's test controls.
func (p *paidGateway) control(body string) {
	p.t.Helper()
	resp, err := http.Post(p.bed.FacilitatorURL+"/__control", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		p.t.Fatalf("control %s: %v %v", body, resp, err)
	}
	resp.Body.Close()
}

// paymentRequired decodes a 402's PAYMENT-REQUIRED header.
func paymentRequired(t *testing.T, h http.Header) map[string]any {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(h.Get("Payment-Required"))
	var pr map[string]any
	if err != nil || json.Unmarshal(raw, &pr) != nil {
		t.Fatalf("PAYMENT-REQUIRED %q: %v", h.Get("Payment-Required"), err)
	}
	return pr
}

const paidChat = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello paid world"}],"max_tokens":64}`

// TestX402ChatExactAndUpto: the official Node client pays for chat through the real Envoy: a
// first request without payment gets 402 with PAYMENT-REQUIRED (every option, the exact URL,
// no-store); exact moves the signed price on chain and answers with PAYMENT-RESPONSE; upto
// moves the metered cost, not the cap; each payment is a usage record and no credits move.
func TestX402ChatExactAndUpto(t *testing.T) {
	p := startPaid(t)
	resp, err := http.Post(p.paidURL("chat-mini"), "application/json", strings.NewReader(paidChat))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 402 || resp.Header.Get("Cache-Control") != "no-store" || !strings.Contains(string(body), `"code":"payment_required"`) {
		t.Fatalf("unpaid: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	pr := paymentRequired(t, resp.Header)
	accepts, _ := pr["accepts"].([]any)
	res, _ := pr["resource"].(map[string]any)
	if pr["x402Version"] != float64(2) || len(accepts) != 2 || res["url"] != p.paidURL("chat-mini") {
		t.Fatalf("PAYMENT-REQUIRED %v", pr)
	}

	payer, payTo := p.tokenBalance(p.bed.PayerAddress), p.tokenBalance(p.bed.PayTo)
	r := p.payNode("chat-mini", paidChat, "--scheme", "exact")
	if r.Status != 200 || !strings.Contains(r.Body, "hello paid world") || r.PaymentResponse["success"] != true || r.PaymentResponse["transaction"] == "" {
		t.Fatalf("exact: %+v", r)
	}
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Int64() != 10000 {
		t.Fatalf("exact moved %s from the payer, want 10000 (0.01 USDC)", d)
	}
	if d := new(big.Int).Sub(p.tokenBalance(p.bed.PayTo), payTo); d.Int64() != 10000 {
		t.Fatalf("pay_to got %s, want 10000", d)
	}

	payer = p.tokenBalance(p.bed.PayerAddress)
	r = p.payNode("chat-mini", paidChat, "--scheme", "upto")
	if r.Status != 200 || r.PaymentResponse["success"] != true {
		t.Fatalf("upto: %+v", r)
	}
	recs := p.records("account=x402.chat-mini")
	if len(recs) != 2 {
		t.Fatalf("records %+v", recs)
	}
	var upto usageRecord
	for _, rec := range recs {
		if rec.Payment != nil && rec.Payment.Scheme == "upto" {
			upto = rec
		}
	}
	if upto.Payment == nil {
		t.Fatalf("no upto record: %+v", recs)
	}
	// The metered cost, rounded up to the token's unit, moved; the 0.05 cap did not.
	want := upto.Cost.Shift(6).Ceil().IntPart()
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Int64() != want || want >= 50000 || want <= 0 {
		t.Fatalf("upto moved %s, want the metered cost %s (%d atomic)", d, upto.Cost, want)
	}
	if upto.Payment.Amount != fmt.Sprint(want) || upto.Payment.Payer != r.PaymentResponse["payer"] {
		t.Fatalf("upto record %+v", upto.Payment)
	}
}
