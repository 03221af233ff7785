package postgres

// Shipping many usage records in one statement: the records' columns go as one array each and
// unnest back into rows, so a batch of thousands is one INSERT (one plan, one round trip)
// rather than one statement per record.

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tollway/tollway/store"
)

// recordRows are usage records column by column, in recordColumns' order.
type recordRows struct {
	ids, keys, accounts, models, providers, routes, reasons []string
	at, prompt, completion, cached                          []int64
	cost, overage                                           []pgtype.Numeric
	estimated                                               []bool
	payment                                                 []*string // JSON text; nil: NULL
}

func (rr *recordRows) add(r *store.UsageRecord) {
	var payment *string
	if r.Payment != nil {
		p := string(encode(r.Payment))
		payment = &p
	}
	rr.ids, rr.at, rr.keys, rr.accounts = append(rr.ids, r.RequestID), append(rr.at, r.Time.UnixNano()), append(rr.keys, r.KeyID), append(rr.accounts, r.Account)
	rr.models, rr.providers, rr.routes = append(rr.models, r.Model), append(rr.providers, r.Provider), append(rr.routes, r.Route)
	rr.prompt, rr.completion, rr.cached = append(rr.prompt, r.PromptTokens), append(rr.completion, r.CompletionTokens), append(rr.cached, r.CachedTokens)
	rr.cost, rr.overage = append(rr.cost, num(r.Cost)), append(rr.overage, num(r.Overage))
	rr.estimated, rr.reasons, rr.payment = append(rr.estimated, r.Estimated), append(rr.reasons, r.EstimateReason), append(rr.payment, payment)
}

// queueInsert queues the insert of the rows whose request id is not recorded yet (ON
// CONFLICT DO NOTHING: the primary key is the last word); the map it returns holds the ids
// inserted once the batch ran.
func queueInsert(batch *pgx.Batch, rr *recordRows) *map[string]bool {
	inserted := make(map[string]bool, len(rr.ids))
	if len(rr.ids) == 0 {
		return &inserted
	}
	batch.Queue("insert into usage_records ("+recordColumns+") "+
		"select id, at, k, a, m, p, r, pt, ct, cat, c, o, e, er, pay::json from unnest("+
		"$1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], "+
		"$9::bigint[], $10::bigint[], $11::numeric[], $12::numeric[], $13::boolean[], $14::text[], $15::text[]) "+
		"u(id, at, k, a, m, p, r, pt, ct, cat, c, o, e, er, pay) "+
		"on conflict (request_id) do nothing returning request_id",
		rr.ids, rr.at, rr.keys, rr.accounts, rr.models, rr.providers, rr.routes, rr.prompt,
		rr.completion, rr.cached, rr.cost, rr.overage, rr.estimated, rr.reasons, rr.payment).Query(func(rows pgx.Rows) error {
		var id string
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error { inserted[id] = true; return nil })
		return err
	})
	return &inserted
}
