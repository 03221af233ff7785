package bbolt

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// TestSettleBatchPerRecordOutcomes: one transaction, but each record succeeds or fails alone.
func TestSettleBatchPerRecordOutcomes(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "10")
	mustAccount(t, s, "b", "1")
	mustSettle(t, s, rec("earlier", "a", "1"))

	bad := rec("bad", "a", "1")
	bad.Cost = dec("-1")
	batch := []store.UsageRecord{
		rec("r1", "a", "0.25"),
		rec("r2", "b", "0.5"),
		rec("ghost-1", "ghost", "1"),
		rec("r1", "a", "0.25"), // the same request twice in one batch: settled once
		bad,
		rec("earlier", "a", "1"), // settled by an earlier transaction: nothing happens
		rec("r3", "a", "0.125"),
		rec("r4", "b", "0.75"),   // more than b has left: stored, b taken to zero, the rest overage
		rec("dup", "ghost", "1"), // fails alone ...
		rec("dup", "a", "0.5"),   // ... so the same id for a real account is settled
	}
	errs := s.SettleBatch(batch)
	if len(errs) != len(batch) {
		t.Fatalf("%d errors for %d records", len(errs), len(batch))
	}
	for i, err := range errs {
		switch batch[i].RequestID {
		case "ghost-1", "dup":
			if batch[i].Account != "ghost" {
				if err != nil {
					t.Errorf("record %d (%s for a real account): %v", i, batch[i].RequestID, err)
				}
				continue
			}
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("record %d (unknown account): %v, want ErrNotFound", i, err)
			}
		case "bad":
			if !errors.Is(err, store.ErrInvalid) {
				t.Errorf("record %d (negative cost): %v, want ErrInvalid", i, err)
			}
		default:
			if err != nil {
				t.Errorf("record %d (%s): %v", i, batch[i].RequestID, err)
			}
		}
	}
	wantDec(t, "a's balance", balance(t, s, "a"), "8.125") // 10 - 1 - 0.25 - 0.125 - 0.5
	wantDec(t, "b's balance", balance(t, s, "b"), "0")     // 1 - 0.5 - 0.5 of r4's 0.75
	sm := checkLedger(t, s, map[string]string{"a": "10", "b": "1"})
	if sm.requests != 6 {
		t.Errorf("%d records, want 6 (earlier, r1, r2, r3, r4, dup)", sm.requests)
	}
}

// TestSettleBatchMatchesSettle: settling records in batches leaves exactly the books that
// settling them one at a time leaves (aggregates folded per batch must add up the same).
func TestSettleBatchMatchesSettle(t *testing.T) {
	one, _ := openTemp(t)
	defer one.Close()
	many, _ := openTemp(t)
	defer many.Close()
	credits := map[string]string{"x": "100", "y": "3"}
	for _, s := range []*Store{one, many} {
		for a, c := range credits {
			mustAccount(t, s, a, c)
		}
	}
	var recs []store.UsageRecord
	for i := range 300 {
		r := store.UsageRecord{
			RequestID: fmt.Sprintf("q%d", i%280), // 20 repeats
			KeyID:     fmt.Sprintf("k%d", i%4), Account: []string{"x", "y"}[i%2],
			Model: []string{"m1", "m2", "m3"}[i%3], Provider: "p",
			Route:        []string{"", "fast"}[i%2],
			PromptTokens: int64(i), CompletionTokens: int64(i % 17), CachedTokens: int64(i % 5),
			Cost:      dec("0.0000001").Mul(decimal.NewFromInt(int64(i*7 + 1))),
			Estimated: i%11 == 0,
			Time:      time.Date(2026, 10, 31, 22, 0, 0, 0, time.UTC).Add(time.Duration(i) * 37 * time.Second),
		}
		recs = append(recs, r)
		mustSettle(t, one, r)
	}
	for i := 0; i < len(recs); i += 64 {
		for j, err := range many.SettleBatch(recs[i:min(i+64, len(recs))]) {
			if err != nil {
				t.Fatalf("batch at %d, record %d: %v", i, j, err)
			}
		}
	}
	a, b := checkLedger(t, one, credits), checkLedger(t, many, credits)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("one at a time: %+v\nin batches: %+v", a, b)
	}
	if a.requests != 280 {
		t.Errorf("%d records, want 280", a.requests)
	}
	for _, f := range []store.UsageFilter{{}, {Account: "y"}, {Model: "m2"}, {KeyID: "k3"}} {
		ua, err := one.Usage(f)
		if err != nil {
			t.Fatal(err)
		}
		ub, err := many.Usage(f)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ua, ub) {
			t.Errorf("Usage(%+v): one at a time %+v, in batches %+v", f, ua, ub)
		}
	}
	ra, _ := one.RouteUsage()
	rb, _ := many.RouteUsage()
	if !reflect.DeepEqual(ra, rb) || len(ra) == 0 {
		t.Errorf("route usage: one at a time %+v, in batches %+v", ra, rb)
	}
}

// TestSettlerGroupsAndDrains: records queued from many goroutines share transactions, Close
// stores every one of them, and failures are reported one by one.
func TestSettlerGroupsAndDrains(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "50")
	var mu sync.Mutex
	var failed []string
	q := NewSettler(s, 20*time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", r.RequestID, err)
		}
		mu.Lock()
		failed = append(failed, r.RequestID)
		mu.Unlock()
	}})
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			for i := range 50 {
				account := "acct"
				if g == 7 && i%10 == 0 {
					account = "ghost"
				}
				q.Record(rec(fmt.Sprintf("g%d-%d", g, i), account, "0.001"))
			}
		})
	}
	wg.Wait()
	q.Close()
	q.Close() // twice is harmless

	st := q.Stats()
	if st.Records != 2000 {
		t.Errorf("settler handled %d records, want 2000", st.Records)
	}
	// 2,000 records queued in a burst: a transaction each would be 2,000 commits.
	if st.Commits == 0 || st.Commits > 100 {
		t.Errorf("%d commits for %d records: not grouped", st.Commits, st.Records)
	}
	if len(failed) != 5 {
		t.Errorf("failed records %v, want the 5 for the unknown account", failed)
	}
	sm := checkLedger(t, s, map[string]string{"acct": "50"})
	if sm.requests != 1995 {
		t.Errorf("%d records stored, want 1995", sm.requests)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "48.005")
	t.Logf("%d records in %d commits", st.Records, st.Commits)
}

// TestSettlerWindow: a lone record is committed when its window closes, without waiting for
// more records to fill a batch.
func TestSettlerWindow(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "1")
	q := NewSettler(s, 5*time.Millisecond, store.SettlerHooks{})
	defer q.Close()
	start := time.Now()
	q.Record(rec("lone", "acct", "0.5"))
	for count(t, s) == 0 {
		if time.Since(start) > 2*time.Second {
			t.Fatal("a lone record was not stored within 2s (window 5ms)")
		}
		time.Sleep(time.Millisecond)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "0.5")
}

// BenchmarkSettler measures durable (fsync'd) settlements per second through the gateway's
// writer: records queued as fast as they come, grouped into transactions. holds: each record
// is preceded by its request's hold, as the gateway queues them (a quick request's hold is
// never written).
func BenchmarkSettler(b *testing.B) {
	for _, holds := range []bool{false, true} {
		b.Run(map[bool]string{false: "records", true: "holds"}[holds], func(b *testing.B) {
			s, err := Open(b.TempDir() + "/bench.db")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			mustAccount(b, s, "acct", "1000000")
			q := NewSettler(s, settle.Window, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) { b.Error(r.RequestID, err) }})
			cost := dec("0.00000015")
			b.ResetTimer()
			for i := range b.N {
				r := store.UsageRecord{
					RequestID: fmt.Sprintf("bench-%d", i), KeyID: fmt.Sprintf("key_%d", i%16), Account: "acct",
					Model: "gpt-4o", Provider: "openai", PromptTokens: 100, CompletionTokens: 50, Cost: cost,
				}
				if holds {
					q.Hold(r, nil)
				}
				q.Record(r)
			}
			q.Close()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "settles/s")
			if n := count(b, s); n != b.N {
				b.Fatalf("%d records after %d settlements", n, b.N)
			}
		})
	}
}

// failing is a store fault for the settler: every transaction fails while down is set.
type failing struct {
	s     *Store
	down  atomic.Bool
	calls atomic.Int64
}

var errDiskFull = errors.New("write: no space left on device")

func (f *failing) settle(batch []store.UsageRecord) []error {
	f.calls.Add(1)
	if !f.down.Load() {
		return f.s.SettleBatch(batch)
	}
	return failAll(batch, errDiskFull)
}

func (f *failing) probe() error {
	if f.down.Load() {
		return errDiskFull
	}
	return f.s.probe()
}

// TestSettlerWaitsForAFailingStore: while the store can commit nothing (a full or failing disk),
// records are held and tried again, never dropped; records that are wrong themselves are still
// reported at once; once the store works, everything held is stored.
func TestSettlerWaitsForAFailingStore(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "10")
	setRetries(t, time.Millisecond, time.Millisecond, time.Millisecond)

	var mu sync.Mutex
	var reported []string
	var stalls atomic.Int64
	f := &failing{s: s}
	f.down.Store(true)
	q := faultySettler(s, time.Millisecond, store.SettlerHooks{
		NotStored: func(r store.UsageRecord, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, r.RequestID)
		},
		Stalled: func(err error, queued int, retryIn time.Duration) {
			if !errors.Is(err, errDiskFull) {
				t.Errorf("stalled on %v, want the disk's error", err)
			}
			stalls.Add(1)
		},
	}, faulty(f.settle), f.probe)
	q.Record(rec("kept-1", "acct", "1"))
	q.Record(rec("kept-2", "acct", "2"))
	q.Record(rec("ghost", "nobody", "1"))
	// Far more retries than the schedule has: nothing is given up while the gateway runs.
	waitUntil(t, "20 retries of the failing store", 10*time.Second, func() bool { return stalls.Load() >= 20 })
	if n := count(t, s); n != 0 {
		t.Fatalf("%d records stored while the disk was failing", n)
	}
	f.down.Store(false)
	q.Close()

	if len(reported) != 1 || reported[0] != "ghost" {
		t.Errorf("reported %v, want only the record for the unknown account", reported)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "7")
	if st := q.Stats(); st.Records != 3 {
		t.Errorf("stats %+v, want 3 records done with", st)
	}

	// A store that never recovers: after Close, the held record is reported once the retry
	// pauses ran out, so the gateway can stop.
	reported = nil
	f.down.Store(true)
	f.calls.Store(0)
	q = faultySettler(s, time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) {
		if !errors.Is(err, errDiskFull) {
			t.Errorf("%s: %v, want the disk's error", r.RequestID, err)
		}
		reported = append(reported, r.RequestID)
	}}, faulty(f.settle), f.probe)
	q.Record(rec("lost", "acct", "1"))
	q.Close()
	if len(reported) != 1 || f.calls.Load() < 4 {
		t.Errorf("%d transactions and %v reported, want at least 4 (1 + 3 retries) and [lost]", f.calls.Load(), reported)
	}
}
