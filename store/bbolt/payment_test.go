package bbolt

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// TestPaidRecords: a request paid through x402 is recorded with its payment (read back
// whole), counted in the aggregates with what was paid, and debits no credits and no month
// spend, for a keyed account and for the endpoint's own x402.<slug> account, which has no row
// and cannot be created.
func TestPaidRecords(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "acme", "5")
	now := time.Now().UTC()
	pay := &store.Payment{Endpoint: "chat-mini", Scheme: "upto", Network: "eip155:31337", Asset: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
		Payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", Amount: "1019", AmountUSD: dec("0.001019"), Transaction: "0xabc"}
	recs := []store.UsageRecord{
		{RequestID: "r1", KeyID: "key_1", Account: "acme", Model: "m", Cost: dec("0.001019"), Time: now, Payment: pay},
		{RequestID: "r2", KeyID: "x402.chat-mini", Account: "x402.chat-mini", Model: "m", Cost: dec("0.001019"), Time: now, Payment: pay},
	}
	for i, err := range s.SettleBatch(recs) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if a, _ := s.GetAccount("acme"); !a.Balance.Equal(dec("5")) {
		t.Fatalf("a paid request debited credits: %s", a.Balance)
	}
	if spend, _ := s.MonthSpend(now.Format(store.MonthLayout)); !spend["key_1"].IsZero() {
		t.Fatalf("month spend %v", spend)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.UsageRecords(store.UsageFilter{Account: "x402.chat-mini"}, 10)
	if err != nil || len(got) != 1 || got[0].Payment == nil || (got[0].Payment.Transaction != "0xabc" || got[0].Payment.Status != store.PaymentSettled || !got[0].Payment.AmountUSD.Equal(pay.AmountUSD) || got[0].Payment.Payer != pay.Payer || got[0].Payment.Amount != "1019") {
		t.Fatalf("read back %+v %v", got, err)
	}
	sum, err := s.Usage(store.UsageFilter{})
	if err != nil || !sum.Paid.Equal(dec("0.002038")) || !sum.Cost.Equal(dec("0.002038")) || sum.Requests != 2 {
		t.Fatalf("totals %+v %v", sum.UsageTotals, err)
	}
	if _, err := s.CreateAccount("x402.chat-mini", decimal.Zero); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("the reserved account could be created: %v", err)
	}
}

// TestPendingPayments: a paid request whose settlement is pending is recorded as such and
// counted as pending in the daily and route aggregates; its PendingPayment survives a reopen;
// ResolvePayment turns it settled (with the transaction) or unpaid, moves its amount in the
// aggregates and drops the entry, once; a record not stored yet is ErrNotFound and changes
// nothing.
func TestPendingPayments(t *testing.T) {
	s, path := openTemp(t)
	now := time.Now().UTC()
	pending := func(id, usd string) store.UsageRecord {
		return store.UsageRecord{RequestID: id, KeyID: "x402.chat", Account: "x402.chat", Model: "m", Route: "route:r", Cost: dec("0.003"), Time: now,
			Payment: &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:31337", Asset: "0xa", Payer: "0xp", Amount: "1",
				AmountUSD: dec(usd), Status: store.PaymentPending, Reason: "the facilitator did not answer within 3s"}}
	}
	a, b := pending("a", "0.01"), pending("b", "0.02")
	for _, rec := range []store.UsageRecord{a, b} {
		if err := s.AddPendingPayment(store.PendingPayment{Record: rec, Payload: []byte(`{"x402Version":2}`), Requirements: []byte(`{"scheme":"exact"}`), Until: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddPendingPayment(store.PendingPayment{Record: store.UsageRecord{RequestID: "c", KeyID: "k", Account: "x402.chat"}}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a pending payment without a pending record: %v", err)
	}
	if err := s.ResolvePayment("a", store.PaymentResolution{Status: store.PaymentSettled}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("resolving a record not stored yet: %v", err)
	}
	for i, err := range s.SettleBatch([]store.UsageRecord{a, b}) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	totals := func() (store.UsageTotals, store.UsageTotals) {
		t.Helper()
		sum, err := s.Usage(store.UsageFilter{})
		routes, rerr := s.RouteUsage()
		if err != nil || rerr != nil || len(routes["route:r"]) != 1 {
			t.Fatalf("usage: %v %v %v", err, rerr, routes)
		}
		return sum.UsageTotals, routes["route:r"][0].UsageTotals
	}
	want := func(got store.UsageTotals, paid, pending, unpaid string) {
		t.Helper()
		s := func(d *decimal.Decimal) string {
			if d == nil {
				return "-"
			}
			return d.String()
		}
		if s(got.Paid) != paid || s(got.Pending) != pending || s(got.Unpaid) != unpaid || got.Requests != 2 || !got.Cost.Equal(dec("0.006")) {
			t.Fatalf("totals %+v: paid %s pending %s unpaid %s, want %s %s %s", got, s(got.Paid), s(got.Pending), s(got.Unpaid), paid, pending, unpaid)
		}
	}
	day, route := totals()
	want(day, "-", "0.03", "-")
	want(route, "-", "0.03", "-")

	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ps, err := s.PendingPayments(); err != nil || len(ps) != 2 || ps[0].Record.RequestID != "a" || string(ps[0].Payload) != `{"x402Version":2}` || !ps[0].Until.Equal(now.Add(time.Minute)) {
		t.Fatalf("pending after a reopen: %+v %v", ps, err)
	}
	// A damaged entry is reported and left out; the others are listed.
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketPendingPayments).Put([]byte("0-damaged"), []byte("{")) }); err != nil {
		t.Fatal(err)
	}
	if ps, err := s.PendingPayments(); !errors.Is(err, store.ErrInvalid) || len(ps) != 2 {
		t.Fatalf("with a damaged entry: %d listed, %v", len(ps), err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketPendingPayments).Delete([]byte("0-damaged")) }); err != nil {
		t.Fatal(err)
	}

	if err := s.ResolvePayment("a", store.PaymentResolution{Status: store.PaymentSettled, Transaction: "0xtx", Reason: "nonce spent"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ResolvePayment("b", store.PaymentResolution{Status: store.PaymentUnpaid, Reason: strings.Repeat("é", 300)}); err != nil {
		t.Fatal(err)
	}
	day, route = totals()
	want(day, "0.01", "-", "0.02")
	want(route, "0.01", "-", "0.02")
	// Once resolved, it stays so.
	if err := s.ResolvePayment("a", store.PaymentResolution{Status: store.PaymentUnpaid}); err != nil {
		t.Fatal(err)
	}
	day, _ = totals()
	want(day, "0.01", "-", "0.02")
	recs, err := s.UsageRecords(store.UsageFilter{}, 10)
	if err != nil || len(recs) != 2 {
		t.Fatal(recs, err)
	}
	for _, r := range recs {
		p := r.Payment
		switch r.RequestID {
		case "a":
			if p.Status != store.PaymentSettled || p.Transaction != "0xtx" || p.Reason != "nonce spent" || !r.Cost.Equal(dec("0.003")) {
				t.Errorf("a: %+v", p)
			}
		case "b":
			if p.Status != store.PaymentUnpaid || p.Transaction != "" || len(p.Reason) > 256 || !utf8.ValidString(p.Reason) {
				t.Errorf("b: %+v", p)
			}
		}
	}
	if ps, err := s.PendingPayments(); err != nil || len(ps) != 0 {
		t.Fatalf("pending once resolved: %+v %v", ps, err)
	}
	checkIndex(t, s)
}
