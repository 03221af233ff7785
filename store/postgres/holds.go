package postgres

// Durable holds and the Recorder: the Settler of store/bbolt (group commit, holds, retries,
// a store that cannot commit waited for) writes through SettleWith here, so records, their
// debits and the holds they end commit in one PostgreSQL transaction.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// NewSettler starts the Recorder that settles records in s with group commit (window: how
// long it gathers records after the first).
func NewSettler(s *Store, window time.Duration, hooks store.SettlerHooks) store.Recorder {
	return settle.New(s, settle.Options{Window: window, Hooks: hooks})
}

// Probe commits a transaction that takes a transaction id: it fails while the database is
// unreachable, read-only (a standby) or out of room for it.
func (s *Store) Probe() error {
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select txid_current()")
		return err
	})
}

// Recovery is closed when the current outage ends; nil while there is none.
func (s *Store) Recovery() <-chan struct{} { return s.recovery() }

// putHolds writes hc's rows in tx. A hold that is not a valid record is left out: it is only
// the provisional bill of a request that will settle on its own.
func putHolds(ctx context.Context, tx pgx.Tx, hc settle.HoldChanges) error {
	batch := &pgx.Batch{}
	for i := range hc.Put {
		rec := hc.Put[i]
		rec.Time = rec.Time.UTC().Round(0)
		if rec.Validate() != nil {
			continue
		}
		batch.Queue("insert into holds (request_id, record) values ($1, $2) on conflict (request_id) do update set record = excluded.record",
			rec.RequestID, encode(rec))
	}
	if len(hc.Drop) > 0 {
		batch.Queue("delete from holds where request_id = any($1)", hc.Drop)
	}
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, batch).Close()
}

// OpenHolds is the number of holds written and not settled or ended yet.
func (s *Store) OpenHolds() (int, error) {
	var n int
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		return q.QueryRow(ctx, "select count(*) from holds").Scan(&n)
	})
	return n, err
}

// SettleHolds bills every hold left unsettled as an estimated record with EstimateReason
// reason; a hold whose record cannot be stored is dropped and its failure returned.
func (s *Store) SettleHolds(reason string) (settled int, failed []error, err error) {
	var recs []store.UsageRecord
	var bad []string
	err = s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var id string
		var v []byte
		rows, _ := q.Query(ctx, `select request_id, record from holds order by request_id collate "C"`)
		_, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
			var rec store.UsageRecord
			if err := decode(v, &rec); err != nil {
				bad, failed = append(bad, id), append(failed, err)
				return nil
			}
			rec.Estimated, rec.EstimateReason = true, reason
			recs = append(recs, rec)
			return nil
		})
		return err
	})
	if err != nil {
		return 0, failed, err
	}
	return settle.Held(s.SettleWith, recs, bad, failed)
}
