package e2e

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
)

// No settlement exceeds its hold (issue 26, item 2): a provider reporting far more usage than
// the request could have cost is billed the hold; the rest is the record's overage, counted by
// provider in /metrics and logged as a WARN naming the provider. Balances never go negative
// and keys never pass their limits through a provider's report.

// keySpent is the month's spend of the one key the gateway has.
func (g *gateway) keySpent() decimal.Decimal {
	g.t.Helper()
	_, out := g.adminJSON("GET", "/admin/v1/usage/keys", nil)
	data, _ := out["data"].([]any)
	if len(data) != 1 {
		g.t.Fatalf("key activity %v: want one key", out)
	}
	return decimal.RequireFromString(data[0].(map[string]any)["spent"].(string))
}

// overageMetric is /metrics' tollway_overage_usd_total for provider ("" when absent).
func (g *gateway) overageMetric(provider string) string {
	g.t.Helper()
	status, body := g.adminRaw("GET", "/metrics", "", nil)
	if status != http.StatusOK {
		g.t.Fatalf("/metrics: %d %s", status, body)
	}
	m := regexp.MustCompile(`(?m)^tollway_overage_usd_total\{provider="` + regexp.QuoteMeta(provider) + `"\} (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestOverReportedVideoIsBilledItsHold: DashScope reporting usage.duration 1,000 for a 5 s
// video ($100.10 at these prices) against a $0.60 monthly limit: the task costs its $0.60 hold,
// the record keeps $99.50 as overage, the account keeps $1.40 of its $2, the key stops at its
// limit (the next create is refused by it).
func TestOverReportedVideoIsBilledItsHold(t *testing.T) {
	t.Parallel()
	g, _ := startDashScope(t, `{request: "0.1", duration: "0.1"}`)
	if err := g.NewAccount(context.Background(), "acme", "2"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--monthly-limit", "0.60")
	code, obj := g.do("POST", key, "/videos", `{"model":"wan-t2v","input":{"prompt":"a fox `+fakeupstream.DashScopeReportTrigger+`1000"},"parameters":{"duration":5}}`)
	id, _ := obj["id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("create: %d %v", code, obj)
	}
	var done map[string]any
	waitFor(t, "the task to complete", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	if done["cost"] != "0.6" {
		t.Fatalf("completed %v: want cost 0.6 (the hold), not 100.1", done)
	}
	recs := g.waitRecords("acme", 1)
	if r := recs[0]; !r.Cost.Equal(decimal.RequireFromString("0.6")) || !r.Overage.Equal(decimal.RequireFromString("99.5")) || r.Provider != "wan" {
		t.Fatalf("usage record %+v: want cost 0.6, overage 99.5", r)
	}
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("1.4")) {
		t.Fatalf("balance %s, want 1.4", b)
	}
	if s := g.keySpent(); !s.Equal(decimal.RequireFromString("0.6")) {
		t.Fatalf("the key spent %s this month, want its 0.60 limit", s)
	}
	if m := g.overageMetric("wan"); m != "99.5" {
		t.Fatalf("tollway_overage_usd_total{provider=wan} = %q, want 99.5", m)
	}
	if l := g.logs.String(); !strings.Contains(l, "OVERAGE") || !strings.Contains(l, "provider=wan") || !strings.Contains(l, "metered=100.1") {
		t.Fatalf("no WARN naming the provider and what it metered:\n%s", l)
	}
	// The limit is used up: the next video is refused, not run on credit.
	if code, obj := g.do("POST", key, "/videos", `{"model":"wan-t2v","input":{"prompt":"a fox"},"parameters":{"duration":5}}`); code != 403 || obj["error"].(map[string]any)["code"] != "spend_limit_exceeded" {
		t.Fatalf("a create past the limit: %d %v", code, obj)
	}
}

// TestOverReportedChatIsBilledItsHold: a chat provider reporting 1,000,000 completion tokens
// for an answer capped at 10 ($2.0001 and more) is billed the request's hold, a whole answer
// and a stream alike; the account, holding less than one such report, never goes negative.
func TestOverReportedChatIsBilledItsHold(t *testing.T) {
	t.Parallel()
	g, fake := startPriced(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "0.01"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--monthly-limit", "0.005")
	for i, body := range []string{
		`{"model":"priced","max_tokens":10,"messages":[{"role":"user","content":"hello there"}]}`,
		`{"model":"priced","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hello there"}]}`,
	} {
		fake.Script(fakeupstream.Fault{ReportCompletion: 1_000_000})
		resp := g.chat(ctx, key, body)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, raw)
		}
		recs := g.waitRecords("acme", i+1)
		r := recs[0] // newest first
		metered := decimal.NewFromInt(r.PromptTokens).Mul(decimal.RequireFromString("0.000001")).
			Add(decimal.RequireFromString("2")).Add(decimal.RequireFromString("0.0001"))
		if r.CompletionTokens != 1_000_000 || !r.Cost.IsPositive() || r.Cost.GreaterThan(decimal.RequireFromString("0.001")) || !r.Cost.Add(r.Overage).Equal(metered) {
			t.Fatalf("request %d: record %+v: want the hold (under $0.001) billed and the rest of %s as overage", i, r, metered)
		}
	}
	recs := g.records("account=acme")
	spent := recs[0].Cost.Add(recs[1].Cost)
	if b := g.balance("acme"); b.IsNegative() || !b.Add(spent).Equal(decimal.RequireFromString("0.01")) {
		t.Fatalf("balance %s after %s billed: want 0.01 - what was billed, never below zero", b, spent)
	}
	if s := g.keySpent(); !s.Equal(spent) || s.GreaterThan(decimal.RequireFromString("0.005")) {
		t.Fatalf("the key spent %s, records say %s (limit 0.005)", s, spent)
	}
	if m := g.overageMetric("fake"); m == "" {
		t.Fatal("no tollway_overage_usd_total for provider fake")
	}
	if l := g.logs.String(); strings.Count(l, "OVERAGE") != 2 || !strings.Contains(l, "provider=fake") {
		t.Fatalf("want two WARNs naming the provider:\n%s", l)
	}
}
