package postgres

// Leases on running tasks and due callbacks (store.TaskLeases, store.CallbackLeases), timed
// by the database's clock so replicas' clocks need not agree.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
)

// dbNow is the database's clock as unix nanoseconds (the transaction's start).
const dbNow = "(extract(epoch from now()) * 1000000000)::bigint"

// ClaimTasks leases to owner up to limit running tasks nobody holds: the rows are locked as
// they are chosen and rows another claim holds are skipped, so concurrent claims split them.
func (s *Store) ClaimTasks(owner string, d time.Duration, limit int) ([]store.Task, error) {
	if err := (&store.TaskLease{Owner: owner, For: d}).Validate(); err != nil {
		return nil, err
	}
	var out []store.Task
	err := s.tx(func(ctx context.Context, tx pgx.Tx) (err error) {
		out, err = docs[store.Task](ctx, tx, `with due as (
				select id from tasks where open and coalesce(lease_until_ns, 0) < `+dbNow+`
				order by coalesce(lease_until_ns, 0), id limit $3 for update skip locked)
			update tasks t set lease_owner = $1, lease_until_ns = `+dbNow+` + $2
			from due where t.id = due.id returning t.doc`, owner, int64(d), limit)
		return err
	})
	return out, err
}

// RenewTasks extends owner's leases on those of ids still running and its own.
func (s *Store) RenewTasks(owner string, ids []string, d time.Duration) ([]string, error) {
	if err := (&store.TaskLease{Owner: owner, For: d}).Validate(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var held []string
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rows, _ := q.Query(ctx, "update tasks set lease_until_ns = "+dbNow+" + $3 where id = any($2) and open and lease_owner = $1 returning id",
			owner, ids, int64(d))
		var err error
		held, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return held, err
}

// ReleaseTasks ends owner's leases on ids, or on all its tasks when ids is nil.
func (s *Store) ReleaseTasks(owner string, ids []string) error {
	return s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var err error
		if ids == nil {
			_, err = q.Exec(ctx, "update tasks set lease_owner = null, lease_until_ns = null where lease_owner = $1", owner)
		} else {
			_, err = q.Exec(ctx, "update tasks set lease_owner = null, lease_until_ns = null where lease_owner = $1 and id = any($2)", owner, ids)
		}
		return err
	})
}

// ClaimCallback leases c to owner by moving it out of the due ones for the lease: one
// statement, which one replica wins. A lease that ends unacknowledged leaves it due again.
func (s *Store) ClaimCallback(c store.Callback, owner string, d time.Duration) (bool, error) {
	if err := (&store.TaskLease{Owner: owner, For: d}).Validate(); err != nil {
		return false, err
	}
	var won bool
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		tag, err := q.Exec(ctx, "update callbacks set next_ns = "+dbNow+" + $2 where id = $1 and next_ns <= "+dbNow, c.ID, int64(d))
		won = tag.RowsAffected() == 1
		return err
	})
	return won, err
}
