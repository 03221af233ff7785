package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// ledgerCases: Ledger.
var ledgerCases = []conformance{
	{"ledger/settled-once-per-request", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		r := usage("req-1", k, "0.25", 0)
		settle(t, s, r, r)
		settle(t, s, r)
		wantDec(t, "balance", balance(t, s, "acme"), "0.75")
		spend, err := s.MonthSpend("2026-03")
		if err != nil {
			t.Fatal(err)
		}
		wantDec(t, "month spend", spend[k.ID], "0.25")
		if _, err := s.MonthSpend("March"); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("MonthSpend of a malformed month: %v", err)
		}
		recs, err := s.UsageRecords(store.UsageFilter{}, 0)
		if err != nil || len(recs) != 1 || recs[0].RequestID != "req-1" || !recs[0].Time.Equal(day0) || recs[0].PromptTokens != 10 {
			t.Fatalf("records: %+v %v", recs, err)
		}
	}},
	{"ledger/a-wrong-record-fails-alone", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		bad := usage("bad", k, "0.1", 0)
		bad.PromptTokens = -1
		ghost := usage("ghost", k, "0.1", 0)
		ghost.Account = "ghost"
		long := usage(strings.Repeat("x", store.MaxRequestIDBytes+1), k, "0.1", 0)
		errs := s.SettleBatch([]store.UsageRecord{bad, usage("good", k, "0.1", 0), ghost, long})
		if !errors.Is(errs[0], store.ErrInvalid) || errs[1] != nil || !errors.Is(errs[2], store.ErrNotFound) || !errors.Is(errs[3], store.ErrInvalid) {
			t.Fatalf("errors %v", errs)
		}
		wantDec(t, "balance", balance(t, s, "acme"), "0.9")
		wantRecords(t, e.s, "good")
	}},
	{"ledger/a-request-id-twice-in-a-batch-settles-once", func(t *testing.T, e *env) {
		account(t, e.s, "acme", "1")
		a := usage("a", key(t, e.s, "acme", nil), "0.1", 0)
		b := a
		b.RequestID, b.Cost, b.Time = "b", dec("0.2"), b.Time.Add(time.Second)
		settle(t, e.s, a, a, b, a)
		wantDec(t, "balance", balance(t, e.s, "acme"), "0.7")
		wantRecords(t, e.s, "b", "a")
	}},
	{"ledger/debits-are-capped-at-balance-and-limit", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "poor", "0.30")
		k := key(t, s, "poor", nil)
		settle(t, s, usage("a", k, "0.50", 0))
		wantDec(t, "balance", balance(t, s, "poor"), "0")
		account(t, s, "rich", "100")
		lk := key(t, s, "rich", decp("1"))
		settle(t, s, usage("b", lk, "0.75", 0), usage("c", lk, "0.75", time.Second))
		wantDec(t, "rich balance", balance(t, s, "rich"), "99")
		recs, err := s.UsageRecords(store.UsageFilter{Account: "rich"}, 0)
		if err != nil || len(recs) != 2 {
			t.Fatalf("records: %+v %v", recs, err)
		}
		wantDec(t, "the second record's cost", recs[0].Cost, "0.25")
		wantDec(t, "its overage", recs[0].Overage, "0.5")
	}},
	{"ledger/paid-records-debit-nothing", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		r := usage("paid", k, "0.4", 0)
		r.Payment = &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:84532", Asset: "0xa", Payer: "0xb",
			Amount: "400000", AmountUSD: dec("0.4"), Status: store.PaymentSettled}
		x402 := usage("anon", store.Key{ID: "x402", Account: store.PaidAccountPrefix + "chat"}, "0.2", 0)
		x402.Payment = r.Payment
		settle(t, s, r, x402)
		wantDec(t, "balance", balance(t, s, "acme"), "1")
		sum, err := s.Usage(store.UsageFilter{})
		if err != nil || sum.Requests != 2 || sum.Paid == nil || !sum.Paid.Equal(dec("0.8")) {
			t.Fatalf("usage: %+v %v", sum, err)
		}
	}},
	{"ledger/concurrent-settles-never-overspend", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1.00")
		k := key(t, s, "acme", nil)
		account(t, s, "team", "100")
		lk := key(t, s, "team", decp("0.50"))
		var wg sync.WaitGroup
		for g := range 50 {
			wg.Go(func() {
				for b := range 2 {
					var recs []store.UsageRecord
					for i := range 2 {
						n := fmt.Sprintf("%d-%d-%d", g, b, i)
						recs = append(recs, usage("a-"+n, k, "0.03", time.Duration(g)*time.Second), usage("t-"+n, lk, "0.01", 0))
					}
					for i, err := range s.SettleBatch(recs) {
						if err != nil {
							t.Errorf("settle %s: %v", recs[i].RequestID, err)
						}
					}
				}
			})
		}
		wg.Wait()
		// 200 requests of 0.03 against 1.00, 200 of 0.01 against a 0.50 limit.
		checkBooks(t, s, "acme", "1.00", "6.00", 200)
		checkBooks(t, s, "team", "100", "2.00", 200)
		spend, err := s.MonthSpend("2026-03")
		if err != nil {
			t.Fatal(err)
		}
		wantDec(t, "limited key's month spend", spend[lk.ID], "0.50")
		wantDec(t, "acme's key's month spend", spend[k.ID], "1.00")
	}},
}

// checkBooks: acct's n records cost what it was debited (credits - balance), never more than
// it had, and their costs and overages add up to billed.
func checkBooks(t *testing.T, s store.Store, acct, credits, billed string, n int) {
	t.Helper()
	recs, err := s.UsageRecords(store.UsageFilter{Account: acct}, 0)
	if err != nil || len(recs) != n {
		t.Fatalf("%s: %d records, want %d (%v)", acct, len(recs), n, err)
	}
	cost, over := decimal.Zero, decimal.Zero
	for _, r := range recs {
		cost, over = cost.Add(r.Cost), over.Add(r.Overage)
	}
	b := balance(t, s, acct)
	if b.IsNegative() {
		t.Fatalf("%s's balance is %s", acct, b)
	}
	wantDec(t, acct+": debited", dec(credits).Sub(b), cost.String())
	wantDec(t, acct+": cost and overage", cost.Add(over), billed)
}

// usageCases: Usage.
var usageCases = []conformance{
	{"usage/aggregates-and-records-agree", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "100")
		a, b := key(t, s, "acme", nil), key(t, s, "acme", nil)
		routed := usage("r1", a, "1", 0)
		routed.Route = "route:fast"
		other := usage("r2", b, "2", 24*time.Hour)
		other.Model = "n"
		settle(t, s, routed, other, usage("r3", a, "4", 48*time.Hour+time.Minute))
		sum, err := s.Usage(store.UsageFilter{})
		if err != nil || sum.Requests != 3 || !sum.Cost.Equal(dec("7")) || len(sum.Rows) != 3 || sum.Rows[0].Day != "2026-03-15" {
			t.Fatalf("Usage: %+v %v", sum, err)
		}
		day := store.UsageFilter{Since: day0.Add(24 * time.Hour), Until: day0.Add(24 * time.Hour)}
		if sum, err = s.Usage(day); err != nil || sum.Requests != 1 || sum.Rows[0].KeyID != b.ID || sum.Rows[0].Model != "n" {
			t.Fatalf("Usage of one day: %+v %v", sum, err)
		}
		if sum, err = s.Usage(store.UsageFilter{KeyID: a.ID}); err != nil || !sum.Cost.Equal(dec("5")) {
			t.Fatalf("Usage of one key: %+v %v", sum, err)
		}
		recs, err := s.UsageRecords(store.UsageFilter{}, 2)
		if err != nil || len(recs) != 2 || recs[0].RequestID != "r3" || recs[1].RequestID != "r2" {
			t.Fatalf("UsageRecords, newest first, 2: %+v %v", recs, err)
		}
		if recs, err = s.UsageRecords(day, 0); err != nil || len(recs) != 1 || recs[0].RequestID != "r2" {
			t.Fatalf("UsageRecords of one day: %+v %v", recs, err)
		}
		rows, err := s.UsageByRecords(store.UsageFilter{}, "route:fast")
		if err != nil || len(rows) != 1 || rows[0].Route != "route:fast" || rows[0].Requests != 1 || rows[0].Day != "2026-03-15" {
			t.Fatalf("UsageByRecords of a route: %+v %v", rows, err)
		}
		ru, err := s.RouteUsage()
		if err != nil || len(ru["route:fast"]) != 1 || ru["route:fast"][0].Model != "m" || !ru["route:fast"][0].Cost.Equal(dec("1")) {
			t.Fatalf("RouteUsage: %+v %v", ru, err)
		}
		last, err := s.KeysLastUsed(100)
		if err != nil || !last[a.ID].Exact || !last[a.ID].Time.Equal(day0.Add(48*time.Hour+time.Minute)) || !last[b.ID].Time.Equal(day0.Add(24*time.Hour)) {
			t.Fatalf("KeysLastUsed: %+v %v", last, err)
		}
	}},
}

// wantRecords: the store holds exactly the records ids, newest first.
func wantRecords(t *testing.T, s store.Store, ids ...string) {
	t.Helper()
	recs, err := s.UsageRecords(store.UsageFilter{}, 0)
	got := make([]string, len(recs))
	for i, r := range recs {
		got[i] = r.RequestID
	}
	if err != nil || !slices.Equal(got, ids) {
		t.Fatalf("records %v (%v), want %v", got, err, ids)
	}
}
