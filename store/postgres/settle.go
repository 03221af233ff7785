package postgres

// Settlement: a served request becomes a usage record, its account's debit, its key's month
// spend, its daily and route aggregates, all in one transaction, once per request id.
//
// A batch locks the rows it debits first, in one order every batch shares (accounts, then
// month spends, each sorted), so batches of several replicas wait for each other instead of
// deadlocking (a deadlock the server still finds is retried: tx). The records are inserted
// after their accounts are locked, when no other transaction can be settling them, with ON
// CONFLICT (request_id) DO NOTHING RETURNING: the record's primary key says which are new, and
// only a record inserted now is debited and counted. What a balance or a limit cannot take is
// the record's overage (store.CapDebit), read under those locks, so replicas never overspend.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// SettleBatch settles recs in one transaction and returns one error per record (nil: settled
// now or before); a record wrong in itself fails alone.
func (s *Store) SettleBatch(recs []store.UsageRecord) []error {
	errs, _ := s.SettleWith(recs, settle.HoldChanges{})
	return errs
}

// wrongRecord: err is the record's own fault (trying again cannot help).
func wrongRecord(err error) bool {
	return errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound)
}

// SettleWith is SettleBatch with hold changes in the same transaction: one error per record,
// and err when the transaction itself failed (nothing was written). It is what the Settler
// writes through (settle.Target).
func (s *Store) SettleWith(recs []store.UsageRecord, hc settle.HoldChanges) (errs []error, err error) {
	errs = make([]error, len(recs))
	todo := make([]int, 0, len(recs))
	norm := make([]store.UsageRecord, len(recs))
	for i := range recs {
		norm[i] = recs[i]
		norm[i].Normalize(time.Now())
		if errs[i] = norm[i].Validate(); errs[i] == nil {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 && len(hc.Put) == 0 && len(hc.Drop) == 0 {
		return errs, nil
	}
	var out []error
	err = s.tx(func(ctx context.Context, tx pgx.Tx) error {
		out = slices.Clone(errs) // fn may run again
		recs := slices.Clone(norm)
		if err := settleTx(ctx, tx, recs, todo, out, hc.Held, s.settler()); err != nil {
			return err
		}
		return putHolds(ctx, tx, hc)
	})
	if err != nil {
		for _, i := range todo {
			errs[i] = err
		}
		return errs, err
	}
	return out, nil
}

// books are the rows a batch debits, locked, as they stand within it.
type books struct {
	balance map[string]*pgtype.Numeric
	spent   map[[2]string]*pgtype.Numeric
	limit   map[string]pgtype.Numeric
}

// settleTx settles recs[todo] in tx; errs gets each record's own failure. It is two round
// trips whatever the batch's size (the shipper's transactions wait for the server, and under
// load for the CPU, at each): the books locked and read, then the records inserted in one
// pipeline; then every row they add to, with the corrections of the few records the books
// could not take whole.
//
// The insert's primary key says which records are new: ON CONFLICT (request_id) DO NOTHING
// RETURNING, after the accounts' locks (any transaction settling an unpaid record takes its
// account's first), and waiting for a transaction inserting the same id to end (a paid record,
// whose settling locks no account). No query looks the ids up: a prepared lookup planned while
// usage_records was small keeps a sequential scan of the whole table for the connection's
// life (a generic plan, until the table is next analyzed), which cost the server milliseconds
// a batch and grew with every record (docs/performance.md).
func settleTx(ctx context.Context, tx pgx.Tx, recs []store.UsageRecord, todo []int, errs []error, held func(string) bool, replica string) error {
	if len(todo) == 0 {
		return nil
	}
	var rows recordRows
	first := make(map[string]bool, len(todo))
	for _, i := range todo { // a request id twice in a batch: its first record is the one inserted
		if id := recs[i].RequestID; !first[id] {
			first[id] = true
			rows.add(&recs[i])
		}
	}
	b, inserted, err := lockAndInsert(ctx, tx, recs, todo, &rows)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	var fold []int
	var drop []string
	settled := make(map[string]bool, len(inserted))
	for _, i := range todo {
		rec := &recs[i]
		id := rec.RequestID
		if !inserted[id] || settled[id] { // settled before, or by its first record in this batch
			if held != nil && held(id) {
				drop = append(drop, id)
			}
			continue
		}
		if rec.Payment == nil {
			bal, ok := b.balance[rec.Account]
			if !ok {
				errs[i] = store.Errorf(store.ErrNotFound, "settle %q: account %q: not found", store.ShortID(rec.RequestID), rec.Account)
				batch.Queue("delete from usage_records where request_id = $1", id) // inserted above: taken back
				continue
			}
			sp := b.spent[spendKey(rec)]
			if rec.CapDebit(dec(*bal), dec(*sp), decPtr(b.limit[rec.KeyID])) {
				batch.Queue("update usage_records set cost = $2, overage = $3 where request_id = $1", id, num(rec.Cost), num(rec.Overage))
			}
			*bal, *sp = num(dec(*bal).Sub(rec.Cost)), num(dec(*sp).Add(rec.Cost))
		}
		settled[id] = true
		fold = append(fold, i)
		if held != nil && held(id) {
			drop = append(drop, id)
		}
	}
	writeBooks(batch, recs, fold, replica)
	if len(drop) > 0 {
		batch.Queue("delete from holds where request_id = any($1)", drop)
	}
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, batch).Close()
}

func spendKey(rec *store.UsageRecord) [2]string {
	return [2]string{rec.Time.Format(store.MonthLayout), rec.KeyID}
}

// lockAndInsert locks the accounts and month spends recs[todo] debit (paid records debit
// none), each set in sorted order, reads the keys' limits, then inserts rows (the batch's
// records, as they came), in one round trip: the statements run in order, so the insert runs
// under the accounts' locks. It returns the books and the request ids inserted now.
func lockAndInsert(ctx context.Context, tx pgx.Tx, recs []store.UsageRecord, todo []int, rows *recordRows) (*books, map[string]bool, error) {
	b := &books{balance: map[string]*pgtype.Numeric{}, spent: map[[2]string]*pgtype.Numeric{}, limit: map[string]pgtype.Numeric{}}
	var accts, keyIDs []string
	spends := map[[2]string]bool{}
	for _, i := range todo {
		if r := &recs[i]; r.Payment == nil {
			accts, keyIDs = append(accts, r.Account), append(keyIDs, r.KeyID)
			spends[spendKey(r)] = true
		}
	}
	batch := &pgx.Batch{}
	if len(accts) > 0 {
		queueLocks(batch, b, accts, keyIDs, spends)
	}
	inserted := queueInsert(batch, rows)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, nil, err
	}
	return b, *inserted, nil
}

// queueLocks queues the statements that lock and read the accounts, the keys' limits and the
// month spends into b.
func queueLocks(batch *pgx.Batch, b *books, accts, keyIDs []string, spends map[[2]string]bool) {
	slices.Sort(accts)
	batch.Queue("select id, balance from accounts where id = any($1) order by id for update", slices.Compact(accts)).Query(func(rows pgx.Rows) error {
		var id string
		var n pgtype.Numeric
		_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { v := n; b.balance[id] = &v; return nil })
		return err
	})
	batch.Queue("select id, monthly_limit from api_keys where id = any($1)", keyIDs).Query(func(rows pgx.Rows) error {
		var id string
		var n pgtype.Numeric
		_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { b.limit[id] = n; return nil })
		return err
	})
	keys := make([][2]string, 0, len(spends))
	for k := range spends {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return slices.Compare(a[:], b[:]) })
	months, kids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		months[i], kids[i] = k[0], k[1]
		zero := num(decimal.Zero)
		b.spent[k] = &zero
	}
	batch.Queue("insert into spend_month (month, key_id, spent) select m, k, 0 from unnest($1::text[], $2::text[]) u(m, k) "+
		"on conflict do nothing", months, kids)
	batch.Queue("select month, key_id, spent from spend_month s where (month, key_id) in "+
		"(select * from unnest($1::text[], $2::text[])) order by month, key_id for update", months, kids).Query(func(rows pgx.Rows) error {
		var month, id string
		var n pgtype.Numeric
		_, err := pgx.ForEachRow(rows, []any{&month, &id, &n}, func() error { v := n; b.spent[[2]string{month, id}] = &v; return nil })
		return err
	})
}

// writeBooks queues the debits of the accounts and what recs[fold] add to the month spends
// and the aggregates, each row once, in sorted order, and what they take from replica's
// budget slices (budget.go).
func writeBooks(batch *pgx.Batch, recs []store.UsageRecord, fold []int, replica string) {
	// Every map is keyed by up to four columns, so that one sort orders them all.
	debit, spend, daily, route := rowTotals{}, rowTotals{}, rowTotals{}, rowTotals{}
	for _, i := range fold {
		r := &recs[i]
		t := r.Totals()
		if r.Payment == nil {
			sk := spendKey(r)
			debit.add([4]string{r.Account}, store.UsageTotals{Cost: r.Cost})
			spend.add([4]string{sk[0], sk[1]}, store.UsageTotals{Cost: r.Cost})
		}
		daily.add([4]string{r.Time.Format(store.DayLayout), r.KeyID, r.Account, r.Model}, t)
		if r.Route != "" {
			route.add([4]string{r.Route, r.Model}, t)
		}
	}
	for _, k := range debit.sorted() {
		batch.Queue("update accounts set balance = balance - $2 where id = $1", k[0], num(debit[k].Cost))
	}
	for _, k := range spend.sorted() {
		batch.Queue("update spend_month set spent = spent + $3 where month = $1 and key_id = $2", k[0], k[1], num(spend[k].Cost))
	}
	for _, k := range daily.sorted() {
		batch.Queue(addTotals("usage_daily", "day, key_id, account, model"), append([]any{k[0], k[1], k[2], k[3]}, totalArgs(daily[k])...)...)
	}
	for _, k := range route.sorted() {
		batch.Queue(addTotals("usage_route", "route, model"), append([]any{k[0], k[1]}, totalArgs(route[k])...)...)
	}
	queueTakeLeases(batch, replica, debit, spend)
}

// rowTotals are what a batch adds to each row it writes, by the row's key columns.
type rowTotals map[[4]string]*store.UsageTotals

func (m rowTotals) add(k [4]string, t store.UsageTotals) {
	if m[k] == nil {
		m[k] = &store.UsageTotals{}
	}
	m[k].Add(t)
}

// sorted orders the rows the same way in every batch.
func (m rowTotals) sorted() [][4]string {
	ks := make([][4]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b [4]string) int { return slices.Compare(a[:], b[:]) })
	return ks
}

// addTotals is the upsert that adds a row's totals ($n after the key columns) to table's
// row: payments in a status none was counted in stay NULL.
func addTotals(table, keyCols string) string {
	set := "requests = t.requests + excluded.requests, prompt_tokens = t.prompt_tokens + excluded.prompt_tokens, " +
		"completion_tokens = t.completion_tokens + excluded.completion_tokens, cached_tokens = t.cached_tokens + excluded.cached_tokens, " +
		"estimated_requests = t.estimated_requests + excluded.estimated_requests, cost = t.cost + excluded.cost"
	for _, c := range []string{"paid", "pending", "unpaid"} {
		set += ", " + c + " = case when excluded." + c + " is null then t." + c + " else coalesce(t." + c + ", 0) + excluded." + c + " end"
	}
	return totalsInsert(table, keyCols) + "do update set " + set
}

// totalsInsert inserts an aggregate row, up to what is done on a conflict of its key.
func totalsInsert(table, keyCols string) string {
	var vals []string
	for i := range len(strings.Split(keyCols, ",")) + 9 {
		vals = append(vals, "$"+strconv.Itoa(i+1))
	}
	return "insert into " + table + " as t (" + keyCols + ", " + totalColumns + ") values (" + strings.Join(vals, ", ") + ") on conflict (" + keyCols + ") "
}
