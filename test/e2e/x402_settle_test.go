package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// The facilitator settles on chain but its answer never reaches the gateway, or comes too
// late: the payer was charged, so the result is returned and the settlement resolved in the
// background (the bed's after_settle control injects the fault once the real settlement ran).

// settleTimeout is the paid gateways' x402.facilitator_timeout in these tests.
const settleTimeout = "  facilitator_timeout: 3s\n"

// wantPending checks a settlement (PAYMENT-RESPONSE decoded, or a stream's payment_response)
// that says the outcome is not known yet: success false, errorReason settlement_pending, the
// payer, network and amount, no transaction.
func wantPending(t *testing.T, who string, sr map[string]any, payer string, amount int64) {
	t.Helper()
	if sr["success"] != false || sr["errorReason"] != "settlement_pending" || !strings.EqualFold(fmt.Sprint(sr["payer"]), payer) ||
		sr["network"] != "eip155:31337" || sr["amount"] != strconv.FormatInt(amount, 10) || sr["transaction"] != "" || sr["errorMessage"] == nil {
		t.Fatalf("%s: settlement %v, want pending for %d from %s", who, sr, amount, payer)
	}
}

// recordOf is the usage record of the request the client's answer names (x-request-id), once
// its payment has status.
func (p *paidGateway) recordOf(account string, r payResult, status string) usageRecord {
	p.t.Helper()
	id := r.Headers["x-request-id"]
	var rec usageRecord
	waitFor(p.t, fmt.Sprintf("the record of %s to be %s", id, status), 30*time.Second, func() bool {
		for _, x := range p.records("account=" + account) {
			if strings.HasPrefix(x.RequestID, id+".") && x.Payment != nil {
				rec = x
				return x.Payment.Status == status
			}
		}
		return false
	})
	return rec
}

// metric is the value of a series of the gateway's /metrics (no admin token here).
func (p *paidGateway) metric(series string) float64 {
	p.t.Helper()
	_, body := p.adminRaw("GET", "/metrics", "", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// wantUsage checks GET /admin/v1/usage for account: what was paid, pending and unpaid (USD,
// "-" for none), as "paid pending unpaid".
func (p *paidGateway) wantUsage(account, want string) {
	p.t.Helper()
	_, body := p.adminRaw("GET", "/admin/v1/usage?account="+account, "", nil)
	var u struct{ Paid, Pending, Unpaid *decimal.Decimal }
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		p.t.Fatalf("usage: %v %s", err, body)
	}
	var got []string
	for _, d := range []*decimal.Decimal{u.Paid, u.Pending, u.Unpaid} {
		if d == nil {
			got = append(got, "-")
		} else {
			got = append(got, d.String())
		}
	}
	if strings.Join(got, " ") != want {
		p.t.Fatalf("usage of %s: paid, pending, unpaid %v, want %s", account, got, want)
	}
}

// wantMetrics checks series of the gateway's /metrics.
func (p *paidGateway) wantMetrics(want map[string]float64) {
	p.t.Helper()
	for series, v := range want {
		if got := p.metric(series); got != v {
			p.t.Fatalf("%s is %v, want %v", series, got, v)
		}
	}
}

// wantServed checks that a paid client got the business result of body: 200 and the chat
// answer (whole or streamed to [DONE]), or the created task.
func wantServed(t *testing.T, who, body string, r payResult) {
	t.Helper()
	events := sseEvents(r.Body)
	ok := r.Status == 200
	switch {
	case strings.Contains(body, `"stream":true`):
		ok = ok && len(events) >= 3 && events[len(events)-1] == "[DONE]" && strings.Contains(streamText(events), "hello paid stream")
	case strings.Contains(body, `"prompt"`):
		var task map[string]any
		ok = ok && json.Unmarshal([]byte(r.Body), &task) == nil && strings.HasPrefix(fmt.Sprint(task["id"]), "video_")
	default:
		ok = ok && strings.Contains(r.Body, "hello paid world")
	}
	if !ok {
		t.Fatalf("%s: not served: %+v", who, r)
	}
}

// lastSettlementEvent is a streamed upto answer's settlement: its last event before [DONE].
func lastSettlementEvent(t *testing.T, who string, r payResult) map[string]any {
	t.Helper()
	events := sseEvents(r.Body)
	var last struct {
		PaymentResponse map[string]any `json:"payment_response"`
		Header          string         `json:"payment_response_header"`
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil || last.PaymentResponse == nil ||
		fmt.Sprint(decodeSettlement(t, last.Header)) != fmt.Sprint(last.PaymentResponse) {
		t.Fatalf("%s: the event before [DONE] is %s", who, events[len(events)-2])
	}
	return last.PaymentResponse
}

// TestX402SettlementUnknown: through the real Envoy with the official Node and Python clients,
// a facilitator that settles on chain and then (a) answers after x402.facilitator_timeout (3 s
// here), (b) drops the connection, (c) answers 500: the client gets 200 and the business result
// with a PAYMENT-RESPONSE (or, for an upto stream, a last event) saying settlement_pending; the
// payment's usage record is written at once with payment.status pending (counted as pending in
// the aggregates, tollway_x402_settlements_total{outcome="pending"} and the pending gauge); once
// the facilitator answers again the gateway settles the same authorization again, learns from
// the spent nonce that it settled, and the record turns settled. Exact and upto, whole answers
// and streams, and a paid video task. A definitive refusal still withholds the result (402); a
// payment that never settles is served, then recorded unpaid once its credential expired, and
// nothing moved on chain. A pending payment survives kill -9 of the gateway and is resolved
// after the restart.
func TestX402SettlementUnknown(t *testing.T) {
	t.Parallel()
	bed, fake := bedAndFake(t)
	dir := t.TempDir()
	p := startPaidOn(t, bed, fake, dir, settleTimeout)
	payer := bed.PayerAddress
	moved := func(before *big.Int) int64 {
		return new(big.Int).Sub(before, p.tokenBalance(payer)).Int64()
	}
	type pending struct {
		who, account string
		r            payResult
		amount       int64
	}
	var all []pending

	videoBody := `{"model":"hailuo-02","prompt":"a pending fox","duration":6,"resolution":"1080P"}`
	for _, c := range []struct {
		who, control, slug, body, scheme string
		pay                              func(slug, body string, extra ...string) payResult
		amount                           int64 // 0: upto's metered cost
	}{
		// exact, a whole answer: the facilitator answers 5 s after settling, past the 3 s timeout.
		{"exact, answered late", `{"after_settle":"delay","after_settle_delay_ms":5000}`, "chat-mini", paidChat, "exact", p.payNode, 10000},
		// upto, a stream: dropped after settling; its last event says pending.
		{"upto stream, dropped", `{"after_settle":"drop"}`, "chat-mini", paidStream, "upto", p.payNode, 0},
		{"upto, 500 after settling", `{"after_settle":"500"}`, "chat-mini", paidChat, "upto", p.payPython, 0},
		// exact, a stream: its headers carry the pending settlement.
		{"exact stream, dropped", `{"after_settle":"drop"}`, "chat-mini", paidStream, "exact", p.payPython, 10000},
		// a paid video task: created and answered.
		{"video, 500 after settling", `{"after_settle":"500"}`, "video", videoBody, "exact", p.payNode, 500000},
	} {
		p.control(c.control)
		before := p.tokenBalance(payer)
		r := c.pay(c.slug, c.body, "--scheme", c.scheme)
		d := moved(before)
		wantServed(t, c.who, c.body, r)
		sr := r.PaymentResponse
		if c.scheme == "upto" && c.body == paidStream {
			sr = lastSettlementEvent(t, c.who, r)
			if r.PaymentResponse != nil {
				t.Fatalf("%s: PAYMENT-RESPONSE on a stream's headers: %v", c.who, r.Headers)
			}
		}
		if c.amount == 0 && d > 0 && d < 50000 { // the metered cost, under the 0.05 cap
			c.amount = d
		}
		if d != c.amount || d == 0 {
			t.Fatalf("%s: moved %d, want %d", c.who, d, c.amount)
		}
		wantPending(t, c.who, sr, payer, d)
		all = append(all, pending{c.who, "x402." + c.slug, r, d})
	}

	// The clients kept their results: none signed again (one verify per payment).
	if v, _ := p.facilitatorCalls(); v != len(all) {
		t.Fatalf("%d verifies for %d payments: a client paid again", v, len(all))
	}
	// Each is recorded at once, pending, with what it charged; counted as pending.
	for _, c := range all {
		rec := p.recordOf(c.account, c.r, "pending")
		if rec.Payment.Amount != strconv.FormatInt(c.amount, 10) || !rec.Payment.AmountUSD.Equal(decimal.New(c.amount, -6)) || rec.Payment.Reason == "" {
			t.Fatalf("%s: record %+v %+v", c.who, rec, rec.Payment)
		}
	}
	p.wantUsage("x402.video", "- 0.5 -")
	p.wantMetrics(map[string]float64{`tollway_x402_settlements_total{outcome="pending"}`: 5, "tollway_x402_settlements_pending": 5})

	// The facilitator answers again: every one is settled again, the spent nonce says it was.
	p.control(`{"after_settle":"answer"}`)
	for _, c := range all {
		rec := p.recordOf(c.account, c.r, "settled")
		if rec.Payment.Amount != strconv.FormatInt(c.amount, 10) || !strings.Contains(rec.Payment.Reason, "nonce") {
			t.Fatalf("%s: settled record %+v", c.who, rec.Payment)
		}
	}
	p.wantUsage("x402.video", "0.5 - -")
	p.wantMetrics(map[string]float64{`tollway_x402_settlements_total{outcome="settled"}`: 5, "tollway_x402_settlements_pending": 0})

	// A definitive refusal still withholds the result.
	p.reset()
	p.control(`{"settle":"fail"}`)
	p.payNode("chat-mini", paidChat, "--scheme", "exact").wantError(t, 402, "payment_settlement_failed")
	p.wantMetrics(map[string]float64{`tollway_x402_settlements_total{outcome="refused"}`: 1})

	// A payment that never settles (the facilitator fails every settle before the chain): the
	// result is served; once the credential (10 s at chat-short) can no longer settle, unpaid.
	p.control(`{"settle":"error"}`)
	before := p.tokenBalance(payer)
	r := p.payNode("chat-short", paidChat)
	wantServed(t, "never settling", paidChat, r)
	wantPending(t, "never settling", r.PaymentResponse, payer, 10000)
	rec := p.recordOf("x402.chat-short", r, "unpaid")
	if d := moved(before); d != 0 || rec.Payment.Reason == "" || rec.Payment.Transaction != "" {
		t.Fatalf("never settling: moved %d, record %+v", d, rec.Payment)
	}
	p.wantUsage("x402.chat-short", "- - 0.01")
	p.wantMetrics(map[string]float64{`tollway_x402_settlements_total{outcome="unpaid"}`: 1, "tollway_x402_settlements_pending": 0})
	out, err := p.cli("usage", "--account", "x402.chat-short")
	if err != nil || !strings.Contains(out, "UNPAID") || !regexp.MustCompile(`(?m)^TOTAL\s.*\s0\.01\s*$`).MatchString(out) {
		t.Fatalf("tollway usage: %v\n%s", err, out)
	}
	if c := p.consoleUsage("x402.chat-short"); c.Unpaid != "$0.01" || c.Paid != "" || !slices.Contains(c.Columns, "Unpaid (x402)") || len(c.Errors) > 0 || !c.fits() {
		t.Fatalf("the console's usage page: %+v", c)
	}

	// A pending payment survives kill -9: the facilitator comes back only after the restart.
	p.reset()
	p.control(`{"after_settle":"500"}`)
	before = p.tokenBalance(payer)
	r = p.payNode("chat-mini", paidChat, "--scheme", "exact")
	wantServed(t, "before the crash", paidChat, r)
	wantPending(t, "before the crash", r.PaymentResponse, payer, 10000)
	if d := moved(before); d != 10000 {
		t.Fatalf("before the crash: %d moved", d)
	}
	p.recordOf("x402.chat-mini", r, "pending")
	p.Kill()
	p.control(`{"after_settle":"answer"}`)
	p = startPaidOn(t, bed, fake, dir, settleTimeout)
	if rec := p.recordOf("x402.chat-mini", r, "settled"); rec.Payment.Amount != "10000" || rec.PromptTokens == 0 {
		t.Fatalf("after the restart: %+v %+v", rec, rec.Payment)
	}
}

// consoleView is what test/console/usage-x402.mjs read on the console's usage page.
type consoleView struct {
	Columns               []string
	Paid, Pending, Unpaid string
	Errors                []string
	Misfits               map[string][]string // by window width: what does not fit it
}

// fits reports whether the page was measured at 1280 and 390 px and fit both.
func (c consoleView) fits() bool {
	for _, w := range []string{"1280", "390"} {
		if m, ok := c.Misfits[w]; !ok || len(m) > 0 {
			return false
		}
	}
	return true
}

// consoleUsage opens the console's usage page for account in chromium and reads its totals.
func (p *paidGateway) consoleUsage(account string) consoleView {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "usage-x402.mjs")
	cmd.Dir = filepath.Join(repoRoot, "test", "console")
	cmd.Env = append(os.Environ(), "TOLLWAY_CONSOLE_URL=http://"+p.Admin+"/console/", "TOLLWAY_CONSOLE_ACCOUNT="+account,
		"TOLLWAY_CONSOLE_OUT="+filepath.Join(repoRoot, "test", "out", "console"))
	out, err := cmd.CombinedOutput()
	var v consoleView
	if err != nil || json.Unmarshal(bytes.TrimSpace(out), &v) != nil {
		p.t.Fatalf("node usage-x402.mjs: %v\n%s", err, out)
	}
	return v
}
