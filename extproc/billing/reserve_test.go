package billing

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"
)

var nov = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

func ptr(d decimal.Decimal) *decimal.Decimal { return &d }

// reserveMany runs n Reserve calls at once (released together by a barrier) and returns the
// reservations that succeeded; every failure must be want.
func reserveMany(t *testing.T, l *Ledger, n int, limit *decimal.Decimal, amount decimal.Decimal, want error) []*Reservation {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ok    []*Reservation
		start = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			r, err := l.Reserve("acme", "key1", limit, amount, nov)
			switch {
			case err == nil:
				mu.Lock()
				ok = append(ok, r)
				mu.Unlock()
			case !errors.Is(err, want):
				t.Errorf("Reserve: %v, want %v", err, want)
			}
		})
	}
	close(start)
	wg.Wait()
	return ok
}

// The proof at unit level: a limit that covers exactly 10 worst-case requests admits
// exactly 10 of 50 concurrent ones.
func TestSpendLimitCannotBeOutrun(t *testing.T) {
	// 500 prompt + 500 completion tokens at 0.000001 / 0.000002 per token.
	worst := dec("0.0015")
	limit := worst.Mul(decimal.NewFromInt(10))
	start := dec("100")
	l := NewLedger(map[string]decimal.Decimal{"acme": start}, nil, "2026-11")

	held := reserveMany(t, l, 50, &limit, worst, ErrSpendLimit)
	if len(held) != 10 {
		t.Fatalf("%d of 50 concurrent reservations passed, want exactly 10", len(held))
	}
	// The holds alone block the next request: nothing has been spent yet.
	if _, err := l.Reserve("acme", "key1", &limit, worst, nov); !errors.Is(err, ErrSpendLimit) {
		t.Fatalf("11th reservation: %v, want ErrSpendLimit", err)
	}
	if avail, spent := l.Snapshot("acme", "key1", nov); !avail.Equal(start.Sub(limit)) || !spent.IsZero() {
		t.Errorf("with 10 holds: available %s, spent %s", avail, spent)
	}

	// Settle at the real cost, less than the hold: the difference frees room for more.
	actual := dec("0.0007") // 500 prompt + 100 completion tokens
	for _, r := range held {
		l.Settle(r, actual)
	}
	// spent 0.007, room 0.008: 5 more worst-case requests (0.0075), not 6 (0.009).
	more := reserveMany(t, l, 50, &limit, worst, ErrSpendLimit)
	if len(more) != 5 {
		t.Fatalf("after settling, %d more passed, want 5", len(more))
	}
	for _, r := range more {
		l.Settle(r, actual)
	}
	totalSpent := actual.Mul(decimal.NewFromInt(15))
	avail, spent := l.Snapshot("acme", "key1", nov)
	if !spent.Equal(totalSpent) || spent.String() != "0.0105" {
		t.Errorf("month spend = %s, want %s", spent, totalSpent)
	}
	if !avail.Add(spent).Equal(start) {
		t.Errorf("balance %s + spent %s != starting balance %s", avail, spent, start)
	}
	if len(l.accountHeld) != 0 || len(l.keyHeld) != 0 {
		t.Errorf("holds left after settling everything: %v %v", l.accountHeld, l.keyHeld)
	}
}

func TestInsufficientCredits(t *testing.T) {
	l := NewLedger(map[string]decimal.Decimal{"acme": dec("0.03")}, nil, "2026-11")
	held := reserveMany(t, l, 20, nil, dec("0.01"), ErrInsufficientCredits)
	if len(held) != 3 {
		t.Fatalf("%d reservations of 0.01 against 0.03 passed, want 3", len(held))
	}
	_, err := l.Reserve("acme", "key1", nil, dec("0.01"), nov)
	if !errors.Is(err, ErrInsufficientCredits) || errors.Is(err, ErrSpendLimit) {
		t.Fatalf("4th: %v, want ErrInsufficientCredits", err)
	}
	// A failed request releases its hold and is not charged.
	l.Release(held[0])
	if _, err := l.Reserve("acme", "key1", nil, dec("0.01"), nov); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if avail, _ := l.Snapshot("acme", "key1", nov); !avail.IsZero() {
		t.Errorf("available = %s, want 0 (all held)", avail)
	}
	if _, err := l.Reserve("nobody", "key1", nil, dec("0.01"), nov); !errors.Is(err, ErrInsufficientCredits) {
		t.Errorf("unknown account: %v, want ErrInsufficientCredits", err)
	}
	if _, err := l.Reserve("nobody", "key1", nil, decimal.Zero, nov); !errors.Is(err, ErrInsufficientCredits) {
		t.Errorf("unknown account, free request: %v, want ErrInsufficientCredits", err)
	}
	// Credit makes room; SetAccount creates an account.
	l.Credit("acme", dec("0.01"))
	if _, err := l.Reserve("acme", "key1", nil, dec("0.01"), nov); err != nil {
		t.Errorf("after a credit: %v", err)
	}
	l.SetAccount("new", dec("5"))
	if avail, _ := l.Snapshot("new", "k", nov); avail.String() != "5" {
		t.Errorf("new account available = %s", avail)
	}
	if _, err := l.Reserve("acme", "key1", nil, dec("-1"), nov); err == nil {
		t.Error("a negative amount was accepted")
	}
}

func TestSettleAndReleaseAreIdempotent(t *testing.T) {
	l := NewLedger(map[string]decimal.Decimal{"acme": dec("1")}, nil, "2026-11")
	r, err := l.Reserve("acme", "key1", ptr(dec("1")), dec("0.5"), nov)
	if err != nil {
		t.Fatal(err)
	}
	if r.Account() != "acme" || r.KeyID() != "key1" || r.Amount().String() != "0.5" || r.Month() != "2026-11" {
		t.Errorf("reservation = %+v", r)
	}
	// Many concurrent settles, then a release: one debit.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { l.Settle(r, dec("0.2")) })
		wg.Go(func() { l.Release(r) })
	}
	wg.Wait()
	l.Settle(r, dec("0.2"))
	l.Release(r)
	avail, spent := l.Snapshot("acme", "key1", nov)
	// Either a settle or a release won the race; either way exactly one took effect.
	if !(avail.String() == "0.8" && spent.String() == "0.2") && !(avail.String() == "1" && spent.IsZero()) {
		t.Errorf("after repeated settle/release: available %s, spent %s", avail, spent)
	}

	r2, _ := l.Reserve("acme", "key1", nil, dec("0.1"), nov)
	l.Release(r2)
	l.Settle(r2, dec("0.1")) // too late: the request already failed
	if a2, s2 := l.Snapshot("acme", "key1", nov); !a2.Equal(avail) || !s2.Equal(spent) {
		t.Errorf("settle after release changed the ledger: %s %s", a2, s2)
	}
	l.Settle(nil, dec("1")) // no reservation: nothing to do
	l.Release(nil)
}

// TestSettlementNeverExceedsItsHold: a provider reporting far more than the worst case held
// (DashScope's usage.duration of 1,000 s for a 5 s video) is billed the hold: the balance never
// goes below zero and the key never passes its limit through a provider's report.
func TestSettlementNeverExceedsItsHold(t *testing.T) {
	l := NewLedger(map[string]decimal.Decimal{"acme": dec("1")}, nil, "2026-11")
	limit := ptr(dec("0.6"))
	r, _ := l.Reserve("acme", "key1", limit, dec("0.6"), nov)
	if bill := l.Settle(r, dec("100")); bill.String() != "0.6" {
		t.Errorf("billed %s, want the hold 0.6", bill)
	}
	if bill := l.Settle(r, dec("100")); !bill.IsZero() {
		t.Errorf("a second settle billed %s", bill)
	}
	avail, spent := l.Snapshot("acme", "key1", nov)
	if avail.String() != "0.4" || spent.String() != "0.6" {
		t.Errorf("available %s, spent %s; want 0.4, 0.6 (the hold, not the $100 reported)", avail, spent)
	}
	// The limit is used up, the rest of the balance stays.
	if _, err := l.Reserve("acme", "key1", limit, dec("0.0001"), nov); !errors.Is(err, ErrSpendLimit) {
		t.Errorf("paid request past the limit: %v", err)
	}
	// Free requests pass whatever the balance and limit.
	if _, err := l.Reserve("acme", "key1", ptr(decimal.Zero), decimal.Zero, nov); err != nil {
		t.Errorf("free request: %v", err)
	}
	// A negative actual is a bug upstream, never a credit.
	r3, _ := l.Reserve("acme", "key1", nil, decimal.Zero, nov)
	l.Settle(r3, dec("-5"))
	if a, _ := l.Snapshot("acme", "key1", nov); !a.Equal(avail) {
		t.Errorf("negative actual changed the balance to %s", a)
	}
}

func TestCap(t *testing.T) {
	for _, c := range []struct{ metered, hold, bill, overage string }{
		{"100", "0.6", "0.6", "99.4"},
		{"0.25", "0.6", "0.25", "0"},
		{"0.6", "0.6", "0.6", "0"},
		{"-1", "0.6", "0", "0"},
		{"5", "0", "0", "5"},
	} {
		bill, over := Cap(dec(c.metered), dec(c.hold))
		if bill.String() != c.bill || over.String() != c.overage {
			t.Errorf("Cap(%s, %s) = %s, %s; want %s, %s", c.metered, c.hold, bill, over, c.bill, c.overage)
		}
	}
}

// TestLedgerInvariantsProperty: whatever requests hold, cost (providers reporting anything,
// up to far past their holds), release and credit, in any order, no balance goes below zero,
// no key's month spend passes its limit, and balance plus spend equals what was credited.
func TestLedgerInvariantsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		start := decimal.New(rapid.Int64Range(0, 1000).Draw(t, "start"), -2)
		l := NewLedger(map[string]decimal.Decimal{"acme": start}, nil, "2026-11")
		limits := map[string]*decimal.Decimal{"k1": ptr(decimal.New(rapid.Int64Range(0, 500).Draw(t, "limit"), -2)), "k2": nil}
		credited := start
		var open []*Reservation
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
			case op == 0 || len(open) == 0:
				key := rapid.SampledFrom([]string{"k1", "k2"}).Draw(t, "key")
				amount := decimal.New(rapid.Int64Range(0, 300).Draw(t, "amount"), -2)
				if r, err := l.Reserve("acme", key, limits[key], amount, nov); err == nil {
					open = append(open, r)
				}
			case op == 1 || op == 2:
				i := rapid.IntRange(0, len(open)-1).Draw(t, "which")
				r := open[i]
				open = append(open[:i], open[i+1:]...)
				if op == 2 {
					l.Release(r)
					break
				}
				actual := decimal.New(rapid.Int64Range(-10, 1_000_000).Draw(t, "actual"), -2)
				if bill := l.Settle(r, actual); bill.GreaterThan(r.Amount()) || bill.IsNegative() {
					t.Fatalf("settled %s on a hold of %s", bill, r.Amount())
				}
			default:
				c := decimal.New(rapid.Int64Range(1, 100).Draw(t, "credit"), -2)
				l.Credit("acme", c)
				credited = credited.Add(c)
			}
			spent := decimal.Zero
			for key, lim := range limits {
				_, s := l.Snapshot("acme", key, nov)
				if lim != nil && s.GreaterThan(*lim) {
					t.Fatalf("key %s spent %s past its limit %s", key, s, lim)
				}
				spent = spent.Add(s)
			}
			bal := l.balances["acme"]
			if bal.IsNegative() || !bal.Add(spent).Equal(credited) {
				t.Fatalf("balance %s, spent %s, credited %s", bal, spent, credited)
			}
		}
	})
}

func TestMonthRollover(t *testing.T) {
	l := NewLedger(map[string]decimal.Decimal{"acme": dec("100")}, map[string]decimal.Decimal{"key1": dec("9.5")}, "2026-11")
	limit := ptr(dec("10"))
	lateNov := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	// 01:00 in UTC+2 on 1 December is still November in UTC.
	novInUTCPlus2 := time.Date(2026, 12, 1, 1, 0, 0, 0, time.FixedZone("UTC+2", 2*3600))
	dec1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

	// November's starting spend counts: 9.5 + 0.5 fits, anything more does not.
	r, err := l.Reserve("acme", "key1", limit, dec("0.5"), lateNov)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve("acme", "key1", limit, dec("0.01"), novInUTCPlus2); !errors.Is(err, ErrSpendLimit) {
		t.Fatalf("November is full: %v, want ErrSpendLimit", err)
	}
	// December starts at zero, even while November's reservation is in flight.
	r2, err := l.Reserve("acme", "key1", limit, dec("10"), dec1)
	if err != nil {
		t.Fatalf("first December request: %v", err)
	}
	if r2.Month() != "2026-12" || r.Month() != "2026-11" {
		t.Errorf("months %s %s", r.Month(), r2.Month())
	}
	// The November reservation settles into November after midnight.
	l.Settle(r, dec("0.4"))
	l.Release(r2)
	_, novSpent := l.Snapshot("acme", "key1", lateNov)
	_, decSpent := l.Snapshot("acme", "key1", dec1)
	if novSpent.String() != "9.9" || !decSpent.IsZero() {
		t.Errorf("November spend %s (want 9.9), December %s (want 0)", novSpent, decSpent)
	}
	// Two months on, November is forgotten; October never existed here.
	jan := time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)
	feb := time.Date(2027, 2, 2, 0, 0, 0, 0, time.UTC)
	rj, _ := l.Reserve("acme", "key1", limit, dec("1"), jan)
	l.Settle(rj, dec("1"))
	rf, _ := l.Reserve("acme", "key1", limit, dec("1"), feb)
	l.Settle(rf, dec("1"))
	if len(l.spent) != 2 {
		t.Errorf("spend kept for %d months after February started, want 2 (January, February): %v", len(l.spent), l.spent)
	}
	if avail, _ := l.Snapshot("acme", "key1", feb); avail.String() != "97.6" { // 100 - 0.4 - 1 - 1
		t.Errorf("available = %s, want 97.6", avail)
	}
}

func TestNewLedgerRejectsBadMonth(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewLedger accepted month \"2026-13\"")
		}
	}()
	NewLedger(nil, nil, "2026-13")
}

// Every request of every goroutine against one account and key: the worst case for the lock.
func BenchmarkReserveSettle(b *testing.B) {
	l := NewLedger(map[string]decimal.Decimal{"acme": dec("1000000000")}, nil, "2026-11")
	limit := ptr(dec("1000000000"))
	hold, actual := dec("0.0015"), dec("0.0007")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := l.Reserve("acme", "key1", limit, hold, nov)
			if err != nil {
				panic(err)
			}
			l.Settle(r, actual)
		}
	})
}

// Many keys and accounts, as in production: contention on the one mutex only.
func BenchmarkReserveSettleManyKeys(b *testing.B) {
	const n = 1000
	balances := make(map[string]decimal.Decimal, n)
	for i := range n {
		balances[fmt.Sprint("acct", i)] = dec("1000000000")
	}
	l := NewLedger(balances, nil, "2026-11")
	limit := ptr(dec("1000000000"))
	hold, actual := dec("0.0015"), dec("0.0007")
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1))
		acct, key := fmt.Sprint("acct", i%n), fmt.Sprint("key", i)
		for pb.Next() {
			r, err := l.Reserve(acct, key, limit, hold, nov)
			if err != nil {
				panic(err)
			}
			l.Settle(r, actual)
		}
	})
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// TestKeyMonth: a key's settled spend and its holds in flight, for the month asked; remaining
// = limit - spent - held is exactly where admission stops.
func TestKeyMonth(t *testing.T) {
	limit := dec("1")
	l := NewLedger(map[string]decimal.Decimal{"acme": dec("100")}, map[string]decimal.Decimal{"key1": dec("0.25")}, "2026-11")
	r, err := l.Reserve("acme", "key1", &limit, dec("0.5"), nov)
	if err != nil {
		t.Fatal(err)
	}
	if spent, held := l.KeyMonth("key1", nov); spent.String() != "0.25" || held.String() != "0.5" {
		t.Fatalf("spent %s held %s, want 0.25 and 0.5", spent, held)
	}
	if _, err := l.Reserve("acme", "key1", &limit, dec("0.2500001"), nov); !errors.Is(err, ErrSpendLimit) {
		t.Fatalf("a request over limit - spent - held passed: %v", err)
	}
	l.Settle(r, dec("0.1"))
	if spent, held := l.KeyMonth("key1", nov); spent.String() != "0.35" || !held.IsZero() {
		t.Fatalf("after settling: spent %s held %s", spent, held)
	}
	if _, snap := l.Snapshot("acme", "key1", nov); snap.String() != "0.35" {
		t.Fatalf("Snapshot's spend %s disagrees", snap)
	}
	if spent, held := l.KeyMonth("key1", nov.AddDate(0, 1, 0)); !spent.IsZero() || !held.IsZero() {
		t.Fatalf("next month: spent %s held %s", spent, held)
	}
}
