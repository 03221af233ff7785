package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
)

// Heartbeat registers or renews r (store.Replicas): one upsert.
func (s *Store) Heartbeat(r store.Replica) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		_, err := q.Exec(ctx, `insert into replicas (name, version, started_ns, last_seen_ns, lease_ns) values ($1, $2, $3, $4, $5)
			on conflict (name) do update set version = excluded.version, started_ns = excluded.started_ns,
			last_seen_ns = excluded.last_seen_ns, lease_ns = excluded.lease_ns`,
			r.Name, r.Version, r.StartedAt.UnixNano(), r.LastSeen.UnixNano(), int64(r.Lease))
		return err
	})
}

// Replicas lists the registered replicas by name.
func (s *Store) Replicas() ([]store.Replica, error) {
	var out []store.Replica
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rows, err := q.Query(ctx, "select name, version, started_ns, last_seen_ns, lease_ns from replicas order by name")
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Replica, error) {
			var r store.Replica
			var started, seen, lease int64
			err := row.Scan(&r.Name, &r.Version, &started, &seen, &lease)
			r.StartedAt, r.LastSeen, r.Lease = timeOf(&started), timeOf(&seen), time.Duration(lease)
			return r, err
		})
		return err
	})
	return out, err
}

// LeaveReplica removes the replica of name.
func (s *Store) LeaveReplica(name string) error {
	return s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		_, err := q.Exec(ctx, "delete from replicas where name = $1", name)
		return err
	})
}

// DropReplicas removes those last seen before before.
func (s *Store) DropReplicas(before time.Time) (int, error) {
	var n int64
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		tag, err := q.Exec(ctx, "delete from replicas where last_seen_ns < $1", before.UnixNano())
		n = tag.RowsAffected()
		return err
	})
	return int(n), err
}
