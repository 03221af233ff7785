package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// budgetCases: Budgets, run for a store several gateways share (Run adds them when the store
// implements it; a store of one gateway has no slices).
var budgetCases = []conformance{
	{"budget/lease-sizes-refuses-returns", func(t *testing.T, e *env) {
		b := budgets(t, e)
		account(t, e.s, "acme", "1")
		live(t, e.s, "a", "b")
		acme := store.AccountBudget("acme")
		lease(t, b, "a", acme, "0.3", "0.5", "0.5", "0.5") // half of what is left, at least the need
		lease(t, b, "b", acme, "0.1", "0.25", "0.125", "0.375")
		lease(t, b, "a", acme, "0.3", "0.25", "0.3", "0.075") // the need, when a share is less
		lease(t, b, "b", acme, "0.1", "0.25", "0", "0.075")   // short: nothing granted
		if err := b.ReturnBudget("a", acme, dec("0.2")); err != nil {
			t.Fatal(err)
		}
		if err := b.ReturnBudget("b", acme, dec("5")); err != nil { // more than it holds: all of it
			t.Fatal(err)
		}
		wantLeases(t, b, "a acme 0.6")
		lease(t, b, "b", acme, "0.4", "0", "0.4", "0") // the rest, exactly
		wantLeases(t, b, "a acme 0.6", "b acme 0.4")
		if g, _, err := b.LeaseBudget("a", store.AccountBudget("ghost"), dec("0.1"), dec("0.5")); err != nil || !g.IsZero() {
			t.Fatalf("an unknown account leased %s (%v)", g, err)
		}
		wantDec(t, "balance (leases are not spend)", balance(t, e.s, "acme"), "1")
	}},
	{"budget/key-limits-and-unlimited-keys", func(t *testing.T, e *env) {
		b := budgets(t, e)
		account(t, e.s, "acme", "100")
		live(t, e.s, "a")
		k := key(t, e.s, "acme", decp("0.05"))
		settle(t, e.s, usage("r1", k, "0.01019", 0))
		month := store.KeyBudget(k.ID, "2026-03")
		lease(t, b, "a", month, "0.01527", "0.25", "0.01527", "0.02454")
		lease(t, b, "a", month, "0.03", "0.25", "0", "0.02454")
		lease(t, b, "a", store.KeyBudget(k.ID, "2026-04"), "0.05", "0", "0.05", "0") // a month of its own
		free := key(t, e.s, "acme", nil)
		lease(t, b, "a", store.KeyBudget(free.ID, "2026-03"), "7", "0.5", "7", "0")
	}},
	{"budget/settling-takes-from-the-settlers-slice", func(t *testing.T, e *env) {
		b := budgets(t, e)
		account(t, e.s, "acme", "1")
		live(t, e.s, "a", "b")
		k := key(t, e.s, "acme", decp("0.5"))
		acme, month := store.AccountBudget("acme"), store.KeyBudget(k.ID, "2026-03")
		lease(t, b, "a", acme, "0.4", "0", "0.4", "0.6")
		lease(t, b, "a", month, "0.3", "0", "0.3", "0.2")
		lease(t, b, "b", acme, "0.1", "0", "0.1", "0.5")
		b.SettleAs("a")
		settle(t, e.s, usage("r1", k, "0.25", 0))
		settle(t, e.s, usage("r1", k, "0.25", 0)) // once per request id: taken once
		wantDec(t, "balance", balance(t, e.s, "acme"), "0.75")
		wantLeases(t, b, "a "+k.ID+" 0.05", "a acme 0.15", "b acme 0.1")
		// What is left unleased did not move: spent and leased moved together.
		lease(t, b, "b", acme, "0.5", "0", "0.5", "0")
		lease(t, b, "b", month, "0.2", "0", "0.2", "0")
		settle(t, e.s, usage("r2", k, "0.1", time.Second)) // more than a's key slice: it gives what it has
		wantLeases(t, b, "a acme 0.05", "b "+k.ID+" 0.2", "b acme 0.6")
	}},
	{"budget/concurrent-leases-never-exceed", func(t *testing.T, e *env) {
		b := budgets(t, e)
		account(t, e.s, "acme", "10")
		live(t, e.s, "a", "b", "c")
		k := key(t, e.s, "acme", decp("3"))
		refs := []store.BudgetRef{store.AccountBudget("acme"), store.KeyBudget(k.ID, "2026-03")}
		var mu sync.Mutex
		granted := map[store.BudgetRef]decimal.Decimal{}
		var wg sync.WaitGroup
		for g := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 7))
				for range 15 {
					ref := refs[r.IntN(2)]
					need := decimal.New(int64(1+r.IntN(400)), -3)
					got, _, err := b.LeaseBudget(fmt.Sprintf("%c", 'a'+g%3), ref, need, dec("0.1"))
					if err != nil {
						t.Error(err)
						return
					}
					if !got.IsZero() && got.LessThan(need) {
						t.Errorf("granted %s for a need of %s", got, need)
					}
					mu.Lock()
					granted[ref] = granted[ref].Add(got)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for ref, limit := range map[store.BudgetRef]string{refs[0]: "10", refs[1]: "3"} {
			if granted[ref].GreaterThan(dec(limit)) {
				t.Fatalf("%+v: granted %s of %s", ref, granted[ref], limit)
			}
			_, left, err := b.LeaseBudget("a", ref, dec("1000"), dec("0"))
			if err != nil {
				t.Fatal(err)
			}
			wantDec(t, fmt.Sprintf("%+v left", ref), left, dec(limit).Sub(granted[ref]).String())
			sum := decimal.Zero
			for _, l := range leases(t, b) {
				if l.Ref == ref {
					sum = sum.Add(l.Amount)
				}
			}
			wantDec(t, fmt.Sprintf("%+v: the slices' sum", ref), sum, granted[ref].String())
		}
	}},
	{"budget/gone-replicas-slices-come-back", func(t *testing.T, e *env) {
		b := budgets(t, e)
		account(t, e.s, "acme", "1")
		now := time.Now()
		for _, r := range []store.Replica{{Name: "live", LastSeen: now}, {Name: "gone", LastSeen: now.Add(-3 * time.Second)}} {
			r.Version, r.StartedAt, r.Lease = "v", now.Add(-time.Hour), 2*time.Second
			if err := e.s.Heartbeat(r); err != nil {
				t.Fatal(err)
			}
		}
		acme := store.AccountBudget("acme")
		lease(t, b, "live", acme, "0.2", "0", "0.2", "0.8")
		lease(t, b, "gone", acme, "0.3", "0", "0.3", "0.5")
		lease(t, b, "never-registered", acme, "0.1", "0", "0.1", "0.4")
		n, err := b.ReclaimBudget(now)
		if err != nil || n != 2 {
			t.Fatalf("reclaimed %d (%v), want the gone and the unregistered replicas' slices", n, err)
		}
		wantLeases(t, b, "live acme 0.2")
		lease(t, b, "live", acme, "0.8", "0", "0.8", "0")
		if err := b.ReturnAllBudget("live"); err != nil {
			t.Fatal(err)
		}
		wantLeases(t, b)
		lease(t, b, "live", acme, "1", "0", "1", "0")
	}},
	{"budget/asks-reach-the-other-replicas", func(t *testing.T, e *env) {
		b := budgets(t, e)
		other, ok := e.open(t).(store.Budgets)
		if !ok {
			t.Fatal("a second store of the same data has no budgets")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mine, theirs := b.BudgetAsks(ctx), other.BudgetAsks(ctx)
		want := []store.BudgetRef{store.AccountBudget("acme@x.io"), store.KeyBudget("key_1", "2026-03")}
		for _, ref := range want {
			if err := b.AskBudgetBack(ref); err != nil {
				t.Fatal(err)
			}
		}
		for _, ref := range want {
			select {
			case got := <-theirs:
				if got != ref {
					t.Fatalf("heard %+v, want %+v", got, ref)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the other replica did not hear %+v", ref)
			}
		}
		select {
		case got := <-mine:
			t.Fatalf("the asker heard its own ask %+v", got)
		case <-time.After(100 * time.Millisecond):
		}
	}},
}

// budgets is e's store as Budgets (Run runs these cases only on such a store).
func budgets(t *testing.T, e *env) store.Budgets {
	t.Helper()
	return e.s.(store.Budgets)
}

// live registers replicas names as live for an hour.
func live(t testing.TB, s store.Store, names ...string) {
	t.Helper()
	now := time.Now()
	for _, n := range names {
		if err := s.Heartbeat(store.Replica{Name: n, Version: "v", StartedAt: now, LastSeen: now, Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
}

// lease leases replica a slice of ref and wants granted and left.
func lease(t testing.TB, b store.Budgets, replica string, ref store.BudgetRef, need, share, granted, left string) {
	t.Helper()
	g, l, err := b.LeaseBudget(replica, ref, dec(need), dec(share))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Equal(dec(granted)) || !l.Equal(dec(left)) {
		t.Fatalf("%s leasing %s of %+v (share %s): granted %s, left %s; want %s, %s", replica, need, ref, share, g, l, granted, left)
	}
}

func leases(t testing.TB, b store.Budgets) []store.BudgetLease {
	t.Helper()
	ls, err := b.BudgetLeases()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// wantLeases wants the outstanding slices as "replica account-or-key amount", in order.
func wantLeases(t testing.TB, b store.Budgets, want ...string) {
	t.Helper()
	var got []string
	for _, l := range leases(t, b) {
		id := l.Ref.Account
		if l.Ref.IsKey() {
			id = l.Ref.KeyID
		}
		got = append(got, l.Replica+" "+id+" "+l.Amount.String())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("slices %q, want %q", got, want)
	}
}
