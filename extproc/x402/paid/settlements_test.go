package paid

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
)

// fakeFacilitator answers /settle with what answer says (status, body); it counts the calls.
type fakeFacilitator struct {
	mu     sync.Mutex
	status int
	body   string
	calls  atomic.Int64
}

func (f *fakeFacilitator) set(status int, body string) {
	f.mu.Lock()
	f.status, f.body = status, body
	f.mu.Unlock()
}

func (f *fakeFacilitator) start(t *testing.T) *x402.Facilitator {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.calls.Add(1)
		f.mu.Lock()
		status, body := f.status, f.body
		f.mu.Unlock()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	fac := x402.NewFacilitator(srv.URL)
	fac.Timeout = time.Second
	return fac
}

const (
	nonceUsed = `{"success":false,"errorReason":"invalid_exact_evm_nonce_already_used","transaction":"","network":"eip155:31337"}`
	settled   = `{"success":true,"transaction":"0xfeed","network":"eip155:31337"}`
)

// pendingOf is a pending settlement of record id whose credential expires at until.
func pendingOf(id string, until time.Time) store.PendingPayment {
	return store.PendingPayment{
		Record: store.UsageRecord{RequestID: id, KeyID: "x402.chat", Account: "x402.chat", Model: "m", PromptTokens: 3, Cost: decimal.RequireFromString("0.001"), Time: time.Now().UTC(),
			Payment: &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:31337", Asset: "0xa", Payer: "0xp", Amount: "10000",
				AmountUSD: decimal.RequireFromString("0.01"), Status: store.PaymentPending, Reason: "the facilitator did not answer"}},
		Payload:      []byte(`{"x402Version":2,"accepted":{},"payload":{}}`),
		Requirements: []byte(`{"scheme":"exact","network":"eip155:31337","amount":"10000","asset":"0xa","payTo":"0xb","maxTimeoutSeconds":60}`),
		Until:        until,
	}
}

// outcomes records what Settlements.Outcome heard.
type outcomes struct {
	mu  sync.Mutex
	got []string
}

func (o *outcomes) add(s string) { o.mu.Lock(); o.got = append(o.got, s); o.mu.Unlock() }
func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.got, ",")
}

// running starts Settlements over st with fac until the test ends.
func running(t *testing.T, st *bbolt.Store, fac *x402.Facilitator, now func() time.Time) (*Settlements, *outcomes) {
	s := NewSettlements(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if now != nil {
		s.Now = now
	}
	s.SetFacilitator(fac)
	o := &outcomes{}
	s.Outcome = o.add
	if _, err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, o
}

func openStore(t *testing.T, path string) *bbolt.Store {
	st, err := bbolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// payment is record id's payment as stored, once its status is want (nil after 10 s).
func payment(t *testing.T, st *bbolt.Store, id, want string) *store.Payment {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err := st.UsageRecords(store.UsageFilter{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.RequestID == id && r.Payment != nil && r.Payment.Status == want {
				return r.Payment
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s never became %s: %+v", id, want, recs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSettlementsResolve: a deferred settlement is stored at once; it is asked again while the
// facilitator says nothing useful (a 500), its outcome is written only once the request's own
// record was handed over (Release), and a spent nonce makes it settled: record, aggregates,
// entry and the outcomes heard (pending, then settled).
func TestSettlementsResolve(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "t.db"))
	defer st.Close()
	ff := &fakeFacilitator{status: 500, body: `{"error":"x"}`}
	s, heard := running(t, st, ff.start(t), nil)
	p := pendingOf("r1", time.Now().Add(time.Minute))
	s.Defer(p)
	if ps, err := st.PendingPayments(); err != nil || len(ps) != 1 || s.Pending() != 1 {
		t.Fatalf("deferred: %+v %v, pending %d", ps, err, s.Pending())
	}
	for ff.calls.Load() < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	ff.set(200, nonceUsed)
	for ff.calls.Load() < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	// Known, but the request is not over: nothing is written.
	if s.Pending() != 1 || heard.String() != SettlePending {
		t.Fatalf("before the release: pending %d, heard %s", s.Pending(), heard)
	}
	if errs := st.SettleBatch([]store.UsageRecord{p.Record}); errs[0] != nil { // what the settler does
		t.Fatal(errs[0])
	}
	s.Release("r1")
	pay := payment(t, st, "r1", store.PaymentSettled)
	if !strings.Contains(pay.Reason, "invalid_exact_evm_nonce_already_used") {
		t.Errorf("reason %q", pay.Reason)
	}
	sum, err := st.Usage(store.UsageFilter{})
	if err != nil || sum.Paid == nil || !sum.Paid.Equal(decimal.RequireFromString("0.01")) || sum.Pending != nil {
		t.Fatalf("aggregates %+v %v", sum.UsageTotals, err)
	}
	waitUntil(t, func() bool { return s.Pending() == 0 && heard.String() == "pending,settled" }, "settled heard: "+heard.String())
	if ps, _ := st.PendingPayments(); len(ps) != 0 {
		t.Fatalf("entry kept: %+v", ps)
	}
}

// TestSettlementsUnpaid: a settlement that never settles (every answer a 500) ends unpaid once
// its credential has less than settleMargin left, its record unpaid with the last error.
func TestSettlementsUnpaid(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "t.db"))
	defer st.Close()
	ff := &fakeFacilitator{status: 500, body: `{"error":"x"}`}
	s, heard := running(t, st, ff.start(t), nil)
	p := pendingOf("r1", time.Now().Add(settleMargin+1500*time.Millisecond))
	if errs := st.SettleBatch([]store.UsageRecord{p.Record}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	start := time.Now()
	s.Defer(p)
	s.Release("r1")
	pay := payment(t, st, "r1", store.PaymentUnpaid)
	if took := time.Since(start); took > 4*time.Second || !strings.Contains(pay.Reason, "expired") || !strings.Contains(pay.Reason, "status 500") {
		t.Errorf("unpaid after %v: %q", took, pay.Reason)
	}
	if n := ff.calls.Load(); n < 1 {
		t.Errorf("asked %d times", n)
	}
	waitUntil(t, func() bool { return heard.String() == "pending,unpaid" }, "heard "+heard.String())
	if sum, _ := st.Usage(store.UsageFilter{}); sum.Unpaid == nil || !sum.Unpaid.Equal(decimal.RequireFromString("0.01")) || sum.Paid != nil {
		t.Fatalf("aggregates %+v", sum.UsageTotals)
	}
}

// TestSettlementsResume: a pending settlement outlives its process: the next one resumes it
// from the store, writes the record the crash lost (from the draft) and settles it; one whose
// credential expired meanwhile is unpaid at once; a record that never reaches the store is
// written from the draft once recordGrace is over.
func TestSettlementsResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	st := openStore(t, path)
	if err := st.AddPendingPayment(pendingOf("crashed", time.Now().Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if err := st.AddPendingPayment(pendingOf("expired", time.Now().Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st = openStore(t, path)
	defer st.Close()
	ff := &fakeFacilitator{status: 200, body: settled}
	var skew atomic.Int64 // the clock, moved on by the test
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s, _ := running(t, st, ff.start(t), now)
	if pay := payment(t, st, "crashed", store.PaymentSettled); pay.Transaction != "0xfeed" {
		t.Errorf("crashed: %+v", pay)
	}
	if pay := payment(t, st, "expired", store.PaymentUnpaid); !strings.Contains(pay.Reason, "the gateway was not running") {
		t.Errorf("expired: %+v", pay)
	}
	// A request whose record never reaches the store (the settler gave up on it).
	s.Defer(pendingOf("lost", time.Now().Add(time.Minute)))
	s.Release("lost")
	for ff.calls.Load() < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	if s.Pending() != 1 {
		t.Fatalf("written before recordGrace: pending %d", s.Pending())
	}
	skew.Store(int64(recordGrace + time.Second))
	if pay := payment(t, st, "lost", store.PaymentSettled); pay.Amount != "10000" {
		t.Errorf("lost: %+v", pay)
	}
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}
