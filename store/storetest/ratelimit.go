package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

// rateCases: RateShares, run for a store several gateways share (Run adds them when the store
// has them).
var rateCases = []conformance{
	{"rates/shares-never-add-up-past-the-whole", func(t *testing.T, e *env) {
		r := e.s.(store.RateShares)
		now, exp := day0, day0.Add(3*time.Second)
		got := func(replica string, want int64) int64 {
			t.Helper()
			m, err := r.ShareRates(replica, map[string]int64{"key:a": want}, now, exp)
			if err != nil {
				t.Fatal(err)
			}
			return m["key:a"]
		}
		if g := got("a", store.ShareWhole); g != store.ShareWhole {
			t.Fatalf("alone: %d", g)
		}
		if g := got("b", store.ShareWhole); g != 0 {
			t.Fatalf("b while a holds the whole: %d", g)
		}
		if g := got("a", store.ShareWhole); g != store.ShareWhole/2 {
			t.Fatalf("a renewing while b asks as much: %d, want half", g)
		}
		if g := got("b", store.ShareWhole); g != store.ShareWhole/2 {
			t.Fatalf("b after a shrank: %d, want half", g)
		}
		if g := got("c", 200_000); g != 0 {
			t.Fatalf("c while a and b hold the whole: %d", g)
		}
		if g := got("a", 0); g != 0 {
			t.Fatalf("a giving up: %d", g)
		}
		// b still asks for the whole: c gets its proportion, 200000 of the 1200000 asked for.
		if g := got("c", 200_000); g != 166_666 {
			t.Fatalf("c once a gave up: %d, want 166666", g)
		}
		now = exp // b and c not renewed: gone
		if g := got("a", store.ShareWhole); g != store.ShareWhole {
			t.Fatalf("a once the others expired: %d", g)
		}
		if _, err := r.ShareRates("a", map[string]int64{"key:a": store.ShareWhole + 1}, now, exp); err == nil {
			t.Fatal("a share over the whole was asked for")
		}
	}},
	{"rates/concurrent-grants-never-add-up-past-the-whole", func(t *testing.T, e *env) {
		r := e.s.(store.RateShares)
		var mu sync.Mutex
		total := int64(0)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				m, err := r.ShareRates(string(rune('a'+i)), map[string]int64{"key:a": 400_000, "key:b": 300_000}, day0, day0.Add(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += m["key:a"]
				mu.Unlock()
			})
		}
		wg.Wait()
		if total > store.ShareWhole || total < 400_000 {
			t.Fatalf("8 replicas were granted %d parts per million of one owner", total)
		}
	}},
}
