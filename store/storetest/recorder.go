package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// changeCases: Changes.
var changeCases = []conformance{
	{"changes/every-commit-is-told-in-order", func(t *testing.T, e *env) {
		s := e.s
		ctx, cancel := context.WithCancel(context.Background())
		ch := s.Subscribe(ctx)
		account(t, s, "acme", "1")
		k := key(t, s, "acme", nil)
		if _, err := s.CreditAccount("acme", dec("1")); err != nil {
			t.Fatal(err)
		}
		if err := s.PutProvider(store.Provider{Name: "p", Type: "openai"}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeKey(k.ID); err != nil {
			t.Fatal(err)
		}
		settle(t, s, usage("r1", k, "0.1", 0)) // a debit is not a change to follow
		if err := s.ReplaceConfig(store.Catalog{}); err != nil {
			t.Fatal(err)
		}
		// Each is this store's own: Local.
		want := []store.Change{{Topic: store.TopicAccounts, ID: "acme", Local: true}, {Topic: store.TopicKeys, ID: k.ID, Local: true},
			{Topic: store.TopicAccounts, ID: "acme", Local: true}, {Topic: store.TopicCatalog, ID: "p", Local: true},
			{Topic: store.TopicCatalog, ID: "route:r", Local: true}, {Topic: store.TopicKeys, ID: k.ID, Local: true}, {Topic: store.TopicCatalog, Local: true}}
		for i, w := range want {
			select {
			case got := <-ch:
				if got != w {
					t.Fatalf("change %d: %+v, want %+v", i, got, w)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("change %d (%+v) not told within 5 s", i, w)
			}
		}
		cancel()
		for range ch { // closed once ctx ended
		}
	}},
	{"changes/a-slow-subscriber-gets-topics", func(t *testing.T, e *env) {
		s := e.s
		ch := s.Subscribe(t.Context())
		for i := range 1100 {
			if err := s.PutProvider(store.Provider{Name: fmt.Sprint("p", i), Type: "openai"}); err != nil {
				t.Fatal(err)
			}
		}
		account(t, s, "acme", "1")
		seen := map[store.Topic]bool{}
		deadline := time.After(10 * time.Second)
		for !seen[store.TopicAccounts] {
			select {
			case c := <-ch:
				seen[c.Topic] = true
			case <-deadline:
				t.Fatalf("after 1,100 catalog changes the account's was not told (topics seen %v)", seen)
			}
		}
		if !seen[store.TopicCatalog] {
			t.Fatal("the catalog changes were not told")
		}
	}},
}

// recorderCases: Recorder over Ledger.
var recorderCases = []conformance{
	{"recorder/everything-queued-is-durable-at-close", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "1000")
		k := key(t, s, "acme", nil)
		r := e.b.Recorder(s, store.SettlerHooks{NotStored: func(rec store.UsageRecord, err error) { t.Errorf("%s not stored: %v", rec.RequestID, err) }})
		var wg sync.WaitGroup
		for g := range 20 {
			wg.Go(func() {
				for i := range 50 {
					r.Record(usage(fmt.Sprintf("r-%d-%d", g, i), k, "0.01", time.Duration(i)*time.Millisecond))
				}
			})
		}
		wg.Wait()
		r.Close()
		if st := r.Stats(); st.Records != 1000 || st.Commits < 1 || r.Queued() != 0 {
			t.Fatalf("stats %+v, queued %d", st, r.Queued())
		}
		checkBooks(t, s, "acme", "1000", "10", 1000)
	}},
	{"recorder/holds-until-settled-or-ended", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "10")
		k := key(t, s, "acme", nil)
		r := e.recorder(t)
		for i := range 3 {
			r.Hold(usage(fmt.Sprint("h", i), k, "9", 0), func() decimal.Decimal { return dec("0.5") })
		}
		waitFor(t, "three holds written", func() bool { n, err := s.OpenHolds(); return err == nil && n == 3 })
		r.Record(usage("h0", k, "0.25", 0))
		r.End("h1")
		waitFor(t, "a hold settled and one ended", func() bool { n, err := s.OpenHolds(); return err == nil && n == 1 })
		wantDec(t, "balance", balance(t, s, "acme"), "9.75")
	}},
}
