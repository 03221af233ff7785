package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

// pendingPayment is a pending settlement of request id, paid by the x402 endpoint chat.
func pendingPayment(id string) store.PendingPayment {
	r := store.UsageRecord{RequestID: id, KeyID: "x402", Account: store.PaidAccountPrefix + "chat", Model: "m", Cost: dec("0.01"), Time: day0,
		Payment: &store.Payment{Endpoint: "chat", Scheme: "exact", Network: "eip155:84532", Asset: "0xa", Payer: "0xb",
			Amount: "10000", AmountUSD: dec("0.01"), Status: store.PaymentPending, Reason: "the facilitator's answer was lost"}}
	return store.PendingPayment{Record: r, Payload: json.RawMessage(`{"x402Version":2}`), Requirements: json.RawMessage(`{"scheme":"exact"}`),
		Until: day0.Add(time.Hour)}
}

// paymentCases: Payments and Credentials.
var paymentCases = []conformance{
	{"payments/pending-until-resolved", func(t *testing.T, e *env) {
		s := e.s
		p := pendingPayment("paid-1")
		notPending := pendingPayment("paid-2")
		notPending.Record.Payment.Status = store.PaymentSettled
		if err := s.AddPendingPayment(notPending); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a settled payment kept as pending: %v", err)
		}
		if err := s.AddPendingPayment(p); err != nil {
			t.Fatal(err)
		}
		ps, err := s.PendingPayments()
		if err != nil || len(ps) != 1 || ps[0].Record.RequestID != "paid-1" || string(ps[0].Payload) != `{"x402Version":2}` || !ps[0].Until.Equal(p.Until) {
			t.Fatalf("PendingPayments: %+v %v", ps, err)
		}
		settled := store.PaymentResolution{Status: store.PaymentSettled, Transaction: "0xtx", Reason: "settled when asked again"}
		if err := s.ResolvePayment("paid-1", settled); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("resolving before the record is stored: %v", err)
		}
		if err := s.ResolvePayment("paid-1", store.PaymentResolution{Status: "maybe"}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("resolving to no status: %v", err)
		}
		settle(t, s, p.Record)
		if sum, err := s.Usage(store.UsageFilter{}); err != nil || sum.Pending == nil || !sum.Pending.Equal(dec("0.01")) || sum.Paid != nil {
			t.Fatalf("usage while pending: %+v %v", sum, err)
		}
		if err := s.ResolvePayment("paid-1", settled); err != nil {
			t.Fatal(err)
		}
		if err := s.ResolvePayment("paid-1", store.PaymentResolution{Status: store.PaymentUnpaid}); err != nil {
			t.Fatalf("resolving a resolved record again: %v", err)
		}
		recs, err := s.UsageRecords(store.UsageFilter{}, 0)
		if err != nil || len(recs) != 1 || recs[0].Payment.Status != store.PaymentSettled || recs[0].Payment.Transaction != "0xtx" {
			t.Fatalf("the record after it was resolved: %+v %v", recs, err)
		}
		sum, err := s.Usage(store.UsageFilter{})
		if err != nil || sum.Pending != nil || sum.Paid == nil || !sum.Paid.Equal(dec("0.01")) {
			t.Fatalf("usage after it was resolved: %+v %v", sum, err)
		}
		if ps, err := s.PendingPayments(); err != nil || len(ps) != 0 {
			t.Fatalf("still pending: %+v %v", ps, err)
		}
	}},
	{"credentials/claimed-once-among-50", func(t *testing.T, e *env) {
		s := e.s
		until := time.Now().Add(time.Hour)
		var mu sync.Mutex
		won, used := 0, 0
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				err := s.ClaimCredential("eip155:84532/0xa/0xb/0x01", until)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, store.ErrExists):
					used++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if won != 1 || used != 49 {
			t.Fatalf("50 concurrent claims: %d won, %d found it used", won, used)
		}
		for _, bad := range []struct {
			key   string
			until time.Time
		}{{"", until}, {string(make([]byte, store.MaxCredentialKey+1)), until}, {"k", time.Time{}}} {
			if err := s.ClaimCredential(bad.key, bad.until); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("claim of %d bytes until %v: %v", len(bad.key), bad.until, err)
			}
		}
	}},
}

// pruneCases: Pruner.
var pruneCases = []conformance{
	{"prune/records-tasks-images-claims", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "10")
		k := key(t, s, "acme", nil)
		settle(t, s, usage("old-1", k, "1", 0), usage("old-2", k, "1", time.Minute), usage("new", k, "1", 48*time.Hour))
		if res, err := s.PruneUsage(day0.Add(time.Hour), 1); err != nil || res.Deleted != 1 {
			t.Fatalf("PruneUsage, one at a time: %+v %v", res, err)
		}
		if res, err := s.PruneUsage(day0.Add(time.Hour), 10); err != nil || res.Deleted != 1 {
			t.Fatalf("PruneUsage, the rest: %+v %v", res, err)
		}
		recs, _ := s.UsageRecords(store.UsageFilter{}, 0)
		sum, err := s.Usage(store.UsageFilter{})
		if len(recs) != 1 || err != nil || sum.Requests != 3 {
			t.Fatalf("after pruning: %d records, aggregates %+v %v (kept for good)", len(recs), sum, err)
		}
		wantDec(t, "balance", balance(t, s, "acme"), "7")

		done := task("video_done", "acme")
		done.Status, done.CompletedAt = "completed", day0
		img := task("image_kept", "acme")
		img.Images = []store.TaskImage{{MIMEType: "image/png", ExpiresAt: day0.Add(time.Hour), Data: []byte("png")}}
		for _, tk := range []*store.Task{done, img, task("video_open", "acme")} {
			if err := s.PutTaskChange(tk, store.TaskChange{}); err != nil {
				t.Fatal(err)
			}
		}
		if res, err := s.PruneTasks(day0.Add(time.Hour), 10); err != nil || res.Deleted != 1 {
			t.Fatalf("PruneTasks: %+v %v", res, err)
		}
		if _, err := s.GetTask("video_done"); !errors.Is(err, store.ErrTaskNotFound) {
			t.Fatalf("a pruned task: %v", err)
		}
		if res, err := s.PruneImages(day0.Add(2*time.Hour), 10); err != nil || res.Deleted != 1 {
			t.Fatalf("PruneImages: %+v %v", res, err)
		}
		if got, err := s.GetTask("image_kept"); err != nil || got.Images[0].Data != nil {
			t.Fatalf("a task whose image expired: %+v %v", got, err)
		}
		if err := s.ClaimCredential("cred", day0); err != nil {
			t.Fatal(err)
		}
		if res, err := s.PruneCredentials(day0.Add(time.Second), 10); err != nil || res.Deleted != 1 {
			t.Fatalf("PruneCredentials: %+v %v", res, err)
		}
		if err := s.ClaimCredential("cred", day0); err != nil {
			t.Fatalf("a claim swept after it could no longer be replayed: %v", err)
		}
	}},
}

// healthCases: Health.
var healthCases = []conformance{
	{"health/a-fresh-store-is-healthy", func(t *testing.T, e *env) {
		if err := e.s.Unavailable(); err != nil || e.s.Outage() != nil {
			t.Fatalf("a fresh store: %v %v", err, e.s.Outage())
		}
		switch st := e.s.ReserveState(); st {
		case "held", "released", "none":
		default:
			t.Fatalf("reserve state %q", st)
		}
	}},
}
