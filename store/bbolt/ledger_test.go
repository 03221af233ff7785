package bbolt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/tollway/tollway/store"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func mustAccount(t rapid.TB, s *Store, id, credits string) store.Account {
	t.Helper()
	a, err := s.CreateAccount(id, dec(credits))
	if err != nil {
		t.Fatalf("CreateAccount(%q, %s): %v", id, credits, err)
	}
	return a
}

func balance(t rapid.TB, s *Store, id string) decimal.Decimal {
	t.Helper()
	a, err := s.GetAccount(id)
	if err != nil {
		t.Fatalf("GetAccount(%q): %v", id, err)
	}
	return a.Balance
}

func rawValue(t *testing.T, s *Store, bucket []byte, key string) []byte {
	t.Helper()
	var out []byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		out = append(out, tx.Bucket(bucket).Get([]byte(key))...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantDec(t rapid.TB, what string, got decimal.Decimal, want string) {
	t.Helper()
	if !got.Equal(dec(want)) {
		t.Errorf("%s = %s, want exactly %s", what, got, want)
	}
}

func TestDecimalMarshalsAsString(t *testing.T) {
	if decimal.MarshalJSONWithoutQuotes {
		t.Fatal("decimal.MarshalJSONWithoutQuotes is set; money would be written as JSON numbers")
	}
	buf, err := json.Marshal(struct{ C decimal.Decimal }{dec("0.00000015")})
	if err != nil {
		t.Fatal(err)
	}
	if string(buf) != `{"C":"0.00000015"}` {
		t.Errorf("decimal marshals as %s, want a quoted exact string", buf)
	}
}

func TestAccounts(t *testing.T) {
	s, path := openTemp(t)
	a := mustAccount(t, s, "team-b", "25.30")
	if a.ID != "team-b" || a.CreatedAt.IsZero() || a.CreatedAt.Location() != time.UTC {
		t.Errorf("CreateAccount = %+v", a)
	}
	wantDec(t, "new balance", a.Balance, "25.3")
	if raw := rawValue(t, s, bucketAccounts, "team-b"); !bytes.Contains(raw, []byte(`"balance":"25.3"`)) {
		t.Errorf("stored account %s: balance is not an exact decimal string", raw)
	}
	mustAccount(t, s, "a.b@c_d-e", "0")
	mustAccount(t, s, "Zed", "1")

	if _, err := s.CreateAccount("team-b", dec("1")); !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate CreateAccount: %v, want ErrExists", err)
	} else if !strings.Contains(err.Error(), `"team-b"`) {
		t.Errorf("duplicate error %q does not name the account", err)
	}
	wantDec(t, "balance after a refused duplicate", balance(t, s, "team-b"), "25.3")
	if _, err := s.CreateAccount("neg", dec("-0.01")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative credits: %v, want ErrInvalid", err)
	}
	for _, id := range []string{"", "-a", ".a", "a b", "a/b", "a\x00", "é", strings.Repeat("a", 129)} {
		if _, err := s.CreateAccount(id, dec("1")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateAccount(%q): %v, want ErrInvalid", id, err)
		}
	}
	mustAccount(t, s, strings.Repeat("a", 128), "0")

	// 0.1 + 0.2 is the classic float failure.
	if _, err := s.CreditAccount("Zed", dec("0.1")); err != nil {
		t.Fatal(err)
	}
	got, err := s.CreditAccount("Zed", dec("0.2"))
	if err != nil {
		t.Fatal(err)
	}
	wantDec(t, "credited balance", got.Balance, "1.3")
	wantDec(t, "stored credited balance", balance(t, s, "Zed"), "1.3")
	for _, amt := range []string{"0", "-1"} {
		if _, err := s.CreditAccount("Zed", dec(amt)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreditAccount(%s): %v, want ErrInvalid", amt, err)
		}
	}
	if _, err := s.CreditAccount("ghost", dec("1")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreditAccount of a missing account: %v, want ErrNotFound", err)
	}
	if _, err := s.GetAccount("ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAccount of a missing account: %v, want ErrNotFound", err)
	}

	e, created, err := s.EnsureAccount("fresh")
	if err != nil || !created || !e.Balance.IsZero() || e.ID != "fresh" {
		t.Errorf("EnsureAccount(new) = %+v, %v, %v; want created with 0", e, created, err)
	}
	e, created, err = s.EnsureAccount("team-b")
	if err != nil || created {
		t.Errorf("EnsureAccount(existing) created=%v err=%v", created, err)
	}
	wantDec(t, "EnsureAccount(existing) balance", e.Balance, "25.3")
	if _, _, err := s.EnsureAccount("bad id"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("EnsureAccount(bad id): %v, want ErrInvalid", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	as, err := s.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range as {
		ids = append(ids, a.ID)
	}
	want := []string{"Zed", "a.b@c_d-e", strings.Repeat("a", 128), "fresh", "team-b"}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("Accounts() ids = %v, want %v", ids, want)
	}
	wantDec(t, "balance after reopen", balance(t, s, "Zed"), "1.3")
}

func TestCreateKeyRequiresAccount(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	_, secret, err := s.CreateKey("ghost", store.KeyOptions{Name: "x"})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CreateKey for a missing account: %v, want ErrNotFound", err)
	}
	if want := `account "ghost" does not exist; create it with: tollway accounts create ghost --credits N`; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if secret != "" {
		t.Error("a failed CreateKey returned a secret")
	}
	if _, _, err := s.CreateKey("bad id", store.KeyOptions{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CreateKey for an invalid account id: %v, want ErrInvalid", err)
	}
	ks, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 0 {
		t.Errorf("failed CreateKey calls stored %d keys", len(ks))
	}
	if _, err := s.GetAccount("ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateKey created the account: %v", err)
	}
}

func TestCreateKeyOptions(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "10")
	limit := dec("12.50")
	k, _, err := s.CreateKey("acct", store.KeyOptions{Name: "ci", MonthlyLimit: &limit, Models: []string{"gpt-4o", "route:cheap", "gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	limit = dec("99") // the key must not alias the caller's value
	got, err := s.GetKey(k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.MonthlyLimit == nil || !got.MonthlyLimit.Equal(dec("12.5")) {
		t.Errorf("stored MonthlyLimit = %v, want 12.5", got.MonthlyLimit)
	}
	if want := []string{"gpt-4o", "route:cheap"}; !reflect.DeepEqual(got.Models, want) {
		t.Errorf("stored Models = %v, want %v (duplicates dropped, order kept)", got.Models, want)
	}
	if got.Name != "ci" || got.Account != "acct" {
		t.Errorf("stored key = %+v", got)
	}
	raw := rawValue(t, s, bucketKeys, k.ID)
	if !bytes.Contains(raw, []byte(`"monthly_limit":"12.5"`)) || !bytes.Contains(raw, []byte(`"models":["gpt-4o","route:cheap"]`)) {
		t.Errorf("stored key JSON %s lacks the string limit or the models", raw)
	}

	plain, _, err := s.CreateKey("acct", store.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.MonthlyLimit != nil || plain.Models != nil {
		t.Errorf("key without options = %+v, want no limit and all models", plain)
	}
	if raw := rawValue(t, s, bucketKeys, plain.ID); bytes.Contains(raw, []byte("monthly_limit")) || bytes.Contains(raw, []byte("models")) {
		t.Errorf("unrestricted key JSON %s should omit monthly_limit and models", raw)
	}
	zero := dec("0")
	if _, _, err := s.CreateKey("acct", store.KeyOptions{MonthlyLimit: &zero}); err != nil {
		t.Errorf("a zero monthly limit is valid: %v", err)
	}

	neg := dec("-1")
	if _, _, err := s.CreateKey("acct", store.KeyOptions{MonthlyLimit: &neg}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative monthly limit: %v, want ErrInvalid", err)
	}
	if _, _, err := s.CreateKey("acct", store.KeyOptions{Models: []string{"a", ""}}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty model id: %v, want ErrInvalid", err)
	}
	ks, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 3 {
		t.Errorf("%d keys stored, want the 3 valid ones", len(ks))
	}
}

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func rec(id, account, cost string) store.UsageRecord {
	return store.UsageRecord{
		RequestID: id, KeyID: "key_1", Account: account, Model: "gpt-4o", Provider: "openai",
		PromptTokens: 10, CompletionTokens: 5, Cost: dec(cost), Time: t0,
	}
}

func mustSettle(t testing.TB, s *Store, r store.UsageRecord) {
	t.Helper()
	if err := s.Settle(r); err != nil {
		t.Fatalf("Settle(%s): %v", r.RequestID, err)
	}
}

func count(t rapid.TB, s *Store) int {
	t.Helper()
	n, err := s.UsageRecordCount()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func allRecords(t rapid.TB, s *Store) []store.UsageRecord {
	t.Helper()
	rs, err := s.UsageRecords(store.UsageFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestSettleExactDecimal(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "25")
	sum := decimal.Zero
	costs := []string{"0.0000006", "0.00000015", "0.00000015", "0.1"}
	for i := range 400 {
		c := costs[i%len(costs)]
		sum = sum.Add(dec(c))
		mustSettle(t, s, rec(fmt.Sprintf("r%d", i), "acct", c))
	}
	bal := balance(t, s, "acct")
	if !bal.Add(sum).Equal(dec("25")) {
		t.Errorf("balance %s + costs %s = %s, want exactly 25", bal, sum, bal.Add(sum))
	}
	// 100×(0.0000006 + 2×0.00000015 + 0.1) = 10.00009
	wantDec(t, "balance", bal, "14.99991")
	var recSum decimal.Decimal
	for _, r := range allRecords(t, s) {
		recSum = recSum.Add(r.Cost)
	}
	wantDec(t, "sum of record costs", recSum, "10.00009")
	u, err := s.Usage(store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	wantDec(t, "aggregate cost", u.Cost, "10.00009")
	ms, err := s.MonthSpend("2026-11")
	if err != nil {
		t.Fatal(err)
	}
	wantDec(t, "month spend", ms["key_1"], "10.00009")
	if raw := rawValue(t, s, bucketSpendMonth, "2026-11\x00key_1"); string(raw) != "10.00009" {
		t.Errorf("stored spend = %q, want the decimal string 10.00009", raw)
	}
	at := rawValue(t, s, bucketUsageByRequest, "r1")
	if len(at) != 8 {
		t.Fatalf("index value of r1 is %d bytes, want its 8-byte time", len(at))
	}
	if !bytes.Contains(rawValue(t, s, bucketUsage, string(at)+"r1"), []byte("0.00000015")) {
		t.Errorf("usage record r1 does not store its cost as an exact string")
	}
}

// TestSettleNeverTakesABalanceBelowZero: the store's settlement is the last guard of the rule
// that no provider's report takes a balance below zero or a key past its monthly limit: what
// neither covers is not debited (the record keeps it as overage), and every record is stored.
func TestSettleNeverTakesABalanceBelowZero(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "1")
	mustSettle(t, s, rec("big", "acct", "3.25"))
	wantDec(t, "balance", balance(t, s, "acct"), "0")
	mustSettle(t, s, rec("more", "acct", "0.75"))
	wantDec(t, "balance", balance(t, s, "acct"), "0")
	if n := count(t, s); n != 2 {
		t.Errorf("%d records, want 2: settling is never refused", n)
	}
	limit := dec("0.5")
	k, _, err := s.CreateKey("acct", store.KeyOptions{MonthlyLimit: &limit})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreditAccount("acct", dec("10")); err != nil {
		t.Fatal(err)
	}
	r := rec("limited", "acct", "100")
	r.KeyID = k.ID
	mustSettle(t, s, r)
	wantDec(t, "balance", balance(t, s, "acct"), "9.5")
	ms, err := s.MonthSpend(t0.Format(store.MonthLayout))
	if err != nil {
		t.Fatal(err)
	}
	wantDec(t, "the key's month spend", ms[k.ID], "0.5")
	over := map[string]string{"big": "2.25", "more": "0.75", "limited": "99.5"}
	for _, r := range allRecords(t, s) {
		if !r.Overage.Equal(dec(over[r.RequestID])) || !r.Overage.Add(r.Cost).Equal(rec(r.RequestID, "acct", map[string]string{"big": "3.25", "more": "0.75", "limited": "100"}[r.RequestID]).Cost) {
			t.Errorf("record %s: cost %s overage %s", r.RequestID, r.Cost, r.Overage)
		}
	}
	// The books still add up: credits == balance + what was debited.
	checkLedger(t, s, map[string]string{"acct": "11"})
}

func TestSettleIdempotentSequential(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "10")
	mustSettle(t, s, rec("same", "acct", "1.5"))
	second := rec("same", "acct", "7")
	second.Time = t0.Add(time.Hour) // a different usage key: only the request id index can catch it
	mustSettle(t, s, second)
	if n := count(t, s); n != 1 {
		t.Fatalf("%d records after settling one request id twice, want 1", n)
	}
	rs := allRecords(t, s)
	if len(rs) != 1 || !rs[0].Cost.Equal(dec("1.5")) {
		t.Errorf("records = %+v, want the first settlement only", rs)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "8.5")
	u, err := s.Usage(store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Requests != 1 {
		t.Errorf("aggregate requests = %d, want 1", u.Requests)
	}
	wantDec(t, "aggregate cost", u.Cost, "1.5")
}

func TestSettleIdempotentConcurrent(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "100")
	for round := range 3 {
		id := fmt.Sprintf("dup-%d", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for range 50 {
			wg.Go(func() {
				<-start
				errs <- s.Settle(rec(id, "acct", "2"))
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Settle of one id: %v", err)
			}
		}
	}
	if n := count(t, s); n != 3 {
		t.Errorf("%d records, want 3 (one per request id)", n)
	}
	if n := len(allRecords(t, s)); n != 3 {
		t.Errorf("%d records in the usage bucket, want 3", n)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "94")
}

// A call that fails inside a bbolt batch rolls back the whole batch, and bbolt re-runs the other
// calls: each must still debit exactly once.
func TestSettleConcurrentFailuresWriteNothing(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "1000")
	var ok, failed atomic.Int64
	for round := range 5 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				<-start
				account := "acct"
				if i%10 == 3 {
					account = "ghost"
				}
				err := s.Settle(rec(fmt.Sprintf("b%d-%d", round, i), account, "0.01"))
				switch {
				case err == nil && account == "acct":
					ok.Add(1)
				case errors.Is(err, store.ErrNotFound) && account == "ghost":
					failed.Add(1)
				default:
					t.Errorf("Settle(account %s): %v", account, err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if ok.Load() != 270 || failed.Load() != 30 {
		t.Fatalf("ok=%d failed=%d, want 270 and 30", ok.Load(), failed.Load())
	}
	if n := count(t, s); n != 270 {
		t.Errorf("%d records, want 270", n)
	}
	for _, r := range allRecords(t, s) {
		if r.Account != "acct" {
			t.Errorf("a failed settlement left record %+v", r)
		}
	}
	wantDec(t, "balance", balance(t, s, "acct"), "997.3")
}

func TestSettleValidation(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "5")
	bad := map[string]func(*store.UsageRecord){
		"no request id":     func(r *store.UsageRecord) { r.RequestID = "" },
		"no key id":         func(r *store.UsageRecord) { r.KeyID = "" },
		"no account":        func(r *store.UsageRecord) { r.Account = "" },
		"negative cost":     func(r *store.UsageRecord) { r.Cost = dec("-0.000001") },
		"negative prompt":   func(r *store.UsageRecord) { r.PromptTokens = -1 },
		"negative complete": func(r *store.UsageRecord) { r.CompletionTokens = -1 },
		"negative cached":   func(r *store.UsageRecord) { r.CachedTokens = -1 },
		"NUL in model":      func(r *store.UsageRecord) { r.Model = "a\x00b" },
		"time before 1970":  func(r *store.UsageRecord) { r.Time = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	for name, mutate := range bad {
		r := rec("bad", "acct", "1")
		mutate(&r)
		if err := s.Settle(r); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: Settle = %v, want ErrInvalid", name, err)
		}
	}
	if err := s.Settle(rec("ghost-req", "ghost", "1")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Settle for a missing account: %v, want ErrNotFound", err)
	}
	if n := count(t, s); n != 0 {
		t.Errorf("refused settlements wrote %d records", n)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "5")
	u, err := s.Usage(store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Requests != 0 || len(u.Rows) != 0 {
		t.Errorf("refused settlements wrote aggregates: %+v", u)
	}
	ms, err := s.MonthSpend("2026-11")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 0 {
		t.Errorf("refused settlements wrote monthly spend: %v", ms)
	}
	// The refused request id is not burnt: once valid, it settles.
	mustSettle(t, s, rec("ghost-req", "acct", "1"))
	wantDec(t, "balance", balance(t, s, "acct"), "4")
}

func TestSettleZeroTimeIsNow(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "5")
	r := rec("now", "acct", "1")
	r.Time = time.Time{}
	before := time.Now()
	mustSettle(t, s, r)
	rs := allRecords(t, s)
	if len(rs) != 1 || rs[0].Time.Before(before.Add(-time.Second)) || rs[0].Time.After(time.Now()) || rs[0].Time.Location() != time.UTC {
		t.Errorf("record time = %v, want about now in UTC", rs)
	}
}

// sums recomputes from the records what the aggregates and balances must say.
type sums struct {
	requests, prompt, completion, cached, estimated int64
	cost                                            decimal.Decimal
	byAccount                                       map[string]decimal.Decimal
	byMonthKey                                      map[string]map[string]decimal.Decimal
}

func sumRecords(rs []store.UsageRecord) sums {
	out := sums{byAccount: map[string]decimal.Decimal{}, byMonthKey: map[string]map[string]decimal.Decimal{}}
	for _, r := range rs {
		out.requests++
		out.prompt += r.PromptTokens
		out.completion += r.CompletionTokens
		out.cached += r.CachedTokens
		if r.Estimated {
			out.estimated++
		}
		out.cost = out.cost.Add(r.Cost)
		out.byAccount[r.Account] = out.byAccount[r.Account].Add(r.Cost)
		m := r.Time.Format("2006-01")
		if out.byMonthKey[m] == nil {
			out.byMonthKey[m] = map[string]decimal.Decimal{}
		}
		out.byMonthKey[m][r.KeyID] = out.byMonthKey[m][r.KeyID].Add(r.Cost)
	}
	return out
}

// checkLedger asserts that records, aggregates, monthly spend and balances agree, given each
// account's initial credits; it returns the record sums.
func checkLedger(t rapid.TB, s *Store, credits map[string]string) sums {
	t.Helper()
	rs := allRecords(t, s)
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.RequestID] {
			t.Errorf("request %s has two records", r.RequestID)
		}
		seen[r.RequestID] = true
	}
	if n := count(t, s); n != len(rs) {
		t.Errorf("UsageRecordCount = %d, but %d records", n, len(rs))
	}
	checkIndex(t, s)
	sm := sumRecords(rs)
	for acct, c := range credits {
		bal := balance(t, s, acct)
		if !bal.Add(sm.byAccount[acct]).Equal(dec(c)) {
			t.Errorf("account %s: balance %s + record costs %s != initial credits %s", acct, bal, sm.byAccount[acct], c)
		}
	}
	u, err := s.Usage(store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Requests != sm.requests || u.PromptTokens != sm.prompt || u.CompletionTokens != sm.completion ||
		u.CachedTokens != sm.cached || u.EstimatedRequests != sm.estimated || !u.Cost.Equal(sm.cost) {
		t.Errorf("aggregates %+v disagree with records %+v", u, sm)
	}
	var rowReq int64
	rowCost := decimal.Zero
	for _, row := range u.Rows {
		rowReq += row.Requests
		rowCost = rowCost.Add(row.Cost)
	}
	if rowReq != sm.requests || !rowCost.Equal(sm.cost) {
		t.Errorf("rows sum to %d requests / %s, records to %d / %s", rowReq, rowCost, sm.requests, sm.cost)
	}
	for month, want := range sm.byMonthKey {
		got, err := s.MonthSpend(month)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("MonthSpend(%s) has %d keys, records have %d", month, len(got), len(want))
		}
		for k, w := range want {
			if !got[k].Equal(w) {
				t.Errorf("MonthSpend(%s)[%s] = %s, records sum to %s", month, k, got[k], w)
			}
		}
	}
	return sm
}

func TestSettleConcurrent(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "acct-a", "50")
	mustAccount(t, s, "acct-b", "0.5")
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			r := store.UsageRecord{
				RequestID:        fmt.Sprintf("req-%03d", i),
				KeyID:            fmt.Sprintf("key_%d", i%3),
				Account:          []string{"acct-a", "acct-b"}[i%2],
				Model:            []string{"gpt-4o", "llama"}[i%5%2],
				Provider:         "p",
				PromptTokens:     int64(i),
				CompletionTokens: int64(2 * i),
				CachedTokens:     int64(i % 4),
				Cost:             dec("0.00000015").Mul(decimal.NewFromInt(int64(i + 1))),
				Estimated:        i%7 == 0,
				// Across a month boundary: Oct 31 23:00 + i minutes.
				Time: time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute),
			}
			if err := s.Settle(r); err != nil {
				t.Errorf("Settle(%s): %v", r.RequestID, err)
			}
		})
	}
	close(start)
	wg.Wait()
	credits := map[string]string{"acct-a": "50", "acct-b": "0.5"}
	sm := checkLedger(t, s, credits)
	if sm.requests != 200 {
		t.Fatalf("%d records, want 200", sm.requests)
	}
	// sum over i of 0.00000015×(i+1) = 0.00000015 × 20100
	wantDec(t, "total cost", sm.cost, "0.003015")
	if len(sm.byMonthKey["2026-10"]) != 3 || len(sm.byMonthKey["2026-11"]) != 3 {
		t.Errorf("test data should span both months for all keys: %v", sm.byMonthKey)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Durability: everything is there after a reopen.
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after := checkLedger(t, s, credits)
	if after.requests != 200 || !after.cost.Equal(sm.cost) {
		t.Errorf("after reopen: %d records costing %s, want 200 costing %s", after.requests, after.cost, sm.cost)
	}
	wantDec(t, "acct-b balance after reopen", balance(t, s, "acct-b"), "0.498485")
}

func TestUsageFilters(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a1", "100")
	mustAccount(t, s, "a2", "100")
	day := func(d, h, m int) time.Time { return time.Date(2026, 11, d, h, m, 59, 999_999_999, time.UTC) }
	recs := []store.UsageRecord{
		{RequestID: "1", KeyID: "k1", Account: "a1", Model: "m1", PromptTokens: 1, CompletionTokens: 10, Cost: dec("1"), Time: day(20, 0, 0)},
		{RequestID: "2", KeyID: "k1", Account: "a1", Model: "m2", PromptTokens: 2, CompletionTokens: 20, Cost: dec("2"), Time: day(21, 12, 0), Estimated: true},
		{RequestID: "3", KeyID: "k2", Account: "a1", Model: "m1", PromptTokens: 4, CompletionTokens: 40, Cost: dec("4"), Time: day(21, 23, 59)},
		{RequestID: "4", KeyID: "k3", Account: "a2", Model: "m1", PromptTokens: 8, CompletionTokens: 80, CachedTokens: 3, Cost: dec("8"), Time: day(22, 0, 0)},
		{RequestID: "5", KeyID: "k3", Account: "a2", Model: "m1", PromptTokens: 16, CompletionTokens: 160, Cost: dec("16"), Time: day(23, 6, 0)},
		{RequestID: "6", KeyID: "k1", Account: "a1", Model: "m1", PromptTokens: 32, CompletionTokens: 320, Cost: dec("32"), Time: day(20, 5, 0)},
	}
	for _, r := range recs {
		mustSettle(t, s, r)
	}
	nov21 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	nov22 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	// 2026-11-22 03:00 in UTC+5 is 2026-11-21 22:00 UTC: days are UTC days.
	plus5 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.FixedZone("UTC+5", 5*3600))
	tests := []struct {
		name     string
		f        store.UsageFilter
		ids      []string // records, newest first
		requests int64
		prompt   int64
		cost     string
	}{
		{"all", store.UsageFilter{}, []string{"5", "4", "3", "2", "6", "1"}, 6, 63, "63"},
		{"key", store.UsageFilter{KeyID: "k1"}, []string{"2", "6", "1"}, 3, 35, "35"},
		{"account", store.UsageFilter{Account: "a2"}, []string{"5", "4"}, 2, 24, "24"},
		{"model", store.UsageFilter{Model: "m2"}, []string{"2"}, 1, 2, "2"},
		{"key+model", store.UsageFilter{KeyID: "k1", Model: "m1"}, []string{"6", "1"}, 2, 33, "33"},
		{"since", store.UsageFilter{Since: nov21.Add(15 * time.Hour)}, []string{"5", "4", "3", "2"}, 4, 30, "30"},
		{"until", store.UsageFilter{Until: nov21}, []string{"3", "2", "6", "1"}, 4, 39, "39"},
		{"one day", store.UsageFilter{Since: nov22, Until: nov22.Add(23 * time.Hour)}, []string{"4"}, 1, 8, "8"},
		{"until in another zone", store.UsageFilter{Until: plus5}, []string{"3", "2", "6", "1"}, 4, 39, "39"},
		{"account+since", store.UsageFilter{Account: "a1", Since: nov21}, []string{"3", "2"}, 2, 6, "6"},
		{"nothing", store.UsageFilter{Account: "a2", Until: nov21}, nil, 0, 0, "0"},
		{"unknown key", store.UsageFilter{KeyID: "k9"}, nil, 0, 0, "0"},
	}
	for _, tt := range tests {
		u, err := s.Usage(tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if u.Requests != tt.requests || u.PromptTokens != tt.prompt || !u.Cost.Equal(dec(tt.cost)) {
			t.Errorf("%s: Usage = %d requests, %d prompt, cost %s; want %d, %d, %s", tt.name, u.Requests, u.PromptTokens, u.Cost, tt.requests, tt.prompt, tt.cost)
		}
		rs, err := s.UsageRecords(tt.f, 0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.RequestID)
		}
		if !reflect.DeepEqual(ids, tt.ids) {
			t.Errorf("%s: UsageRecords ids = %v, want %v", tt.name, ids, tt.ids)
		}
		if len(tt.ids) > 1 {
			rs, err := s.UsageRecords(tt.f, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 1 || rs[0].RequestID != tt.ids[0] {
				t.Errorf("%s: UsageRecords limit 1 = %v, want only the newest %s", tt.name, rs, tt.ids[0])
			}
		}
	}

	u, err := s.Usage(store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.UsageRow{
		{Day: "2026-11-20", KeyID: "k1", Account: "a1", Model: "m1", UsageTotals: store.UsageTotals{Requests: 2, PromptTokens: 33, CompletionTokens: 330, Cost: dec("33")}},
		{Day: "2026-11-21", KeyID: "k1", Account: "a1", Model: "m2", UsageTotals: store.UsageTotals{Requests: 1, PromptTokens: 2, CompletionTokens: 20, EstimatedRequests: 1, Cost: dec("2")}},
		{Day: "2026-11-21", KeyID: "k2", Account: "a1", Model: "m1", UsageTotals: store.UsageTotals{Requests: 1, PromptTokens: 4, CompletionTokens: 40, Cost: dec("4")}},
		{Day: "2026-11-22", KeyID: "k3", Account: "a2", Model: "m1", UsageTotals: store.UsageTotals{Requests: 1, PromptTokens: 8, CompletionTokens: 80, CachedTokens: 3, Cost: dec("8")}},
		{Day: "2026-11-23", KeyID: "k3", Account: "a2", Model: "m1", UsageTotals: store.UsageTotals{Requests: 1, PromptTokens: 16, CompletionTokens: 160, Cost: dec("16")}},
	}
	if len(u.Rows) != len(want) {
		t.Fatalf("rows = %+v, want %+v", u.Rows, want)
	}
	for i := range want {
		g, w := u.Rows[i], want[i]
		gc, wc := g.Cost, w.Cost
		g.Cost, w.Cost = decimal.Zero, decimal.Zero
		if !reflect.DeepEqual(g, w) || !gc.Equal(wc) {
			t.Errorf("row %d = %+v cost %s, want %+v cost %s", i, g, gc, w, wc)
		}
	}
	if u.EstimatedRequests != 1 || u.CachedTokens != 3 || u.CompletionTokens != 630 {
		t.Errorf("totals = %+v", u)
	}
	// Rows sort by account before key: a later key id of an earlier account comes first.
	if err := s.Settle(store.UsageRecord{RequestID: "7", KeyID: "k0", Account: "a2", Model: "m1", Cost: dec("1"), Time: day(21, 1, 0)}); err != nil {
		t.Fatal(err)
	}
	u, err = s.Usage(store.UsageFilter{Since: nov21, Until: nov21})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range u.Rows {
		order = append(order, r.Account+"/"+r.KeyID+"/"+r.Model)
	}
	if want := []string{"a1/k1/m2", "a1/k2/m1", "a2/k0/m1"}; !reflect.DeepEqual(order, want) {
		t.Errorf("row order = %v, want %v", order, want)
	}
}

func TestMonthSpend(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "10")
	at := func(r store.UsageRecord, tm time.Time) store.UsageRecord { r.Time = tm; return r }
	mustSettle(t, s, at(rec("1", "a", "0.5"), time.Date(2026, 10, 31, 23, 59, 59, 0, time.UTC)))
	mustSettle(t, s, at(rec("2", "a", "0.25"), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)))
	r3 := at(rec("3", "a", "0.125"), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	r3.KeyID = "key_2"
	mustSettle(t, s, r3)
	// 2026-11-01 01:00 in UTC+3 is still October in UTC.
	mustSettle(t, s, at(rec("4", "a", "1"), time.Date(2026, 11, 1, 1, 0, 0, 0, time.FixedZone("", 3*3600))))
	for month, want := range map[string]map[string]string{
		"2026-10": {"key_1": "1.5"},
		"2026-11": {"key_1": "0.25", "key_2": "0.125"},
		"2026-12": {},
	} {
		got, err := s.MonthSpend(month)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("MonthSpend(%s) = %v, want %v", month, got, want)
		}
		for k, w := range want {
			if !got[k].Equal(dec(w)) {
				t.Errorf("MonthSpend(%s)[%s] = %s, want %s", month, k, got[k], w)
			}
		}
	}
	for _, bad := range []string{"", "2026-1", "2026-13", "2026-11-01", "nov"} {
		if _, err := s.MonthSpend(bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("MonthSpend(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

const crashEnv = "TOLLWAY_LEDGER_CRASH_DB"

// TestLedgerCrashHelper is the child process of TestSettleSurvivesKill; run normally, it does
// nothing. It settles from many goroutines and prints "ack <id>" only after Settle returned.
func TestLedgerCrashHelper(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		return
	}
	s, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper open:", err)
		os.Exit(3)
	}
	round := os.Getenv(crashEnv + "_ROUND")
	var out sync.Mutex
	deadline := time.Now().Add(30 * time.Second) // in case the parent never kills us
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				id := fmt.Sprintf("r%s-g%d-%d", round, g, i)
				r := store.UsageRecord{
					RequestID: id, KeyID: fmt.Sprintf("key_%d", g%4), Account: "acct", Model: "m",
					PromptTokens: int64(i), CompletionTokens: 7,
					Cost: dec("0.00000015").Mul(decimal.NewFromInt(int64(i%7 + 1))),
				}
				// Half the goroutines settle in batches (as the gateway's settler does), the
				// rest one by one; a batch is acknowledged as a whole when it returns.
				batch := []store.UsageRecord{r}
				if g%2 == 1 {
					for j := 1; j < 5; j++ {
						extra := r
						extra.RequestID = fmt.Sprintf("%s.%d", id, j)
						batch = append(batch, extra)
					}
				}
				for _, err := range s.SettleBatch(batch) {
					if err != nil {
						fmt.Fprintln(os.Stderr, "helper settle:", err)
						os.Exit(4)
					}
				}
				out.Lock()
				var err error
				for _, b := range batch {
					if _, err = fmt.Fprintf(os.Stdout, "ack %s\n", b.RequestID); err != nil {
						break
					}
				}
				out.Unlock()
				if err != nil {
					os.Exit(5)
				}
				if i > 0 { // a retry of an acknowledged request must change nothing
					r.RequestID = fmt.Sprintf("r%s-g%d-%d", round, g, i-1)
					if err := s.Settle(r); err != nil {
						os.Exit(6)
					}
				}
			}
		})
	}
	wg.Wait()
	s.Close()
}

func TestSettleSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustAccount(t, s, "acct", "1000")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	for round := range 4 {
		want := 200 + 300*round // kill at a different point each round
		n := 0
		s := killDuring(t, "TestLedgerCrashHelper", path, []string{crashEnv + "=" + path, fmt.Sprintf("%s_ROUND=%d", crashEnv, round)},
			func(line string) bool {
				if id, ok := strings.CutPrefix(line, "ack "); ok {
					acked[id] = true
					n++
				}
				return n < want
			})
		byID := map[string]bool{}
		for _, r := range allRecords(t, s) {
			byID[r.RequestID] = true
		}
		missing := 0
		for id := range acked {
			if !byID[id] {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("round %d: %d of %d acknowledged settlements lost after kill -9", round, missing, len(acked))
		}
		sm := checkLedger(t, s, map[string]string{"acct": "1000"})
		t.Logf("round %d: %d acknowledged so far, %d records (the rest were committed but not yet acknowledged)", round, len(acked), sm.requests)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
