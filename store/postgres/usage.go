package postgres

// Usage records and their aggregates: reading them (the settling that writes them is
// settle.go).

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

const recordColumns = "request_id, at_ns, key_id, account, model, provider, route, prompt_tokens, completion_tokens, " +
	"cached_tokens, cost, overage, estimated, estimate_reason, payment"

func recordArgs(r *store.UsageRecord) []any {
	var payment any
	if r.Payment != nil {
		payment = encode(r.Payment)
	}
	return []any{r.RequestID, r.Time.UnixNano(), r.KeyID, r.Account, r.Model, r.Provider, r.Route, r.PromptTokens,
		r.CompletionTokens, r.CachedTokens, num(r.Cost), num(r.Overage), r.Estimated, r.EstimateReason, payment}
}

func scanRecord(row pgx.CollectableRow) (store.UsageRecord, error) {
	var r store.UsageRecord
	var at int64
	var cost, overage pgtype.Numeric
	var payment []byte
	if err := row.Scan(&r.RequestID, &at, &r.KeyID, &r.Account, &r.Model, &r.Provider, &r.Route, &r.PromptTokens,
		&r.CompletionTokens, &r.CachedTokens, &cost, &overage, &r.Estimated, &r.EstimateReason, &payment); err != nil {
		return r, err
	}
	r.Time, r.Cost, r.Overage = timeOf(&at), dec(cost), dec(overage)
	if payment != nil {
		r.Payment = &store.Payment{}
		return r, decode(payment, r.Payment)
	}
	return r, nil
}

const totalColumns = "requests, prompt_tokens, completion_tokens, cached_tokens, estimated_requests, cost, paid, pending, unpaid"

func totalArgs(t *store.UsageTotals) []any {
	return []any{t.Requests, t.PromptTokens, t.CompletionTokens, t.CachedTokens, t.EstimatedRequests, num(t.Cost),
		numPtr(t.Paid), numPtr(t.Pending), numPtr(t.Unpaid)}
}

// totalScan is where a row's totals are scanned to, then taken (t).
type totalScan struct {
	t                     store.UsageTotals
	cost, paid, pend, unp pgtype.Numeric
}

func (s *totalScan) dest() []any {
	return []any{&s.t.Requests, &s.t.PromptTokens, &s.t.CompletionTokens, &s.t.CachedTokens, &s.t.EstimatedRequests,
		&s.cost, &s.paid, &s.pend, &s.unp}
}

func (s *totalScan) totals() store.UsageTotals {
	s.t.Cost, s.t.Paid, s.t.Pending, s.t.Unpaid = dec(s.cost), decPtr(s.paid), decPtr(s.pend), decPtr(s.unp)
	return s.t
}

// filter is f's WHERE clause on the columns named, with its arguments.
type filter struct {
	conds []string
	args  []any
}

func (w *filter) add(cond string, arg any) {
	w.args = append(w.args, arg)
	w.conds = append(w.conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(w.args))))
}

func (w *filter) strings(f store.UsageFilter) {
	for _, c := range []struct{ col, v string }{{"key_id", f.KeyID}, {"account", f.Account}, {"model", f.Model}} {
		if c.v != "" {
			w.add(c.col+" = ?", c.v)
		}
	}
}

// window selects records by time as f's whole days.
func (w *filter) window(f store.UsageFilter) {
	lo, hi := f.Window()
	if !lo.IsZero() {
		w.add("at_ns >= ?", lo.UnixNano())
	}
	if !hi.IsZero() {
		w.add("at_ns < ?", hi.UnixNano())
	}
}

func (w *filter) where() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " where " + strings.Join(w.conds, " and ")
}

// Usage sums the daily aggregates f selects, rows sorted by day, account, key, model.
func (s *Store) Usage(f store.UsageFilter) (store.UsageSummary, error) {
	var w filter
	w.strings(f)
	since, until := f.Days()
	if since != "" {
		w.add("day >= ?", since)
	}
	if until != "" {
		w.add("day <= ?", until)
	}
	var sum store.UsageSummary
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rows, err := q.Query(ctx, "select day, key_id, account, model, "+totalColumns+" from usage_daily"+w.where()+
			` order by day collate "C", account collate "C", key_id collate "C", model collate "C"`, w.args...)
		if err != nil {
			return err
		}
		sum.Rows, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.UsageRow, error) {
			var u store.UsageRow
			var ts totalScan
			err := r.Scan(append([]any{&u.Day, &u.KeyID, &u.Account, &u.Model}, ts.dest()...)...)
			u.UsageTotals = ts.totals()
			return u, err
		})
		return err
	})
	for _, r := range sum.Rows {
		sum.Add(r.UsageTotals)
	}
	return sum, err
}

// UsageRecords returns the records f selects, newest first, at most limit (<= 0: all).
func (s *Store) UsageRecords(f store.UsageFilter, limit int) ([]store.UsageRecord, error) {
	var w filter
	w.strings(f)
	w.window(f)
	sql := "select " + recordColumns + " from usage_records" + w.where() + ` order by at_ns desc, request_id collate "C" desc`
	if limit > 0 {
		sql += " limit " + strconv.Itoa(limit)
	}
	var out []store.UsageRecord
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rows, err := q.Query(ctx, sql, w.args...)
		if err == nil {
			out, err = pgx.CollectRows(rows, scanRecord)
		}
		return err
	})
	return out, err
}

// UsageByRecords sums the records f (and route, when not "") selects per day, route, key,
// account and model, sorted in that order.
func (s *Store) UsageByRecords(f store.UsageFilter, route string) ([]store.RecordRow, error) {
	var w filter
	w.strings(f)
	w.window(f)
	if route != "" {
		w.add("route = ?", route)
	}
	rows := store.RecordRows{}
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rs, err := q.Query(ctx, "select "+recordColumns+" from usage_records"+w.where(), w.args...)
		if err != nil {
			return err
		}
		recs, err := pgx.CollectRows(rs, scanRecord)
		for i := range recs {
			rows.Add(&recs[i])
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return rows.Sorted(), nil
}

// RouteUsage is each route's usage since it was first used, by model.
func (s *Store) RouteUsage() (map[string][]store.UsageRow, error) {
	out := map[string][]store.UsageRow{}
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rows, err := q.Query(ctx, "select route, model, "+totalColumns+` from usage_route order by route collate "C", model collate "C"`)
		if err != nil {
			return err
		}
		var route string
		var u store.UsageRow
		var ts totalScan
		_, err = pgx.ForEachRow(rows, append([]any{&route, &u.Model}, ts.dest()...), func() error {
			u.UsageTotals = ts.totals()
			out[route] = append(out[route], u)
			return nil
		})
		return err
	})
	return out, err
}

// KeysLastUsed is when each key last settled a request: the day from the daily aggregates
// (kept for good), the exact time when one of the newest scanLimit records shows it.
func (s *Store) KeysLastUsed(scanLimit int) (map[string]store.LastUsed, error) {
	out := map[string]store.LastUsed{}
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var key, day string
		rows, _ := q.Query(ctx, "select key_id, max(day) from usage_daily group by key_id")
		_, err := pgx.ForEachRow(rows, []any{&key, &day}, func() error {
			d, err := time.Parse(store.DayLayout, day)
			out[key] = store.LastUsed{Time: d}
			return err
		})
		if err != nil {
			return err
		}
		var at int64
		rows, _ = q.Query(ctx, "select key_id, max(at_ns) from (select key_id, at_ns from usage_records order by at_ns desc limit $1) r group by key_id", max(scanLimit, 0))
		_, err = pgx.ForEachRow(rows, []any{&key, &at}, func() error {
			if _, ok := out[key]; ok {
				out[key] = store.LastUsed{Time: timeOf(&at), Exact: true}
			}
			return nil
		})
		return err
	})
	return out, err
}

// MonthSpend is each key's spend in month ("2006-01", UTC).
func (s *Store) MonthSpend(month string) (map[string]decimal.Decimal, error) {
	if err := store.CheckMonth(month); err != nil {
		return nil, err
	}
	out := map[string]decimal.Decimal{}
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var key string
		var spent pgtype.Numeric
		rows, _ := q.Query(ctx, "select key_id, spent from spend_month where month = $1", month)
		_, err := pgx.ForEachRow(rows, []any{&key, &spent}, func() error {
			out[key] = dec(spent)
			return nil
		})
		return err
	})
	return out, err
}
