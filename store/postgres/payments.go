package postgres

// x402: pending settlements, single-use credentials, and the retention of usage records and
// credentials.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
)

// AddPendingPayment keeps p until ResolvePayment (its record is settled separately).
func (s *Store) AddPendingPayment(p store.PendingPayment) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "insert into pending_payments (request_id, doc) values ($1, $2) on conflict (request_id) do update set doc = excluded.doc",
			p.Record.RequestID, encode(p))
		return err
	})
}

// PendingPayments lists those not resolved; a damaged entry is left out and reported in the
// error (ErrInvalid) with the others listed.
func (s *Store) PendingPayments() ([]store.PendingPayment, error) {
	var out []store.PendingPayment
	var bad []error
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var id string
		var v []byte
		rows, _ := q.Query(ctx, `select request_id, doc from pending_payments order by request_id collate "C"`)
		_, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
			var p store.PendingPayment
			if err := decode(v, &p); err != nil {
				bad = append(bad, store.Errorf(store.ErrInvalid, "store: pending payment %q is damaged (%v)", store.ShortID(id), err))
				return nil
			}
			out = append(out, p)
			return nil
		})
		return err
	})
	return out, errors.Join(append(bad, err)...)
}

// paymentColumn is the aggregate column that counts payments in status.
var paymentColumn = map[string]string{store.PaymentSettled: "paid", store.PaymentUnpaid: "unpaid"}

// ResolvePayment ends the pending settlement of record requestID: its payment takes r's
// status, its aggregates move the amount from pending, the entry goes, at once.
func (s *Store) ResolvePayment(requestID string, r store.PaymentResolution) error {
	if err := r.Check(requestID); err != nil {
		return err
	}
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, "select "+recordColumns+" from usage_records where request_id = $1 for update", requestID)
		recs, err := pgx.CollectRows(rows, scanRecord)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return store.Errorf(store.ErrNotFound, "usage record %q: not found", store.ShortID(requestID))
		}
		rec := recs[0]
		pending, err := r.Resolve(&rec)
		if err != nil {
			return err
		}
		if pending {
			if err := resolveRecord(ctx, tx, &rec, r.Status); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, "delete from pending_payments where request_id = $1", requestID)
		return err
	})
}

// resolveRecord writes rec's resolved payment and moves its amount in the aggregates it was
// counted in from pending to status (a pending total back at zero is none).
func resolveRecord(ctx context.Context, tx pgx.Tx, rec *store.UsageRecord, status string) error {
	col, amount := paymentColumn[status], num(rec.Payment.AmountUSD)
	move := "pending = nullif(coalesce(pending, 0) - $1, 0), " + col + " = coalesce(" + col + ", 0) + $1"
	batch := &pgx.Batch{}
	batch.Queue("update usage_records set payment = $2 where request_id = $1", rec.RequestID, encode(rec.Payment))
	batch.Queue("update usage_daily set "+move+" where day = $2 and key_id = $3 and account = $4 and model = $5",
		amount, rec.Time.Format(store.DayLayout), rec.KeyID, rec.Account, rec.Model)
	if rec.Route != "" {
		batch.Queue("update usage_route set "+move+" where route = $2 and model = $3", amount, rec.Route, rec.Model)
	}
	return tx.SendBatch(ctx, batch).Close()
}

// ClaimCredential records key as used until until; of any number of concurrent claims, on
// any replica, the primary key lets one insert win (ErrExists for the others).
func (s *Store) ClaimCredential(key string, until time.Time) error {
	if err := store.CheckClaim(key, until); err != nil {
		return err
	}
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		var won string
		err := tx.QueryRow(ctx, "insert into credentials (key, until_ns) values ($1, $2) on conflict (key) do nothing returning key",
			key, until.UnixNano()).Scan(&won)
		if err == pgx.ErrNoRows {
			return store.ErrCredentialUsed
		}
		return err
	})
}

// PruneCredentials deletes up to limit claims kept until before before.
func (s *Store) PruneCredentials(before time.Time, limit int) (store.PruneResult, error) {
	return s.pruneWhere("credentials", "key", "until_ns", before, limit)
}

// PruneUsage deletes up to limit usage records older than before (the aggregates stay).
func (s *Store) PruneUsage(before time.Time, limit int) (store.PruneResult, error) {
	return s.pruneWhere("usage_records", "request_id", "at_ns", before, limit)
}
