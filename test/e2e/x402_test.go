package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
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
    - slug: chat-twin
      target: /v1/chat/completions
      models: [gpt-4o-mini]
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.01", asset_decimals: 6, extra: {name: USDC, version: "2"}, max_timeout_seconds: 60}
    - slug: chat-short
      target: /v1/chat/completions
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.01", asset_decimals: 6, extra: {name: USDC, version: "2"}, max_timeout_seconds: 10}
    - slug: chat-limited
      target: /v1/chat/completions
      rate_limits: {requests_per_minute: 1}
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.01", asset_decimals: 6, extra: {name: USDC, version: "2"}}
    - slug: video
      target: /v1/videos
      accepts:
        - {scheme: exact, network: "%[1]s", asset: "%[2]s", pay_to: "%[3]s", price: "0.5", asset_decimals: 6, extra: {name: USDC, version: "2"}}
`

func startPaid(t *testing.T, bedArgs ...string) *paidGateway {
	t.Helper()
	return startPaidIn(t, "", bedArgs...)
}

// startPaidIn is startPaid with its store in dir ("": a temporary directory).
func startPaidIn(t *testing.T, dir string, bedArgs ...string) *paidGateway {
	t.Helper()
	bed, err := harness.StartBed(bedArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bed.Stop)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	if dir == "" {
		dir = t.TempDir()
	}
	return startPaidOn(t, bed, fake, dir, "")
}

// startPaidOn starts a paid gateway in dir (a restart in the same dir finds its store again)
// on a running bed and fake; x402Extra is more keys of the x402: section, each line indented
// two spaces.
func startPaidOn(t *testing.T, bed *harness.Bed, fake *fakeupstream.Server, dir, x402Extra string) *paidGateway {
	t.Helper()
	g := startGatewayIn(t, dir, paidBody(bed, fake, x402Extra), "FAKE_PROVIDER_KEY="+providerKey)
	setPayURL(t, g, "http://"+g.Public)
	return &paidGateway{gateway: g, bed: bed, fake: fake}
}

// paidBody is the paid gateway's configuration (pay_url http://pay-url.invalid until setPayURL).
func paidBody(bed *harness.Bed, fake *fakeupstream.Server, x402Extra string) string {
	return fmt.Sprintf(`billing: {enabled: true}
callbacks: {allow_private: [127.0.0.1]}
providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: gpt-4o-mini
    providers: [{provider: fake, model: fake-llama-3}]
    max_output_length: 256
    pricing: {request: "0.001", prompt: "0.000001", completion: "0.000002"}
  - id: gpt-4o
    providers: [{provider: fake, model: fake-llama-3}]
    pricing: {request: "0.002", prompt: "0.000002", completion: "0.000004"}
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`, fake.URL(), fake.MiniMaxURL()) + strings.Replace(fmt.Sprintf(x402Config, bed.Network, bed.Asset, bed.PayTo, bed.FacilitatorURL, bed.FacilitatorAddress), "x402:\n", "x402:\n"+x402Extra, 1)
}

// setPayURL writes url (a public address the harness picked) as g's pay_url and reloads.
func setPayURL(t testing.TB, g *gateway, url string) {
	t.Helper()
	cfg, err := os.ReadFile(g.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.CfgPath, bytes.ReplaceAll(cfg, []byte("http://pay-url.invalid"), []byte(url)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := g.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %v", code, out)
	}
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
	return p.payNodeAt(p.paidURL(slug), body, extra...)
}

// payNodeAt is payNode at any URL; a later --key in extra overrides the payer's.
func (p *paidGateway) payNodeAt(url, body string, extra ...string) payResult {
	p.t.Helper()
	args := append([]string{"pay.mjs", "--url", url, "--body", body, "--key", p.bed.PayerKey,
		"--rpc-url", p.bed.RPCURL, "--asset", p.bed.Asset}, extra...)
	return p.runClient("node", args)
}

// payPython is payNode with the official Python client (PyPI x402).
func (p *paidGateway) payPython(slug, body string, extra ...string) payResult {
	p.t.Helper()
	py := filepath.Join(p.bed.Dir, ".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		p.t.Fatalf("the official Python x402 client is not installed (%v): run `make deps`, which builds test/x402/.venv", err)
	}
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
		Verify, Settle *int
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &c); err != nil || c.Verify == nil || c.Settle == nil {
		p.t.Fatalf("__calls: %v %s", err, raw)
	}
	return *c.Verify, *c.Settle
}

// reset puts the facilitator's controls back to real and clears its call counts.
func (p *paidGateway) reset() {
	p.t.Helper()
	resp, err := http.Post(p.bed.FacilitatorURL+"/__reset", "application/json", nil)
	if err != nil || resp.StatusCode != 200 {
		p.t.Fatalf("__reset: %v %v", resp, err)
	}
	resp.Body.Close()
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
	t.Parallel()
	p := startPaid(t)
	_, pr := wantPayError(t, p.paidDo("POST", "/x402/chat-mini", paidChat, nil), 402, "payment_required")
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
	recs := p.waitRecords("x402.chat-mini", 2) // records are written after the answer
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

// paidDo sends a request to the gateway's public listener with net/http (POST with a JSON
// body when body is not empty, else GET) and the headers given.
func (p *paidGateway) paidDo(method, path, body string, hdr map[string]string) *http.Response {
	p.t.Helper()
	req, err := http.NewRequest(method, "http://"+p.Public+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("content-type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	return resp
}

// wantPayError checks a refusal from a paid endpoint: its status, the spec's error shape with
// a stable code and the request id of its x-request-id header; a 402 also carries a
// PAYMENT-REQUIRED (returned decoded) and Cache-Control: no-store, and nothing else does.
func wantPayError(t *testing.T, resp *http.Response, status int, code string) (apiError, map[string]any) {
	t.Helper()
	e := wantError(t, resp, status, code)
	if status != http.StatusPaymentRequired {
		if resp.Header.Get("Payment-Required") != "" {
			t.Fatalf("%d %s carries PAYMENT-REQUIRED", status, code)
		}
		return e, nil
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("402 %s without Cache-Control: no-store: %v", code, resp.Header)
	}
	return e, paymentRequired(t, resp.Header)
}

// wantError checks a refusal a reference client got: status, the spec's error shape, code
// and request id (the one of its x-request-id header).
func (r payResult) wantError(t *testing.T, status int, code string) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal([]byte(r.Body), &e); err != nil || r.Status != status || e.Error.Code != code ||
		e.Error.Message == "" || e.Error.RequestID == "" || e.Error.RequestID != r.Headers["x-request-id"] {
		t.Fatalf("got %d %s (headers %v), want %d %q in the spec's error shape", r.Status, r.Body, r.Headers, status, code)
	}
	return e
}

// capture gets an unused credential for slug's current requirements from the Node client: a
// server answers the client's first request with the gateway's own 402 for the same request
// and keeps the PAYMENT-SIGNATURE of its retry without forwarding it. The credential is the
// result's Signature.
func (p *paidGateway) capture(slug, body string, extra ...string) payResult {
	p.t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Payment-Signature") != "" {
			w.Header().Set("content-type", "application/json")
			_, _ = w.Write([]byte(`{"captured":true}`))
			return
		}
		b, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(r.Method, p.paidURL(slug), bytes.NewReader(b))
		for _, k := range []string{"Content-Type", "Authorization"} {
			if v := r.Header.Get(k); v != "" {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		for _, k := range []string{"Payment-Required", "Content-Type", "Cache-Control"} {
			w.Header().Set(k, resp.Header.Get(k))
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(raw)
	}))
	defer srv.Close()
	r := p.payNodeAt(srv.URL, body, extra...)
	if r.Status != 200 || r.Signature == "" || !strings.Contains(r.Body, "captured") {
		p.t.Fatalf("capture at %s: %+v", slug, r)
	}
	return r
}

// tamper is the credential sig with its decoded JSON changed by edit.
func tamper(t *testing.T, sig string, edit func(pp map[string]any)) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(sig)
	var pp map[string]any
	if err != nil || json.Unmarshal(raw, &pp) != nil {
		t.Fatalf("credential %q: %v", sig, err)
	}
	edit(pp)
	out, err := json.Marshal(pp)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(out)
}

// sseEvents are the data of an SSE body's events, in order.
func sseEvents(body string) []string {
	var out []string
	for _, ev := range strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n\n") {
		for _, line := range strings.Split(ev, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, d)
			}
		}
	}
	return out
}

// decodeSettlement reads a PAYMENT-RESPONSE value.
func decodeSettlement(t *testing.T, h string) map[string]any {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(h)
	var sr map[string]any
	if err != nil || json.Unmarshal(raw, &sr) != nil {
		t.Fatalf("PAYMENT-RESPONSE %q: %v", h, err)
	}
	return sr
}

// paymentRecord is the newest usage record of account paid with scheme, once account has n
// records (they are written after the answer, and listed newest first).
func (p *paidGateway) paymentRecord(account, scheme string, n int) usageRecord {
	p.t.Helper()
	for _, rec := range p.waitRecords(account, n) {
		if rec.Payment != nil && rec.Payment.Scheme == scheme {
			return rec
		}
	}
	p.t.Fatalf("no %s payment among the records of %s", scheme, account)
	return usageRecord{}
}

const paidStream = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello paid stream"}],"max_tokens":64,"stream":true}`

// streamText is the content a chat stream's events carry.
func streamText(events []string) string {
	var text strings.Builder
	for _, ev := range events {
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		_ = json.Unmarshal([]byte(ev), &c)
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	return text.String()
}

// checkPaidStream checks a streamed paid answer: 200, SSE ending with [DONE] and, for upto, its
// last event before [DONE] a chunk with no choices carrying the settlement (object and header
// value); it returns the settlement (upto: from that event, exact: from PAYMENT-RESPONSE).
func checkPaidStream(t *testing.T, who string, r payResult, scheme string) map[string]any {
	t.Helper()
	events := sseEvents(r.Body)
	if r.Status != 200 || !strings.HasPrefix(r.Headers["content-type"], "text/event-stream") || len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("%s %s stream: %+v", who, scheme, r)
	}
	if text := streamText(events); !strings.Contains(text, "hello paid stream") {
		t.Fatalf("%s %s stream text %q", who, scheme, text)
	}
	if scheme == "exact" {
		if r.PaymentResponse["success"] != true || r.PaymentResponse["transaction"] == "" || strings.Contains(r.Body, "payment_response") {
			t.Fatalf("%s exact stream: PAYMENT-RESPONSE %v; body %s", who, r.PaymentResponse, r.Body)
		}
		return r.PaymentResponse
	}
	if r.PaymentResponse != nil || r.Headers["payment-response"] != "" {
		t.Fatalf("%s upto stream settled on its headers, before its cost was known: %v", who, r.Headers)
	}
	var last struct {
		Object          string         `json:"object"`
		Choices         []any          `json:"choices"`
		PaymentResponse map[string]any `json:"payment_response"`
		Header          string         `json:"payment_response_header"`
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil || last.Object != "chat.completion.chunk" || last.Choices == nil || len(last.Choices) != 0 {
		t.Fatalf("%s upto stream: the event before [DONE] is %s", who, events[len(events)-2])
	}
	if sr := decodeSettlement(t, last.Header); last.PaymentResponse["success"] != true || last.PaymentResponse["transaction"] == "" ||
		fmt.Sprint(sr) != fmt.Sprint(last.PaymentResponse) {
		t.Fatalf("%s upto stream settlement %v, header %v", who, last.PaymentResponse, sr)
	}
	for _, ev := range events[:len(events)-2] {
		if strings.Contains(ev, "payment_response") {
			t.Fatalf("%s upto stream: a settlement before the last event: %s", who, ev)
		}
	}
	return last.PaymentResponse
}

// TestX402Streams: streamed chat paid through the real Envoy with the official Node client
// (exact and upto) and the official Python client (exact and upto, plain and streamed): exact
// answers with PAYMENT-RESPONSE on its headers and moves the price; a streamed upto answer ends
// with its settlement as the last event before [DONE] and moves the metered cost, not the cap;
// each payment is a usage record of x402.chat-mini. A streamed upto answer whose settlement
// fails says so in that last event, moves nothing and leaves no record.
func TestX402Streams(t *testing.T) {
	t.Parallel()
	p := startPaid(t)
	moved := func(before *big.Int) int64 {
		return new(big.Int).Sub(before, p.tokenBalance(p.bed.PayerAddress)).Int64()
	}
	n := 0
	checkUpto := func(who string, before *big.Int, sr map[string]any) {
		t.Helper()
		rec := p.paymentRecord("x402.chat-mini", "upto", n)
		want := rec.Cost.Shift(6).Ceil().IntPart()
		if d := moved(before); d != want || want <= 0 || want >= 50000 || sr["amount"] != fmt.Sprint(want) || rec.Payment.Amount != fmt.Sprint(want) ||
			rec.Payment.Transaction != sr["transaction"] || !strings.EqualFold(fmt.Sprint(sr["payer"]), p.bed.PayerAddress) {
			t.Fatalf("%s upto moved %d, settlement %v, record %+v %+v; want the metered cost %s (%d atomic)", who, d, sr, rec, rec.Payment, rec.Cost, want)
		}
	}
	checkExact := func(who string, before *big.Int, sr map[string]any) {
		t.Helper()
		if d := moved(before); d != 10000 || sr["amount"] != "10000" {
			t.Fatalf("%s exact moved %d (settlement %v), want 10000", who, d, sr)
		}
		if rec := p.paymentRecord("x402.chat-mini", "exact", n); rec.Payment.Transaction != sr["transaction"] {
			t.Fatalf("%s exact record %+v, settlement %v", who, rec.Payment, sr)
		}
	}

	for _, c := range []struct {
		who, scheme, body string
		pay               func(slug, body string, extra ...string) payResult
	}{
		{"node", "exact", paidStream, p.payNode},
		{"node", "upto", paidStream, p.payNode},
		{"python", "exact", paidChat, p.payPython},
		{"python", "upto", paidChat, p.payPython},
		{"python", "exact", paidStream, p.payPython},
		// A client that asked for usage gets its usage chunk, then the settlement.
		{"python", "upto", strings.Replace(paidStream, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1), p.payPython},
	} {
		before := p.tokenBalance(p.bed.PayerAddress)
		r := c.pay("chat-mini", c.body, "--scheme", c.scheme)
		n++
		var sr map[string]any
		if strings.Contains(c.body, `"stream":true`) {
			sr = checkPaidStream(t, c.who, r, c.scheme)
			if strings.Contains(c.body, "include_usage") {
				events := sseEvents(r.Body)
				if !strings.Contains(events[len(events)-3], `"prompt_tokens"`) {
					t.Fatalf("%s %s: no usage chunk before the settlement: %s", c.who, c.scheme, r.Body)
				}
			}
		} else {
			if r.Status != 200 || !strings.Contains(r.Body, "hello paid world") || r.PaymentResponse["success"] != true || r.Headers["payment-response"] == "" {
				t.Fatalf("%s %s: %+v", c.who, c.scheme, r)
			}
			sr = r.PaymentResponse
		}
		if c.scheme == "exact" {
			checkExact(c.who, before, sr)
		} else {
			checkUpto(c.who, before, sr)
		}
	}
	if recs := p.records("account=x402.chat-mini"); len(recs) != n {
		t.Fatalf("%d usage records for %d payments", len(recs), n)
	}
	if v, s := p.facilitatorCalls(); v != n || s != n {
		t.Fatalf("facilitator verify %d settle %d, want %d each", v, s, n)
	}

	// A streamed upto answer whose settlement fails: its 200 went out long ago, so its last
	// event before [DONE] says so (success false, no transaction); nothing moved, no record.
	p.control(`{"settle":"fail"}`)
	before := p.tokenBalance(p.bed.PayerAddress)
	r := p.payNode("chat-mini", paidStream, "--scheme", "upto")
	events := sseEvents(r.Body)
	if r.Status != 200 || len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("upto stream, settle failing: %+v", r)
	}
	var last struct {
		PaymentResponse map[string]any `json:"payment_response"`
		Header          string         `json:"payment_response_header"`
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil || last.PaymentResponse["success"] != false ||
		last.PaymentResponse["transaction"] != "" || decodeSettlement(t, last.Header)["success"] != false {
		t.Fatalf("upto stream, settle failing: the event before [DONE] is %s", events[len(events)-2])
	}
	if d := moved(before); d != 0 {
		t.Fatalf("a failed settlement moved %d", d)
	}
	if _, s := p.facilitatorCalls(); s != n+1 {
		t.Fatalf("settle calls %d, want %d", s, n+1)
	}
	time.Sleep(200 * time.Millisecond) // a record would be written as the stream ends
	if recs := p.records("account=x402.chat-mini"); len(recs) != n {
		t.Fatalf("a failed settlement left a record: %d records for %d payments", len(recs), n)
	}
}

// TestX402Endpoints: one gateway, the paid endpoints' rules through the real Envoy with the
// official Node client.
//   - A video task paid with exact through /x402/video: 200 with the task object and
//     PAYMENT-RESPONSE, the price moved on chain at creation, the task readable without a key
//     at GET /x402/video/{id} (not at another endpoint's) and polled to completion (meanwhile
//     the other cases run); one usage record with its payment; no credits moved anywhere.
//   - require_key: no key is a 401 before anything about payment (even with a credential; the
//     facilitator sees nothing); with a key, 402 then paid 200, the record under the key's
//     account, whose credits do not move.
//   - chat-quote (exact without a price): the 402's amount is this request's worst case in
//     atomic units, and exactly that moves; another request's quote differs, so the credential
//     does not pay for it.
//   - An invalid body gets its 400 before any 402; an unknown slug is 404; a model outside the
//     endpoint's models: is 403; a GET of the paid URL is 405.
func TestX402Endpoints(t *testing.T) {
	t.Parallel()
	p := startPaid(t)
	ctx := context.Background()
	if err := p.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := p.newKey("acme")

	// The video task, created first: its provider takes ~9 s to finish.
	payer, payTo := p.tokenBalance(p.bed.PayerAddress), p.tokenBalance(p.bed.PayTo)
	video := p.payNode("video", `{"model":"hailuo-02","prompt":"a paid fox in snow","duration":6,"resolution":"1080P"}`)
	var task map[string]any
	_ = json.Unmarshal([]byte(video.Body), &task)
	id, _ := task["id"].(string)
	if video.Status != 200 || !strings.HasPrefix(id, "video_") || task["object"] != "video" || task["model"] != "hailuo-02" ||
		video.PaymentResponse["success"] != true || video.PaymentResponse["transaction"] == "" || video.PaymentResponse["amount"] != "500000" {
		t.Fatalf("paid video: %+v", video)
	}
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Int64() != 500000 {
		t.Fatalf("the payer paid %s for the video, want 500000 (0.5 USDC)", d)
	}
	if d := new(big.Int).Sub(p.tokenBalance(p.bed.PayTo), payTo); d.Int64() != 500000 {
		t.Fatalf("pay_to got %s for the video, want 500000", d)
	}
	get := func(path string) (int, map[string]any) {
		resp := p.paidDo("GET", path, "", nil)
		defer resp.Body.Close()
		var obj map[string]any
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
		}
		return resp.StatusCode, obj
	}
	if code, obj := get("/x402/video/" + id); code != 200 || obj["id"] != id {
		t.Fatalf("GET /x402/video/%s: %d %v", id, code, obj)
	}
	wantPayError(t, p.paidDo("GET", "/x402/chat-mini/"+id, "", nil), 404, "not_found")
	wantPayError(t, p.paidDo("GET", "/x402/video/video_unknown", "", nil), 404, "not_found")

	// require_key.
	p.reset()
	keyed := p.payNode("chat-keyed", paidChat)
	keyed.wantError(t, 401, "invalid_api_key")
	wantPayError(t, p.paidDo("POST", "/x402/chat-keyed", paidChat, map[string]string{"authorization": "Bearer ale-nope"}), 401, "invalid_api_key")
	if v, s := p.facilitatorCalls(); v != 0 || s != 0 || keyed.Signature != "" {
		t.Fatalf("an unkeyed request reached payment: verify %d settle %d, signed %q", v, s, keyed.Signature)
	}
	_, pr := wantPayError(t, p.paidDo("POST", "/x402/chat-keyed", paidChat, map[string]string{"authorization": "Bearer " + key}), 402, "payment_required")
	if accepts, _ := pr["accepts"].([]any); len(accepts) != 1 || accepts[0].(map[string]any)["amount"] != "2000" {
		t.Fatalf("chat-keyed PAYMENT-REQUIRED %v", pr)
	}
	payer = p.tokenBalance(p.bed.PayerAddress)
	keyed = p.payNode("chat-keyed", paidChat, "--header", "authorization: Bearer "+key)
	if keyed.Status != 200 || !strings.Contains(keyed.Body, "hello paid world") || keyed.PaymentResponse["success"] != true {
		t.Fatalf("keyed paid chat: %+v", keyed)
	}
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Int64() != 2000 {
		t.Fatalf("keyed paid chat moved %s, want 2000", d)
	}
	// The credential shown without the key: the key is checked first (401, not "already used").
	wantPayError(t, p.paidDo("POST", "/x402/chat-keyed", paidChat, map[string]string{"payment-signature": keyed.Signature}), 401, "invalid_api_key")
	if recs := p.waitRecords("acme", 1); len(recs) != 1 || recs[0].Payment == nil || recs[0].Payment.Endpoint != "chat-keyed" || recs[0].Payment.Amount != "2000" {
		t.Fatalf("keyed paid record %+v", recs)
	}
	if b := p.balance("acme"); !b.Equal(decimal.RequireFromString("10")) {
		t.Fatalf("a paid request moved acme's credits: balance %s", b)
	}

	// chat-quote: the quote is the request's worst case (the billing hold's bound).
	quote := func(body string, maxTokens int64) int64 {
		bound, err := billing.PromptBound([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		worst := decimal.RequireFromString("0.001").
			Add(decimal.RequireFromString("0.000001").Mul(decimal.NewFromInt(int64(bound)))).
			Add(decimal.RequireFromString("0.000002").Mul(decimal.NewFromInt(maxTokens)))
		return worst.Shift(6).Ceil().IntPart()
	}
	_, pr = wantPayError(t, p.paidDo("POST", "/x402/chat-quote", paidChat, nil), 402, "payment_required")
	accepts, _ := pr["accepts"].([]any)
	if want := quote(paidChat, 64); len(accepts) != 1 || accepts[0].(map[string]any)["amount"] != fmt.Sprint(want) || want <= 1000 {
		t.Fatalf("chat-quote offer %v, want amount %d", pr, want)
	}
	payer = p.tokenBalance(p.bed.PayerAddress)
	quoted := p.payNode("chat-quote", paidChat)
	if quoted.Status != 200 || quoted.PaymentResponse["amount"] != fmt.Sprint(quote(paidChat, 64)) {
		t.Fatalf("quoted chat: %+v", quoted)
	}
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Int64() != quote(paidChat, 64) {
		t.Fatalf("quoted chat moved %s, want %d", d, quote(paidChat, 64))
	}
	bigger := strings.Replace(paidChat, `"max_tokens":64`, `"max_tokens":200`, 1)
	_, pr = wantPayError(t, p.paidDo("POST", "/x402/chat-quote", bigger, map[string]string{"payment-signature": quoted.Signature}), 402, "payment_mismatch")
	if msg, _ := pr["error"].(string); !strings.Contains(msg, "accepted.amount") || !strings.Contains(fmt.Sprint(pr["accepts"]), fmt.Sprint(quote(bigger, 200))) {
		t.Fatalf("another request's quote: %v", pr)
	}

	// Refusals before any payment (docs/x402.md#statuses): a request that cannot be read is 400, a
	// business parameter refused is 422 with the code the keyed business API gives it (which stays
	// 400), the endpoint's own model list 403 (in words that speak of the endpoint, not of a key).
	p.reset()
	hi := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/x402/chat-mini", `{"model":"gpt-4o-mini","messages":"hello"}`, 422, "invalid_messages"},
		{"POST", "/x402/chat-mini", `{"model":"gpt-4o-mini",` + hi + `,"max_tokens":-1}`, 422, "invalid_request"},
		{"POST", "/x402/chat-mini", `{` + hi + `}`, 422, "missing_model"},
		{"POST", "/x402/chat-quote", `{"model":"no-such-model",` + hi + `}`, 422, "model_not_found"},
		{"POST", "/x402/chat-quote", `{"model":"route:nope",` + hi + `}`, 422, "route_not_found"},
		{"POST", "/x402/chat-quote", `{"model":"gpt-4o","route_mode":"sideways",` + hi + `}`, 422, "invalid_route_mode"},
		{"POST", "/x402/chat-quote", `{"model":"gpt-4o","route":{"provider":"hailuo"},` + hi + `}`, 422, "provider_not_available"},
		{"POST", "/x402/video", `{"model":"hailuo-02"}`, 422, "invalid_request"},
		{"POST", "/x402/video", `{"model":"hailuo-02","prompt":"a fox","duration":7}`, 422, "invalid_request"},
		{"POST", "/x402/video", `{"model":"gpt-4o","prompt":"a fox"}`, 422, "model_not_found"},
		{"POST", "/x402/video", `{"model":"hailuo-02","prompt":"a fox","callback_url":"ftp://example.com/cb"}`, 422, "invalid_callback_url"},
		{"POST", "/x402/chat-mini", `{"model":"gpt-4o-mini",`, 400, "invalid_json"},
		{"POST", "/x402/chat-mini", `{"model":"gpt-4o-mini"} {}`, 400, "invalid_json"},
		{"POST", "/x402/video", `{"model":`, 400, "invalid_json"},
		{"POST", "/x402/chat-mini", "", 400, "invalid_request"}, // no body at all
		{"POST", "/x402/nope", paidChat, 404, "payment_endpoint_not_found"},
		{"POST", "/x402/chat-mini", strings.Replace(paidChat, "gpt-4o-mini", "gpt-4o", 1), 403, "model_not_allowed"},
		{"GET", "/x402/chat-mini", "", 405, "method_not_allowed"},
	} {
		e, _ := wantPayError(t, p.paidDo(c.method, c.path, c.body, nil), c.status, c.code)
		if c.status != http.StatusUnprocessableEntity {
			continue
		}
		// The keyed business API refuses the same body with 400 and the same code.
		keyedPath := "/v1/chat/completions"
		if strings.HasPrefix(c.path, "/x402/video") {
			keyedPath = "/v1/videos"
		}
		if k := wantError(t, p.paidDo("POST", keyedPath, c.body, map[string]string{"authorization": "Bearer " + key}), 400, c.code); k.Error.Message != e.Error.Message {
			t.Errorf("%s %s: the paid message %q differs from the keyed one %q", c.path, c.body, e.Error.Message, k.Error.Message)
		}
	}
	// A multipart form that cannot be parsed is a body that cannot be read: 400.
	form, _ := http.NewRequest("POST", p.paidURL("video"), strings.NewReader("--b\r\nnot a part header\r\n"))
	form.Header.Set("content-type", "multipart/form-data; boundary=b")
	formResp, err := http.DefaultClient.Do(form)
	if err != nil {
		t.Fatal(err)
	}
	wantPayError(t, formResp, 400, "invalid_request")
	// The endpoint's model list refused a request without a key: no key to blame.
	e, _ := wantPayError(t, p.paidDo("POST", "/x402/chat-mini", strings.Replace(paidChat, "gpt-4o-mini", "gpt-4o", 1), nil), 403, "model_not_allowed")
	if strings.Contains(strings.ToLower(e.Error.Message), "key") || !strings.Contains(e.Error.Message, "chat-mini") || !strings.Contains(e.Error.Message, "gpt-4o-mini") {
		t.Errorf("the endpoint's model list, no key sent: %q (want the endpoint and its models named, no key)", e.Error.Message)
	}
	// The reference clients see the 422 as it is, and sign nothing.
	bad := `{"model":"gpt-4o-mini",` + hi + `,"temperature":"hot"}`
	for name, r := range map[string]payResult{"node": p.payNode("chat-mini", bad), "python": p.payPython("chat-mini", bad)} {
		if r.wantError(t, 422, "invalid_request"); r.Signature != "" {
			t.Errorf("%s signed a credential for a refused body", name)
		}
	}
	// The model list narrows a keyed request too; an unrestricted endpoint runs the model.
	wantPayError(t, p.paidDo("POST", "/x402/chat-quote", strings.Replace(paidChat, "gpt-4o-mini", "gpt-4o", 1), nil), 402, "payment_required")
	if v, s := p.facilitatorCalls(); v != 0 || s != 0 {
		t.Fatalf("refusals reached the facilitator: verify %d settle %d", v, s)
	}

	// The video task, polled to completion without a key.
	var done map[string]any
	waitFor(t, "the paid task to complete", 30*time.Second, func() bool {
		code, obj := get("/x402/video/" + id)
		if code != 200 || obj["id"] != id {
			t.Fatalf("GET /x402/video/%s: %d %v", id, code, obj)
		}
		done = obj
		return obj["status"] == "completed"
	})
	if res, _ := done["result"].(map[string]any); res == nil || done["seconds"] != "6" {
		t.Fatalf("completed paid task %v", done)
	}
	// One record, written at creation with its payment; the task's end adds none and debits nothing.
	recs := p.records("account=x402.video")
	if len(recs) != 1 || recs[0].Payment == nil || recs[0].Payment.Amount != "500000" || recs[0].Payment.Scheme != "exact" ||
		recs[0].Payment.Transaction != video.PaymentResponse["transaction"] || recs[0].Model != "hailuo-02" || !recs[0].Payment.AmountUSD.Equal(decimal.RequireFromString("0.5")) {
		t.Fatalf("video records %+v", recs)
	}
	p.waitRecords("x402.chat-quote", 1)
	if all := p.records(""); len(all) != 3 { // the video, the keyed chat, the quoted chat
		t.Fatalf("usage records %+v", all)
	}
	_, accounts := p.adminJSON("GET", "/admin/v1/accounts", nil)
	for _, a := range accounts["data"].([]any) {
		if m := a.(map[string]any); m["id"] != "acme" || m["balance"] != "10" {
			t.Fatalf("accounts after paid requests: %v", accounts)
		}
	}
}

// TestX402Credentials: credentials the gateway must refuse, through the real Envoy, each
// without running the business call (the fake's count unchanged) unless said otherwise, and
// each refusal in the spec's error shape with a stable code and the request id:
// malformed PAYMENT-SIGNATURE (bad base64, bad JSON, x402Version 1: 400); `accepted` tampered
// in amount, payTo, network or asset (402 payment_mismatch, the fresh PAYMENT-REQUIRED's error
// naming the field); forged signatures (402, the facilitator never called); fifty concurrent
// copies of one credential (one 200, the others 409 payment_in_progress while it runs and 402
// payment_already_used after, one business call, one settle); a replay and the same credential
// at a twin endpoint (402 payment_already_used); a payer without tokens (402 from the
// facilitator's verify); the facilitator down (503); a business error (a provider's 400 passed
// on as 422, the business call ran, nothing settled); a failed settlement
// (402 with PAYMENT-RESPONSE success:false, the result withheld though the business call ran,
// nothing moved on chain); a credential with less than 6 s left, or past its validBefore
// (402 payment_expired, the facilitator never called).
func TestX402Credentials(t *testing.T) {
	t.Parallel()
	p := startPaid(t)
	chatCalls := func() int {
		n := 0
		for _, r := range p.fake.Requests() {
			if strings.HasSuffix(r.Path, "/chat/completions") {
				n++
			}
		}
		return n
	}
	send := func(slug, body, sig string) *http.Response {
		return p.paidDo("POST", "/x402/"+slug, body, map[string]string{"payment-signature": sig})
	}
	// Two unused credentials: one for chat-short (valid 10 s, sent last when expired), one for
	// chat-mini's exact option.
	short := p.capture("chat-short", paidChat)
	var validBefore int64
	if pl, _ := short.payloadAuthorization()["validBefore"].(string); pl != "" {
		validBefore, _ = strconv.ParseInt(pl, 10, 64)
	}
	if validBefore == 0 || validBefore > time.Now().Unix()+12 {
		t.Fatalf("chat-short credential valid until %d (now %d)", validBefore, time.Now().Unix())
	}
	cred := p.capture("chat-mini", paidChat, "--scheme", "exact").Signature
	fifty := p.capture("chat-mini", paidChat, "--scheme", "exact").Signature
	p.reset()
	calls := chatCalls()
	noBusiness := func(what string) {
		t.Helper()
		if n := chatCalls(); n != calls {
			t.Fatalf("%s ran the business call (%d chat requests, want %d)", what, n, calls)
		}
	}

	// Malformed: 400, whatever else the request is.
	raw, _ := base64.StdEncoding.DecodeString(cred)
	for name, sig := range map[string]string{
		"bad base64":    "%%% not base64 %%%",
		"bad JSON":      base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"accepted":`)),
		"x402Version 1": tamper(t, cred, func(pp map[string]any) { pp["x402Version"] = 1 }),
		"not an object": base64.StdEncoding.EncodeToString([]byte(`[` + string(raw) + `]`)),
	} {
		e, _ := wantPayError(t, send("chat-mini", paidChat, sig), 400, "invalid_payment_signature")
		if strings.Contains(e.Error.Message, cred[:20]) {
			t.Fatalf("%s: the message echoes the credential: %s", name, e.Error.Message)
		}
	}
	// accepted tampered: a 402 whose fresh PAYMENT-REQUIRED says which field.
	other := "0x1111111111111111111111111111111111111111"
	for field, edit := range map[string]func(a map[string]any){
		"amount":  func(a map[string]any) { a["amount"] = "1" },
		"payTo":   func(a map[string]any) { a["payTo"] = other },
		"network": func(a map[string]any) { a["network"] = "eip155:8453" },
		"asset":   func(a map[string]any) { a["asset"] = other },
	} {
		sig := tamper(t, cred, func(pp map[string]any) { edit(pp["accepted"].(map[string]any)) })
		_, pr := wantPayError(t, send("chat-mini", paidChat, sig), 402, "payment_mismatch")
		if msg, _ := pr["error"].(string); !strings.Contains(msg, "accepted."+field+" ") || len(pr["accepts"].([]any)) != 2 {
			t.Fatalf("accepted.%s tampered: PAYMENT-REQUIRED %v", field, pr)
		}
	}
	// Forged: a signature that is not the payer's, and a payer the signature is not from.
	forged := tamper(t, cred, func(pp map[string]any) {
		pl := pp["payload"].(map[string]any)
		s := pl["signature"].(string)
		pl["signature"] = s[:10] + strings.Map(func(r rune) rune {
			if r == 'f' {
				return 'e'
			}
			return 'f'
		}, s[10:12]) + s[12:]
	})
	notFrom := tamper(t, cred, func(pp map[string]any) {
		pp["payload"].(map[string]any)["authorization"].(map[string]any)["from"] = other
	})
	for _, sig := range []string{forged, notFrom} {
		wantPayError(t, send("chat-mini", paidChat, sig), 402, "payment_signature_invalid")
	}
	if v, s := p.facilitatorCalls(); v != 0 || s != 0 {
		t.Fatalf("refused credentials reached the facilitator: verify %d settle %d", v, s)
	}
	noBusiness("refused credentials")

	// The untampered credential was not burned by any of those. A copy of it sent while the
	// request it pays for is still running (its business call held 2 s) is 409
	// payment_in_progress, at this endpoint and at its twin; once that request has ended, a copy
	// is 402 payment_already_used.
	payer, payTo := p.tokenBalance(p.bed.PayerAddress), p.tokenBalance(p.bed.PayTo)
	type outcome struct {
		status int
		code   string
		body   string
		header http.Header
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 50}, Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	do := func(slug, sig string) outcome {
		req, _ := http.NewRequest("POST", p.paidURL(slug), strings.NewReader(paidChat))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("payment-signature", sig)
		resp, err := client.Do(req)
		if err != nil {
			return outcome{body: err.Error()}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e apiError
		_ = json.Unmarshal(b, &e)
		return outcome{resp.StatusCode, e.Error.Code, string(b), resp.Header}
	}
	paid := func(o outcome) bool {
		return o.status == 200 && strings.Contains(o.body, "hello paid world") && o.header.Get("Payment-Response") != ""
	}
	p.fake.Script(fakeupstream.Fault{Delay: 2 * time.Second})
	held := make(chan outcome, 1)
	go func() { held <- do("chat-mini", cred) }()
	waitFor(t, "the paid request's business call", 10*time.Second, func() bool { return chatCalls() == calls+1 })
	for _, slug := range []string{"chat-mini", "chat-twin"} {
		e, _ := wantPayError(t, send(slug, paidChat, cred), 409, "payment_in_progress")
		if !strings.Contains(e.Error.Message, "in progress") {
			t.Errorf("409 at %s: %q", slug, e.Error.Message)
		}
	}
	if o := <-held; !paid(o) {
		t.Fatalf("the held paid request: %d %s %v", o.status, o.body, o.header)
	}
	calls++
	wantPayError(t, send("chat-mini", paidChat, cred), 402, "payment_already_used")
	noBusiness("copies of a credential in use")
	if v, s := p.facilitatorCalls(); v != 1 || s != 1 {
		t.Fatalf("a credential and its copies: verify %d settle %d, want 1 each", v, s)
	}

	// Fifty concurrent copies of another credential run exactly one business call (held 1 s):
	// the others are 409 while it runs, 402 once it ended.
	p.reset()
	p.fake.Script(fakeupstream.Fault{Delay: time.Second})
	outcomes := make([]outcome, 50)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range outcomes {
		wg.Go(func() {
			<-start
			outcomes[i] = do("chat-mini", fifty)
		})
	}
	close(start)
	wg.Wait()
	ok, inProgress, used := 0, 0, 0
	for _, o := range outcomes {
		switch {
		case paid(o):
			ok++
		case o.status == 409 && o.code == "payment_in_progress" && o.header.Get("Payment-Required") == "" && strings.Contains(o.body, `"request_id"`):
			inProgress++
		case o.status == 402 && o.code == "payment_already_used" && o.header.Get("Payment-Required") != "" && strings.Contains(o.body, `"request_id"`):
			used++
		default:
			t.Errorf("concurrent copy: %d %s %v", o.status, o.body, o.header)
		}
	}
	if ok != 1 || inProgress == 0 || inProgress+used != 49 {
		t.Fatalf("fifty copies of one credential: %d paid, %d refused in progress, %d refused as used", ok, inProgress, used)
	}
	t.Logf("fifty copies of one credential: 1 paid, %d in progress (409), %d already used (402)", inProgress, used)
	if n := chatCalls(); n != calls+1 {
		t.Fatalf("fifty copies of one credential ran %d business calls", n-calls)
	}
	calls++
	if v, s := p.facilitatorCalls(); v != 1 || s != 1 {
		t.Fatalf("fifty copies: verify %d settle %d, want 1 each", v, s)
	}
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Int64() != 20000 {
		t.Fatalf("two credentials and their copies moved %s, want 10000 twice", d)
	}
	if d := new(big.Int).Sub(p.tokenBalance(p.bed.PayTo), payTo); d.Int64() != 20000 {
		t.Fatalf("two credentials and their copies paid pay_to %s, want 10000 twice", d)
	}
	// A replay, and the same credential at a twin endpoint with the same requirements.
	wantPayError(t, send("chat-mini", paidChat, cred), 402, "payment_already_used")
	wantPayError(t, send("chat-twin", paidChat, cred), 402, "payment_already_used")
	noBusiness("a used credential")

	// A payer without tokens: the facilitator's verify refuses it.
	p.reset()
	pk, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	poor := p.payNode("chat-mini", paidChat, "--scheme", "exact", "--key", "0x"+hex.EncodeToString(crypto.FromECDSA(pk)))
	poor.wantError(t, 402, "payment_rejected")
	if poor.Signature == "" || poor.Headers["payment-required"] == "" {
		t.Fatalf("a payer without tokens: %+v", poor)
	}
	if v, s := p.facilitatorCalls(); v != 1 || s != 0 {
		t.Fatalf("a payer without tokens: verify %d settle %d", v, s)
	}
	noBusiness("a payer without tokens")

	// The facilitator down: 503, and the business call does not run unpaid.
	p.control(`{"down":true}`)
	payer = p.tokenBalance(p.bed.PayerAddress)
	down := p.payNode("chat-mini", paidChat, "--scheme", "exact")
	down.wantError(t, 503, "facilitator_unavailable")
	noBusiness("the facilitator down")
	p.control(`{"down":true,"down_mode":"drop"}`)
	p.payNode("chat-mini", paidChat, "--scheme", "exact").wantError(t, 503, "facilitator_unavailable")
	noBusiness("the facilitator dropping connections")

	// A business error (the provider refuses the parameters with 400): passed on unsettled as
	// 422, the paid endpoint's status for invalid business parameters, nothing moved.
	p.reset()
	for _, scheme := range []string{"exact", "upto"} {
		p.fake.FailNext(http.StatusBadRequest, "the provider refuses this request")
		failed := p.payNode("chat-mini", paidChat, "--scheme", scheme)
		var e apiError
		if err := json.Unmarshal([]byte(failed.Body), &e); err != nil || failed.Status != 422 || e.Error.Code == "" ||
			e.Error.RequestID != failed.Headers["x-request-id"] || failed.Headers["payment-response"] != "" || failed.Signature == "" {
			t.Fatalf("%s business error: %+v", scheme, failed)
		}
		calls++
		if n := chatCalls(); n != calls {
			t.Fatalf("%s business error: %d business calls, want %d", scheme, n, calls)
		}
	}
	if v, s := p.facilitatorCalls(); v != 2 || s != 0 {
		t.Fatalf("business errors: verify %d settle %d, want 2 and 0", v, s)
	}

	// A failed settlement: the business call ran, its result is withheld, nothing moved.
	p.reset()
	p.control(`{"settle":"fail"}`)
	for _, scheme := range []string{"exact", "upto"} {
		failed := p.payNode("chat-mini", paidChat, "--scheme", scheme)
		failed.wantError(t, 402, "payment_settlement_failed")
		if strings.Contains(failed.Body, "hello paid world") || failed.PaymentResponse["success"] != false || failed.PaymentResponse["transaction"] != "" ||
			failed.Headers["cache-control"] != "no-store" {
			t.Fatalf("%s settle failure: %+v", scheme, failed)
		}
		calls++
		if n := chatCalls(); n != calls {
			t.Fatalf("%s settle failure: %d business calls, want %d", scheme, n, calls)
		}
	}
	if d := new(big.Int).Sub(payer, p.tokenBalance(p.bed.PayerAddress)); d.Sign() != 0 {
		t.Fatalf("failed payments moved %s", d)
	}
	if recs := p.records("account=x402.chat-mini"); len(recs) != 2 { // the held request and the fifty copies' one
		t.Fatalf("records after failed settlements: %+v", recs)
	}

	// Expired: chat-short's credential once less than 6 s of it is left (it could expire
	// before it settles: the facilitator's rule), and once past its validBefore. A refusal
	// before the facilitator does not burn it, so one credential serves both.
	p.reset()
	for _, at := range []int64{validBefore - 5, validBefore + 1} {
		if wait := time.Until(time.Unix(at, 0)); wait > 0 {
			time.Sleep(wait)
		}
		_, pr := wantPayError(t, send("chat-short", paidChat, short.Signature), 402, "payment_expired")
		if msg, _ := pr["error"].(string); !strings.Contains(msg, "validBefore") {
			t.Fatalf("expired: PAYMENT-REQUIRED %v", pr)
		}
	}
	if v, s := p.facilitatorCalls(); v != 0 || s != 0 {
		t.Fatalf("an expired credential reached the facilitator: verify %d settle %d", v, s)
	}
	noBusiness("an expired credential")
}

// payloadAuthorization is the EIP-3009 authorization of the credential a client sent.
func (r payResult) payloadAuthorization() map[string]any {
	raw, _ := base64.StdEncoding.DecodeString(r.Signature)
	var pp struct {
		Payload struct {
			Authorization map[string]any `json:"authorization"`
		} `json:"payload"`
	}
	_ = json.Unmarshal(raw, &pp)
	return pp.Payload.Authorization
}
