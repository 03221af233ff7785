package migrate

import (
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/postgres"
	"github.com/tollway/tollway/store/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var day0 = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fill writes every kind of record a gateway keeps into s.
func fill(t *testing.T, s *bbolt.Store) {
	must(t, s.PutProvider(store.Provider{Name: "p", Type: "openai", BaseURL: "https://api.example", APIKeyRef: "${P_KEY}", Source: store.SourceConfig}))
	must(t, s.PutModel(store.Model{ID: "m", Providers: []store.ModelProvider{{Provider: "p", Model: "x"}}, Pricing: json.RawMessage(`{"prompt":"0.000001"}`), Source: store.SourceAdmin}))
	must(t, s.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Models: []string{"m"}, Status: "paused"}))
	_, err := s.CreateAccount("acme", dec("25.5"))
	must(t, err)
	_, err = s.CreateAccount("beta", dec("3"))
	must(t, err)
	_, err = s.CreditAccount("beta", dec("0.125"))
	must(t, err)
	limit := dec("5")
	k, _, err := s.CreateKey("acme", store.KeyOptions{Name: "ci", MonthlyLimit: &limit, Models: []string{"m"}})
	must(t, err)
	old, _, err := s.CreateKey("beta", store.KeyOptions{})
	must(t, err)
	_, err = s.RevokeKey(old.ID)
	must(t, err)
	must(t, s.SetKeysUsed(map[string]time.Time{k.ID: day0}))
	recs := []store.UsageRecord{
		{RequestID: "r1", KeyID: k.ID, Account: "acme", Model: "m", Provider: "p", Route: "route:r", PromptTokens: 10, CompletionTokens: 5, CachedTokens: 2, Cost: dec("0.01019"), Time: day0},
		{RequestID: "r2", KeyID: k.ID, Account: "acme", Model: "m", Provider: "p", PromptTokens: 1, Cost: dec("0.5"), Estimated: true, EstimateReason: store.EstimateGatewayRestart, Time: day0.AddDate(0, -1, 0)},
		{RequestID: "r3", KeyID: "x402", Account: store.PaidAccountPrefix + "chat", Model: "m", Provider: "p", Cost: dec("0.01"), Time: day0,
			Payment: &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:84532", Asset: "0xa", Payer: "0xb", Amount: "10000", AmountUSD: dec("0.01"), Status: store.PaymentSettled}},
	}
	for i, err := range s.SettleBatch(recs) {
		if err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	pend := store.UsageRecord{RequestID: "paid-1", KeyID: "x402", Account: store.PaidAccountPrefix + "chat", Model: "m", Cost: dec("0.01"), Time: day0,
		Payment: &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:84532", Asset: "0xa", Payer: "0xb", Amount: "10000", AmountUSD: dec("0.01"), Status: store.PaymentPending, Reason: "lost"}}
	must(t, s.AddPendingPayment(store.PendingPayment{Record: pend, Payload: json.RawMessage(`{"x402Version":2}`), Requirements: json.RawMessage(`{"scheme":"exact"}`), Until: day0.Add(time.Hour)}))
	must(t, s.ClaimCredential("eip155:84532/0xa/0xb/nonce-1", day0.Add(time.Hour)))
	_, err = s.CallbackSecret("acme")
	must(t, err)
	video := &store.Task{ID: "video_1", Kind: "video", Account: "acme", KeyID: k.ID, RequestID: "req-v", Model: "clip", Family: "V1", Provider: "p",
		ProviderTaskID: "pt-1", Status: "queued", Hold: dec("0.5"), CreatedAt: day0, UpdatedAt: day0, CallbackURL: "https://hooks.example/t"}
	must(t, s.PutTaskChange(video, store.TaskChange{Callbacks: []store.Callback{{TaskID: "video_1", Account: "acme", URL: "https://hooks.example/t", Body: []byte(`{"id":"video_1"}`), Attempt: 2}}}))
	img := &store.Task{ID: "image_1", Kind: "image", Account: "acme", KeyID: k.ID, RequestID: "req-i", Model: "clip", Family: "V1", Provider: "p",
		ProviderTaskID: "pt-2", Status: "completed", Hold: dec("0.5"), CreatedAt: day0, UpdatedAt: day0, CompletedAt: day0,
		Images: []store.TaskImage{{MIMEType: "image/png", ExpiresAt: day0.Add(24 * time.Hour), Data: []byte("png bytes")}}}
	must(t, s.PutTaskChange(img, store.TaskChange{}))
	rec := bbolt.NewSettler(s, time.Millisecond, store.SettlerHooks{})
	rec.Hold(store.UsageRecord{RequestID: "cut-1", KeyID: k.ID, Account: "acme", Model: "m", Provider: "p", Cost: dec("0.2"), Time: day0}, func() decimal.Decimal { return dec("0.2") })
	rec.Close() // the hold stays: the request never settled
}

// everything is what a store shows through its interfaces, for comparing two stores.
func everything(t *testing.T, s store.Store) map[string]any {
	t.Helper()
	out := map[string]any{}
	get := func(name string, v any, err error) {
		t.Helper()
		must(t, err)
		out[name] = v
	}
	cat, err := s.Catalog()
	get("catalog", cat, err)
	accts, err := s.Accounts()
	get("accounts", accts, err)
	keys, err := s.Keys()
	get("keys", keys, err)
	recs, err := s.UsageRecords(store.UsageFilter{}, 0)
	get("records", recs, err)
	sum, err := s.Usage(store.UsageFilter{})
	get("usage", sum, err)
	ru, err := s.RouteUsage()
	get("route usage", ru, err)
	for _, m := range []string{"2026-02", "2026-03"} {
		sp, err := s.MonthSpend(m)
		get("spend "+m, sp, err)
	}
	holds, err := s.OpenHolds()
	get("holds", holds, err)
	for _, id := range []string{"video_1", "image_1"} {
		tk, err := s.GetTask(id)
		get("task "+id, tk, err)
	}
	var cbs []store.Callback
	must(t, s.ScanDueCallbacks(time.Unix(0, math.MaxInt64), 100, func(string) bool { return false }, func(c store.Callback) bool { cbs = append(cbs, c); return true }))
	out["callbacks"] = cbs
	secret, err := s.CallbackSecret("acme")
	get("secret", secret, err)
	pend, err := s.PendingPayments()
	get("pending", pend, err)
	return out
}

// diff compares two stores' views kind by kind, as JSON (times in UTC, decimals as written).
func diff(want, got map[string]any) string {
	var out []string
	for k, w := range want {
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(got[k])
		if string(wj) != string(gj) {
			out = append(out, k+":\n  file     "+string(wj)+"\n  database "+string(gj))
		}
	}
	return strings.Join(out, "\n")
}

// TestMigrateCopiesEverything: a bbolt store holding every kind of record, migrated into an
// empty database, reads the same there through every interface (balances, keys with their
// hashes and limits, records, aggregates, month spend, holds, tasks with images and callbacks,
// signing secrets, pending settlements, used credentials); a second run copies nothing; a
// database holding other records is refused before anything is written.
func TestMigrateCopiesEverything(t *testing.T) {
	src, err := bbolt.Open(filepath.Join(t.TempDir(), "tollway.db"))
	must(t, err)
	t.Cleanup(func() { _ = src.Close() })
	fill(t, src)
	dst, err := postgres.Open(postgres.Options{DSN: pgtest.Database(t, t.Name())})
	must(t, err)
	t.Cleanup(func() { _ = dst.Close() })

	res, err := Run(src, dst)
	must(t, err)
	for _, k := range Kinds {
		if res.Found[k] == 0 || res.Copied[k] != res.Found[k] {
			t.Errorf("%s: %d found, %d copied; want every kind present and copied", k, res.Found[k], res.Copied[k])
		}
	}
	want, got := everything(t, src), everything(t, dst)
	if d := diff(want, got); d != "" {
		t.Fatalf("the database differs from the file:\n%s", d)
	}
	if err := dst.ClaimCredential("eip155:84532/0xa/0xb/nonce-1", day0.Add(time.Hour)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a used credential is usable again after the migration: %v", err)
	}

	again, err := Run(src, dst)
	must(t, err)
	for _, k := range Kinds {
		if again.Copied[k] != 0 {
			t.Errorf("second run copied %d %s, want 0", again.Copied[k], k)
		}
	}
	if d := diff(want, everything(t, dst)); d != "" {
		t.Fatalf("a second run changed the database:\n%s", d)
	}

	other, err := postgres.Open(postgres.Options{DSN: pgtest.Database(t, t.Name()+"/other")})
	must(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = other.CreateAccount("someone-else", dec("1"))
	must(t, err)
	if _, err := Run(src, other); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a database with other records: %v, want refused", err)
	}
	if n, _ := other.Counts(); n["api_keys"] != 0 {
		t.Fatalf("a refused migration wrote %d keys", n["api_keys"])
	}
}
