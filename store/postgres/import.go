package postgres

import (
	"context"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
)

// Tables counted by Counts: every table of records (not the registry of replicas, which
// describes the processes, nor the schema's version).
var countedTables = []string{"providers", "models", "routes", "accounts", "api_keys", "usage_records", "usage_daily",
	"usage_route", "spend_month", "holds", "tasks", "callbacks", "callback_secrets", "pending_payments", "credentials"}

// Counts is how many rows each table of records holds, by table name.
func (s *Store) Counts() (map[string]int, error) {
	out := map[string]int{}
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		for _, t := range countedTables {
			var n int
			if err := q.QueryRow(ctx, "select count(*) from "+pgx.Identifier{t}.Sanitize()).Scan(&n); err != nil {
				return err
			}
			out[t] = n
		}
		return nil
	})
	return out, err
}

// ImportLedger writes c as it is, in one transaction: each row that is not stored yet (by its
// key) is inserted, one that is stays as it is, and nothing is settled again (no debit, no
// aggregate added to). It says how many rows of each table it inserted.
func (s *Store) ImportLedger(c store.LedgerCopy) (map[string]int, error) {
	var added map[string]int
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		added = map[string]int{}
		b := &importBatch{}
		for _, a := range c.Accounts {
			b.add("accounts", "insert into accounts (id, balance, created_ns) values ($1, $2, $3) on conflict (id) do nothing",
				a.ID, num(a.Balance), a.CreatedAt.UnixNano())
		}
		for i := range c.Records {
			b.add("usage_records", "insert into usage_records ("+recordColumns+") values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) "+
				"on conflict (request_id) do nothing", recordArgs(&c.Records[i])...)
		}
		for i := range c.Daily {
			r := &c.Daily[i]
			b.add("usage_daily", insertTotals("usage_daily", "day, key_id, account, model"), append([]any{r.Day, r.KeyID, r.Account, r.Model}, totalArgs(&r.UsageTotals)...)...)
		}
		for _, route := range sortedKeys(c.Routes) {
			for i := range c.Routes[route] {
				r := &c.Routes[route][i]
				b.add("usage_route", insertTotals("usage_route", "route, model"), append([]any{route, r.Model}, totalArgs(&r.UsageTotals)...)...)
			}
		}
		for _, month := range sortedKeys(c.MonthSpend) {
			for _, key := range sortedKeys(c.MonthSpend[month]) {
				b.add("spend_month", "insert into spend_month (month, key_id, spent) values ($1, $2, $3) on conflict (month, key_id) do nothing",
					month, key, num(c.MonthSpend[month][key]))
			}
		}
		for i := range c.Holds {
			b.add("holds", "insert into holds (request_id, record) values ($1, $2) on conflict (request_id) do nothing",
				c.Holds[i].RequestID, encode(&c.Holds[i]))
		}
		for _, acct := range sortedKeys(c.Secrets) {
			b.add("callback_secrets", "insert into callback_secrets (account, secret) values ($1, $2) on conflict (account) do nothing", acct, c.Secrets[acct])
		}
		return b.send(ctx, tx, added)
	})
	return added, err
}

// insertTotals inserts an aggregate row unless its key is stored.
func insertTotals(table, keyCols string) string { return totalsInsert(table, keyCols) + "do nothing" }

// importBatch queues inserts and counts, by table, those that inserted a row.
type importBatch struct {
	batch  pgx.Batch
	tables []string
}

func (b *importBatch) add(table, sql string, args ...any) {
	b.batch.Queue(sql, args...)
	b.tables = append(b.tables, table)
}

func (b *importBatch) send(ctx context.Context, tx pgx.Tx, added map[string]int) error {
	if len(b.tables) == 0 {
		return nil
	}
	br := tx.SendBatch(ctx, &b.batch)
	for _, t := range b.tables {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return err
		}
		added[t] += int(tag.RowsAffected())
	}
	return br.Close()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
