package billing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// pool is a store's budgets in memory, shared by the ledgers of several replicas: what
// store/postgres keeps in rows, here under one mutex (storetest proves the rows keep it).
type pool struct {
	mu      sync.Mutex
	total   map[store.BudgetRef]decimal.Decimal // balance or limit
	leased  map[store.BudgetRef]map[string]decimal.Decimal
	ledgers map[string]*Ledger
	down    bool
	leases  int
	lag     time.Duration // up to this before a lease or a return and before a give-back (a database's round trip, a NOTIFY's delivery)
}

// delay sleeps up to p.lag.
func (p *pool) delay() {
	if p.lag > 0 {
		time.Sleep(rand.N(p.lag))
	}
}

func newPool(total map[store.BudgetRef]string) *pool {
	p := &pool{total: map[store.BudgetRef]decimal.Decimal{}, leased: map[store.BudgetRef]map[string]decimal.Decimal{}, ledgers: map[string]*Ledger{}}
	for ref, v := range total {
		p.total[ref] = dec(v)
		p.leased[ref] = map[string]decimal.Decimal{}
	}
	return p
}

// replica is a ledger of a replica named name over p, knowing account.
func (p *pool) replica(name string, account string) *Ledger {
	l := NewLedger(map[string]decimal.Decimal{account: dec("999")}, nil, "2026-11")
	l.UseBudget(&poolBudget{p: p, name: name})
	p.mu.Lock()
	p.ledgers[name] = l
	p.mu.Unlock()
	return l
}

// left is what is unleased of ref (settled bills stay in their slices here: as in the store,
// spent + leased does not move when a record ships).
func (p *pool) left(ref store.BudgetRef) decimal.Decimal {
	v := p.total[ref]
	for _, a := range p.leased[ref] {
		v = v.Sub(a)
	}
	return v
}

type poolBudget struct {
	p    *pool
	name string
}

var errDown = fmt.Errorf("postgres at db:5432/tollway: %w: connection refused", store.ErrUnavailable)

func (b *poolBudget) Lease(ref store.BudgetRef, need decimal.Decimal) (granted, left decimal.Decimal, err error) {
	p := b.p
	p.delay()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return decimal.Zero, decimal.Zero, errDown
	}
	p.leases++
	left = p.left(ref)
	if left.LessThan(need) {
		return decimal.Zero, left, nil
	}
	granted = decimal.Max(need, left.Div(decimal.NewFromInt(4)).Truncate(12))
	p.leased[ref][b.name] = p.leased[ref][b.name].Add(granted)
	return granted, left.Sub(granted), nil
}

func (b *poolBudget) Return(ref store.BudgetRef, amount decimal.Decimal) error {
	p := b.p
	p.delay()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return errDown
	}
	p.leased[ref][b.name] = p.leased[ref][b.name].Sub(decimal.Min(amount, p.leased[ref][b.name]))
	return nil
}

// AskBack has every other replica give back, as their listeners do when NOTIFY arrives.
func (b *poolBudget) AskBack(ref store.BudgetRef) error {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	for name, l := range b.p.ledgers {
		if name != b.name {
			go func() {
				b.p.delay()
				_ = l.GiveBack(ref)
			}()
		}
	}
	return nil
}

// The edge, at unit level: a $0.05 limit, an answer holding $0.01527 and costing
// $0.01019, one request at a time round-robin over three replicas: served four times and
// refused the fifth, as on one gateway.
func TestSlicesEdgeBehavesLikeOneNode(t *testing.T) {
	month := store.KeyBudget("key1", "2026-11")
	p := newPool(map[store.BudgetRef]string{store.AccountBudget("acme"): "100", month: "0.05"})
	ls := []*Ledger{p.replica("a", "acme"), p.replica("b", "acme"), p.replica("c", "acme")}
	limit := dec("0.05")
	var got []string
	for i := range 6 {
		r, err := ls[i%3].Reserve("acme", "key1", &limit, dec("0.01527"), nov)
		switch {
		case err == nil:
			ls[i%3].Settle(r, dec("0.01019"))
			got = append(got, "200")
		case errors.Is(err, ErrSpendLimit):
			got = append(got, "403")
		default:
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	if fmt.Sprint(got) != "[200 200 200 200 403 403]" {
		t.Fatalf("answers %v, want four served and then refused", got)
	}
	spent := decimal.Zero
	for _, l := range ls {
		s, _ := l.KeyMonth("key1", nov)
		spent = spent.Add(s)
	}
	wantDecimal(t, "spent across replicas", spent, "0.04076")
}

// A burst on three replicas at once: nothing is spent beyond the limit or the balance, and a
// request is refused only when the budget is truly short: with every bill its hold, exactly
// as many are served as the budget covers.
func TestSlicesBurstNeverOverspends(t *testing.T) {
	for _, c := range []struct {
		name         string
		limit, funds string
		want         error
	}{{"key limit", "1", "100", ErrSpendLimit}, {"account balance", "", "1", ErrInsufficientCredits}} {
		t.Run(c.name, func(t *testing.T) {
			p, ls, limit := threeReplicas(c.limit, c.funds)
			hold := dec("0.03") // 33 fit in $1
			var mu sync.Mutex
			billed, served := decimal.Zero, 0
			var wg sync.WaitGroup
			for g := range 30 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 1))
					l := ls[g%3]
					for range 4 {
						res, err := l.Reserve("acme", "key1", limit, hold, nov)
						if err != nil {
							if !errors.Is(err, c.want) {
								t.Errorf("refused with %v, want %v", err, c.want)
							}
							continue
						}
						time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
						bill := l.Settle(res, hold)
						mu.Lock()
						billed, served = billed.Add(bill), served+1
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if billed.GreaterThan(dec("1")) {
				t.Fatalf("billed %s of a $1 budget", billed)
			}
			if served != 33 {
				t.Fatalf("served %d, want 33: every refusal must be for a truly short budget (billed %s, leases %d)", served, billed, p.leases)
			}
			t.Logf("120 requests on 3 replicas: 33 served, $%s billed, %d leases", billed, p.leases)
		})
	}
}

// With the store unreachable, requests the slices cover are admitted; the first they do not
// is refused with the store's outage (503 store_unavailable), never served unbilled.
func TestSlicesStoreDown(t *testing.T) {
	p := newPool(map[store.BudgetRef]string{store.AccountBudget("acme"): "10"})
	l := p.replica("a", "acme")
	r, err := l.Reserve("acme", "key1", nil, dec("1"), nov) // leases a quarter of 10
	if err != nil {
		t.Fatal(err)
	}
	l.Settle(r, dec("1"))
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	served := 0
	for {
		r, err := l.Reserve("acme", "key1", nil, dec("0.5"), nov)
		if err != nil {
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("refused with %v, want the store's outage", err)
			}
			break
		}
		l.Settle(r, dec("0.5"))
		served++
	}
	if served != 3 { // the $1.5 left of a $2.5 slice
		t.Fatalf("served %d on the slice while the store was down, want 3", served)
	}
}

// Idle slices go back; a slice in use or held stays; a return the store refuses stays in the
// slice.
func TestSlicesReturnWhenIdle(t *testing.T) {
	acme := store.AccountBudget("acme")
	p := newPool(map[store.BudgetRef]string{acme: "8"})
	l := p.replica("a", "acme")
	r, err := l.Reserve("acme", "key1", nil, dec("1"), nov)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := l.ReturnIdle(nov.Add(time.Second), 2*time.Second); n != 0 {
		t.Fatalf("returned %d slices used a second ago", n)
	}
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	if _, err := l.ReturnIdle(nov.Add(3*time.Second), 2*time.Second); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a refused return: %v", err)
	}
	if avail, _ := l.Snapshot("acme", "", nov); !avail.Equal(dec("1")) { // the $2 slice less the $1 hold
		t.Fatalf("after a refused return %s is available, want 1", avail)
	}
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	l.Release(r)
	l.used[acme] = nov
	if n, err := l.ReturnIdle(nov.Add(3*time.Second), 2*time.Second); n != 1 || err != nil {
		t.Fatalf("returned %d (%v), want the idle slice", n, err)
	}
	wantDecimal(t, "unleased after the return", p.left(acme), "8")
}

func wantDecimal(t *testing.T, what string, got decimal.Decimal, want string) {
	t.Helper()
	if !got.Equal(dec(want)) {
		t.Fatalf("%s: %s, want %s", what, got, want)
	}
}

// BenchmarkSlicesHotPath: Reserve and Settle one request, on one node and against a warm
// slice (no lease on the path), one goroutine each; the log line's ratio is what slices cost
// the hot path.
func BenchmarkSlicesHotPath(b *testing.B) {
	limit, amount := dec("1000000000"), dec("0.0015")
	one := NewLedger(map[string]decimal.Decimal{"acme": limit}, nil, "2026-11")
	p := newPool(map[store.BudgetRef]string{store.AccountBudget("acme"): "1000000000", store.KeyBudget("key1", "2026-11"): "1000000000"})
	sliced := p.replica("a", "acme")
	var ns [2]float64
	for i, l := range []*Ledger{one, sliced} {
		b.Run([]string{"one-node", "sliced"}[i], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := l.Reserve("acme", "key1", &limit, amount, nov)
				if err != nil {
					b.Fatal(err)
				}
				l.Settle(r, amount)
			}
			ns[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	b.Logf("sliced/one-node = %.2f (%.0f ns vs %.0f ns a request; %d leases in all)", ns[1]/ns[0], ns[1], ns[0], p.leases)
}

// A replica whose registration may lapse drops what it does not hold: with the store down,
// its next request is refused with the store's outage rather than served on a slice another
// replica may be given.
func TestSlicesDroppedWhenTheRegistrationLapses(t *testing.T) {
	p := newPool(map[store.BudgetRef]string{store.AccountBudget("acme"): "10"})
	l := p.replica("a", "acme")
	r, err := l.Reserve("acme", "key1", nil, dec("1"), nov)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	if n := l.DropSlices(); n != 1 {
		t.Fatalf("dropped %d slices, want 1", n)
	}
	if _, err := l.Reserve("acme", "key1", nil, dec("0.5"), nov); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("after the drop: %v, want the store's outage", err)
	}
	if bill := l.Settle(r, dec("1")); !bill.Equal(dec("1")) { // the hold in flight is kept
		t.Fatalf("the hold in flight billed %s, want 1", bill)
	}
}

// threeReplicas are the ledgers of replicas a, b and c over one pool holding account acme's
// funds and, unless limit is "", key1's limit in November 2026 (returned for Reserve).
func threeReplicas(limit, funds string) (*pool, []*Ledger, *decimal.Decimal) {
	refs := map[store.BudgetRef]string{store.AccountBudget("acme"): funds}
	var lim *decimal.Decimal
	if limit != "" {
		refs[store.KeyBudget("key1", "2026-11")] = limit
		lim = ptr(dec(limit))
	}
	p := newPool(refs)
	return p, []*Ledger{p.replica("a", "acme"), p.replica("b", "acme"), p.replica("c", "acme")}, lim
}

// TestSlicesBurstAtTheEdge is TestClusterSliceBurst at unit level: 60 requests at once over
// three replicas, each billed its $0.01 hold, against a key limited to $0.25 on a rich account
// and against an account of $0.25: exactly 25 served and 35 refused, each with the budget's
// own refusal, in every one of many rounds (the store's and NOTIFY's latency stood in by up
// to 2 ms).
func TestSlicesBurstAtTheEdge(t *testing.T) {
	for _, c := range []struct {
		name         string
		limit, funds string
		want         error
	}{{"key limit", "0.25", "100", ErrSpendLimit}, {"account balance", "", "0.25", ErrInsufficientCredits}} {
		t.Run(c.name, func(t *testing.T) {
			bad := 0
			const rounds = 15
			for round := range rounds {
				p, ls, limit := threeReplicas(c.limit, c.funds)
				p.lag = 2 * time.Millisecond
				var mu sync.Mutex
				served, refused := 0, 0
				var other []error
				var wg sync.WaitGroup
				for g := range 60 {
					wg.Go(func() {
						l := ls[g%3]
						res, err := l.Reserve("acme", "key1", limit, dec("0.01"), nov)
						if err == nil {
							time.Sleep(rand.N(3 * time.Millisecond))
							l.Settle(res, dec("0.01"))
						}
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							served++
						case errors.Is(err, c.want):
							refused++
						default:
							other = append(other, err)
						}
					})
				}
				wg.Wait()
				if served != 25 || refused != 35 {
					bad++
					t.Errorf("round %d: %d served, %d refused with %v, others %v; want 25 and 35", round+1, served, refused, c.want, other)
					for r := range p.total {
						t.Logf("round %d: %v: %s unleased; unheld on the replicas: a %s, b %s, c %s", round+1, r, p.left(r),
							remainder(ls[0], r), remainder(ls[1], r), remainder(ls[2], r))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d rounds wrong", bad, rounds)
			}
		})
	}
}

// remainder is what l's slice of ref holds beyond its requests in flight.
func remainder(l *Ledger, ref store.BudgetRef) decimal.Decimal {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ref.IsKey() {
		km := keyMonth{ref.KeyID, ref.Month}
		return l.keySlice[km].Sub(l.keyHeld[km])
	}
	return l.balances[ref.Account].Sub(l.accountHeld[ref.Account])
}
