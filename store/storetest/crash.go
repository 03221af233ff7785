package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// crashKey is the key every crash case bills: the same in the child and the check.
var crashKey = store.Key{ID: "key_c0ffee", Account: "acme"}

// crashBooks makes the account and key the crash cases bill.
func crashBooks(t *testing.T, s store.Store) {
	account(t, s, "acme", "100")
	if err := s.PutKey(store.Key{ID: crashKey.ID, Hash: "00", Prefix: "ale-000000", Account: "acme", CreatedAt: day0}); err != nil {
		t.Fatal(err)
	}
}

// crashCases: what a store acknowledged is there after kill -9.
var crashCases = []crashCase{
	{
		name: "acknowledged-settles-survive",
		child: func(t *testing.T, s store.Store, _ func() store.Recorder, say func(string)) {
			crashBooks(t, s)
			for i := 0; ; i++ {
				settle(t, s, usage(fmt.Sprint("r", i), crashKey, "0.01", time.Duration(i)*time.Millisecond))
				say(fmt.Sprint("settled ", i))
			}
		},
		enough: func(line string) bool { return line == "settled 30" },
		check: func(t *testing.T, s store.Store, said []string) {
			recs, err := s.UsageRecords(store.UsageFilter{}, 0)
			if err != nil || len(recs) < 31 {
				t.Fatalf("%d records after 31 were acknowledged (%v)", len(recs), err)
			}
			checkBooks(t, s, "acme", "100", decimal.New(int64(len(recs)), -2).String(), len(recs))
		},
	},
	{
		name: "holds-bill-as-gateway-restart",
		child: func(t *testing.T, s store.Store, rec func() store.Recorder, say func(string)) {
			crashBooks(t, s)
			r := rec()
			for i := range 4 {
				r.Hold(usage(fmt.Sprint("cut", i), crashKey, "0.5", 0), nil)
			}
			r.Record(usage("cut0", crashKey, "0.25", 0)) // settled before the crash
			r.Record(usage("done", crashKey, "0.25", 0))
			waitFor(t, "three holds and two records written", func() bool {
				n, err := s.OpenHolds()
				recs, rerr := s.UsageRecords(store.UsageFilter{}, 0)
				return err == nil && rerr == nil && n == 3 && len(recs) == 2
			})
			say("holds written")
		},
		enough: func(line string) bool { return line == "holds written" },
		check: func(t *testing.T, s store.Store, _ []string) {
			n, failed, err := s.SettleHolds(store.EstimateGatewayRestart)
			if err != nil || n != 3 || len(failed) != 0 {
				t.Fatalf("SettleHolds: %d %v %v", n, failed, err)
			}
			if n, err := s.OpenHolds(); err != nil || n != 0 {
				t.Fatalf("%d holds left (%v)", n, err)
			}
			recs, err := s.UsageRecords(store.UsageFilter{}, 0)
			if err != nil || len(recs) != 5 {
				t.Fatalf("%d records (%v), want the 2 settled and the 3 cut", len(recs), err)
			}
			for _, r := range recs {
				cut := r.RequestID != "cut0" && r.RequestID != "done"
				if cut != (r.Estimated && r.EstimateReason == store.EstimateGatewayRestart) {
					t.Fatalf("record %+v", r)
				}
			}
			wantDec(t, "balance", balance(t, s, "acme"), "98")
		},
	},
	{
		name: "pending-settlements-resume",
		child: func(t *testing.T, s store.Store, _ func() store.Recorder, say func(string)) {
			for i := range 3 {
				if err := s.AddPendingPayment(pendingPayment(fmt.Sprint("paid-", i))); err != nil {
					t.Fatal(err)
				}
				say(strconv.Itoa(i))
			}
		},
		enough: func(line string) bool { return line == "2" },
		check: func(t *testing.T, s store.Store, _ []string) {
			ps, err := s.PendingPayments()
			if err != nil || len(ps) != 3 {
				t.Fatalf("%d pending settlements after the crash (%v), want 3", len(ps), err)
			}
			errs := s.SettleBatch([]store.UsageRecord{ps[0].Record, ps[1].Record, ps[2].Record}) // their records never were
			if errors.Join(errs...) != nil {
				t.Fatal(errs)
			}
			for _, p := range ps {
				if err := s.ResolvePayment(p.Record.RequestID, store.PaymentResolution{Status: store.PaymentUnpaid, Reason: "expired"}); err != nil {
					t.Fatal(err)
				}
			}
			sum, err := s.Usage(store.UsageFilter{})
			if err != nil || sum.Unpaid == nil || !sum.Unpaid.Equal(dec("0.03")) || sum.Pending != nil {
				t.Fatalf("usage after resuming: %+v %v", sum, err)
			}
		},
	},
	{
		name: "claims-and-catalog-survive",
		child: func(t *testing.T, s store.Store, _ func() store.Recorder, say func(string)) {
			if err := s.ClaimCredential("cred", time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := s.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateAccount("acme", dec("5")); err != nil {
				t.Fatal(err)
			}
			say("done")
		},
		enough: func(line string) bool { return line == "done" },
		check: func(t *testing.T, s store.Store, _ []string) {
			if err := s.ClaimCredential("cred", time.Now().Add(time.Hour)); !errors.Is(err, store.ErrExists) {
				t.Fatalf("a credential claimed before the crash: %v", err)
			}
			if rs, err := s.Routes(); err != nil || len(rs) != 1 {
				t.Fatalf("routes after the crash: %+v %v", rs, err)
			}
			wantDec(t, "balance", balance(t, s, "acme"), "5")
		},
	},
}
