package postgres

// Budget slices (store.Budgets). A budget's row keeps the sum of its outstanding slices in
// leased: accounts.leased against balance, spend_month.leased against the key's
// monthly_limit less spent. A lease is one statement: it locks the budget's row, grants at
// least what is needed and about a share of what is left while balance - leased (limit - spent
// - leased) covers it, and adds the slice to the replica's row in budget_leases. Settling a
// record (settle.go) takes its cost from the settling replica's slices in the transaction that
// debits it, so spent + leased never passes the balance or the limit, shipped or not.
//
// Locks are taken budget row first, then slice rows (lease, return, settle); dropping slices
// (a stop, a reclaim) deletes slice rows first, but only of replicas that lease no more, and
// a deadlock the server still finds is retried (tx).

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

var _ store.Budgets = (*Store)(nil)

// budgetChannel carries asks to give slices back: '<origin> a <account>' or '<origin> k <key>
// <month>'.
const budgetChannel = "tollway_budget"

// leaseAccount leases a slice of an account's balance ($1 replica, $2 account, $3 need, $4
// share).
const leaseAccount = `with cur as (
	select balance - leased as rest from accounts where id = $2 for update
), g as (
	select rest, greatest($3::numeric, trunc(rest * $4::numeric, 12)) as amount from cur where rest >= $3
), u as (
	update accounts a set leased = a.leased + g.amount from g where a.id = $2 returning g.amount, g.rest - g.amount as after
), l as (
	insert into budget_leases (replica, account, amount) select $1, $2, amount from u
	on conflict (replica, account, key_id, month) do update set amount = budget_leases.amount + excluded.amount
)
select coalesce((select amount from u), 0), coalesce((select after from u), (select rest from cur), 0)`

// leaseKey leases a slice of a key's monthly limit ($1 replica, $2 key, $3 month, $4 need, $5
// share); a key without a limit grants what is needed.
const leaseKey = `with cur as (
	select spent, leased from spend_month where month = $3 and key_id = $2 for update
), g as (
	select (select monthly_limit from api_keys where id = $2) - spent - leased as rest from cur
), h as (
	select rest, case when rest is null then $4::numeric else greatest($4::numeric, trunc(rest * $5::numeric, 12)) end as amount
	from g where rest is null or rest >= $4
), u as (
	update spend_month s set leased = s.leased + h.amount from h where s.month = $3 and s.key_id = $2
	returning h.amount, h.rest - h.amount as after
), l as (
	insert into budget_leases (replica, key_id, month, amount) select $1, $2, $3, amount from u
	on conflict (replica, account, key_id, month) do update set amount = budget_leases.amount + excluded.amount
)
select coalesce((select amount from u), 0), coalesce((select after from u), (select rest from g), 0)`

// LeaseBudget leases replica a slice of ref (store.Budgets).
func (s *Store) LeaseBudget(replica string, ref store.BudgetRef, need, share decimal.Decimal) (granted, left decimal.Decimal, err error) {
	if need.Sign() < 0 || share.Sign() < 0 || share.GreaterThan(decimal.NewFromInt(1)) {
		return decimal.Zero, decimal.Zero, store.Errorf(store.ErrInvalid, "lease budget: need %s must be >= 0 and share %s within 0 to 1", need, share)
	}
	var g, l pgtype.Numeric
	err = s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		if !ref.IsKey() {
			return q.QueryRow(ctx, leaseAccount, replica, ref.Account, num(need), num(share)).Scan(&g, &l)
		}
		b := &pgx.Batch{}
		b.Queue("insert into spend_month (month, key_id, spent) values ($1, $2, 0) on conflict do nothing", ref.Month, ref.KeyID)
		b.Queue(leaseKey, replica, ref.KeyID, ref.Month, num(need), num(share)).QueryRow(func(row pgx.Row) error { return row.Scan(&g, &l) })
		return q.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return decimal.Zero, decimal.Zero, err
	}
	return dec(g), dec(l), nil
}

// budgetRow is the budget row of ref, for a where clause: its table and condition on $n, $n+1.
func budgetRow(ref store.BudgetRef) (sql string, args []any) {
	if ref.IsKey() {
		return "spend_month where month = $1 and key_id = $2", []any{ref.Month, ref.KeyID}
	}
	return "accounts where id = $1", []any{ref.Account}
}

// ReturnBudget gives back up to amount of replica's slice of ref.
func (s *Store) ReturnBudget(replica string, ref store.BudgetRef, amount decimal.Decimal) error {
	if amount.Sign() <= 0 {
		return nil
	}
	row, args := budgetRow(ref)
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select 1 from "+row+" for update", args...); err != nil {
			return err
		}
		var have pgtype.Numeric
		err := tx.QueryRow(ctx, "select amount from budget_leases where replica = $1 and account = $2 and key_id = $3 and month = $4 for update",
			replica, ref.Account, ref.KeyID, ref.Month).Scan(&have)
		if err == pgx.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		back := decimal.Min(dec(have), amount)
		b := &pgx.Batch{}
		b.Queue("update budget_leases set amount = amount - $5 where replica = $1 and account = $2 and key_id = $3 and month = $4",
			replica, ref.Account, ref.KeyID, ref.Month, num(back))
		if ref.IsKey() {
			b.Queue("update spend_month set leased = leased - $3 where month = $1 and key_id = $2", ref.Month, ref.KeyID, num(back))
		} else {
			b.Queue("update accounts set leased = leased - $2 where id = $1", ref.Account, num(back))
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

// dropLeases deletes the slices where (on budget_leases) selects and takes them from their
// budgets' leased sums, in one statement; it says how many it deleted.
func (s *Store) dropLeases(where string, args ...any) (int, error) {
	var n int
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `with d as (
	delete from budget_leases where `+where+` returning account, key_id, month, amount
), a as (
	update accounts x set leased = x.leased - s.amt from (select account, sum(amount) amt from d where key_id = '' group by account) s
	where x.id = s.account
), k as (
	update spend_month x set leased = x.leased - s.amt from (select key_id, month, sum(amount) amt from d where key_id <> '' group by key_id, month) s
	where x.key_id = s.key_id and x.month = s.month
)
select count(*) from d`, args...).Scan(&n)
	})
	return n, err
}

// ReturnAllBudget gives back every slice replica holds.
func (s *Store) ReturnAllBudget(replica string) error {
	_, err := s.dropLeases("replica = $1", replica)
	return err
}

// ReclaimBudget gives back the slices of replicas not registered or gone at now.
func (s *Store) ReclaimBudget(now time.Time) (int, error) {
	return s.dropLeases("replica not in (select name from replicas where last_seen_ns + lease_ns >= $1)", now.UnixNano())
}

// BudgetLeases lists the outstanding slices by replica and budget.
func (s *Store) BudgetLeases() ([]store.BudgetLease, error) {
	var out []store.BudgetLease
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var l store.BudgetLease
		var n pgtype.Numeric
		rows, _ := q.Query(ctx, `select replica, account, key_id, month, amount from budget_leases where amount > 0
			order by replica collate "C", account collate "C", key_id collate "C", month`)
		_, err := pgx.ForEachRow(rows, []any{&l.Replica, &l.Ref.Account, &l.Ref.KeyID, &l.Ref.Month, &n}, func() error {
			l.Amount = dec(n)
			out = append(out, l)
			return nil
		})
		return err
	})
	return out, err
}

// SettleAs makes settlements take their cost from replica's slices.
func (s *Store) SettleAs(replica string) { s.settleAs.Store(&replica) }

// settler is the replica whose slices settlements take from ("": none).
func (s *Store) settler() string {
	if p := s.settleAs.Load(); p != nil {
		return *p
	}
	return ""
}

// queueTakeLeases queues taking what a batch debited from replica's slices of their accounts
// and keys' months, after the budget rows were locked (lockBooks): a slice gives at most what
// it holds.
func queueTakeLeases(b *pgx.Batch, replica string, debit, spend rowTotals) {
	if replica == "" {
		return
	}
	const take = `with cur as (
	select amount from budget_leases where replica = $1 and account = $2 and key_id = $3 and month = $4 for update
), d as (
	update budget_leases b set amount = b.amount - least(cur.amount, $5) from cur
	where b.replica = $1 and b.account = $2 and b.key_id = $3 and b.month = $4 returning least(cur.amount, $5) as x
)
`
	for _, k := range debit.sorted() {
		b.Queue(take+"update accounts set leased = leased - d.x from d where id = $2", replica, k[0], "", "", num(debit[k].Cost))
	}
	for _, k := range spend.sorted() {
		b.Queue(take+"update spend_month set leased = leased - d.x from d where month = $4 and key_id = $3", replica, "", k[1], k[0], num(spend[k].Cost))
	}
}

// AskBudgetBack asks the other replicas to give back their unheld slices of ref.
func (s *Store) AskBudgetBack(ref store.BudgetRef) error {
	payload := s.origin + " a " + ref.Account
	if ref.IsKey() {
		payload = s.origin + " k " + ref.KeyID + " " + ref.Month
	}
	return s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		_, err := q.Exec(ctx, "select pg_notify($1, $2)", budgetChannel, payload)
		return err
	})
}

// BudgetAsks delivers other replicas' asks until ctx ends.
func (s *Store) BudgetAsks(ctx context.Context) <-chan store.BudgetRef { return s.asks.subscribe(ctx) }

// heardAsk hands an ask another replica sent to the subscribers.
func (s *Store) heardAsk(payload string) {
	f := strings.Fields(payload)
	switch {
	case len(f) == 3 && f[0] != s.origin && f[1] == "a":
		s.asks.publish(store.AccountBudget(f[2]))
	case len(f) == 4 && f[0] != s.origin && f[1] == "k":
		s.asks.publish(store.KeyBudget(f[2], f[3]))
	}
}

// asks fans give-back asks out; one a subscriber has not taken yet is dropped when it has many
// waiting (the asker then finds less and refuses, as it would without the ask).
type asks struct {
	mu   sync.Mutex
	subs map[chan store.BudgetRef]struct{}
}

func (a *asks) subscribe(ctx context.Context) <-chan store.BudgetRef {
	ch := make(chan store.BudgetRef, 256)
	a.mu.Lock()
	if a.subs == nil {
		a.subs = map[chan store.BudgetRef]struct{}{}
	}
	a.subs[ch] = struct{}{}
	a.mu.Unlock()
	go func() {
		<-ctx.Done()
		a.mu.Lock()
		delete(a.subs, ch)
		a.mu.Unlock()
		close(ch)
	}()
	return ch
}

func (a *asks) publish(ref store.BudgetRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch := range a.subs {
		select {
		case ch <- ref:
		default:
		}
	}
}
