package postgres

// Media tasks and the outbox of their callbacks. A task, the callbacks announcing its change
// and the bill of its end commit in one transaction, so no crash loses one or bills twice.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
)

// PutTaskChange records a new task (ErrExists if its id is taken) with what ch writes beside
// it, at once.
func (s *Store) PutTaskChange(t *store.Task, ch store.TaskChange) error {
	if err := t.Validate(); err != nil {
		return store.Errorf(store.ErrInvalid, "store: %v", err)
	}
	var owner *string
	var lease int64
	if l := ch.Lease; l != nil && !t.Terminal() {
		if err := l.Validate(); err != nil {
			return err
		}
		owner, lease = &l.Owner, int64(l.For)
	}
	var usageErr error
	err := s.tx(func(ctx context.Context, tx pgx.Tx) (err error) {
		tag, err := tx.Exec(ctx, "insert into tasks (id, open, done_ns, doc, lease_owner, lease_until_ns) values ($1, true, null, '{}', $2, "+
			"case when $2::text is null then null else "+dbNow+" + $3::bigint end) on conflict (id) do nothing", t.ID, owner, lease)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.Errorf(store.ErrExists, "store: task %s exists", t.ID)
		}
		if err := putTask(ctx, tx, t); err != nil {
			return err
		}
		usageErr, err = writeChange(ctx, tx, ch)
		return err
	})
	if err != nil {
		return err
	}
	return usageErr
}

// putTask writes t over its row, and the images it carries that are not kept yet.
func putTask(ctx context.Context, tx pgx.Tx, t *store.Task) error {
	batch := &pgx.Batch{}
	for i := range t.Images {
		im := &t.Images[i]
		if im.Data == nil || im.Blob != "" {
			continue
		}
		im.Blob = fmt.Sprintf("%016x", uint64(max(im.ExpiresAt.UnixNano(), 0))) + "/" + t.ID + "/" + strconv.Itoa(i)
		batch.Queue("insert into task_images (blob, task_id, expires_ns, data) values ($1, $2, $3, $4) "+
			"on conflict (blob) do update set data = excluded.data", im.Blob, t.ID, im.ExpiresAt.UnixNano(), im.Data)
	}
	var done *int64
	if t.Terminal() {
		at := t.CompletedAt
		if at.IsZero() {
			at = t.UpdatedAt
		}
		ns := at.UnixNano()
		done = &ns
	}
	batch.Queue("update tasks set open = $2, done_ns = $3, doc = $4 where id = $1", t.ID, !t.Terminal(), done, encode(t))
	return tx.SendBatch(ctx, batch).Close()
}

// writeChange writes what a task change carries beside the task. A usage record wrong in
// itself comes back as usageErr (the transaction may commit); any other failure as err.
func writeChange(ctx context.Context, tx pgx.Tx, ch store.TaskChange) (usageErr, err error) {
	for _, c := range ch.Callbacks {
		if err := enqueue(ctx, tx, c); err != nil {
			return nil, err
		}
	}
	if ch.Usage == nil {
		return nil, nil
	}
	rec := *ch.Usage
	rec.Normalize(time.Now())
	errs := []error{rec.Validate()}
	if errs[0] == nil {
		if err := settleTx(ctx, tx, []store.UsageRecord{rec}, []int{0}, errs, nil, ""); err != nil { // a task's hold is its creator's: no slice of ours (budget.go)
			return nil, err
		}
	}
	switch {
	case errs[0] == nil:
		return nil, nil
	case wrongRecord(errs[0]):
		return fmt.Errorf("%w: %w", store.ErrUsageNotSettled, errs[0]), nil
	}
	return nil, errs[0]
}

// GetTask reads a task with the images still kept (ErrTaskNotFound).
func (s *Store) GetTask(id string) (*store.Task, error) {
	var t store.Task
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		var found bool
		var err error
		if t, found, err = doc[store.Task](ctx, q, "select doc from tasks where id = $1", id); err != nil {
			return err
		}
		if !found {
			return store.ErrTaskNotFound
		}
		for i := range t.Images {
			if b := t.Images[i].Blob; b != "" {
				err := q.QueryRow(ctx, "select data from task_images where blob = $1", b).Scan(&t.Images[i].Data)
				if err != nil && err != pgx.ErrNoRows { // none: pruned, the image expired
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// UpdateTask changes a task with fn under its row lock and writes what fn returns beside it,
// at once; fn runs again if the transaction is retried.
func (s *Store) UpdateTask(id string, fn func(t *store.Task) (store.TaskChange, error)) (*store.Task, error) {
	var out *store.Task
	var usageErr error
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		usageErr = nil
		t, found, err := doc[store.Task](ctx, tx, "select doc from tasks where id = $1 for update", id)
		if err != nil {
			return err
		}
		if !found {
			return store.ErrTaskNotFound
		}
		ch, err := fn(&t)
		if err != nil {
			return err
		}
		if t.ID != id {
			return store.Errorf(store.ErrInvalid, "store: a task update changed its id")
		}
		if err := t.Validate(); err != nil {
			return store.Errorf(store.ErrInvalid, "store: %v", err)
		}
		if err := putTask(ctx, tx, &t); err != nil {
			return err
		}
		if usageErr, err = writeChange(ctx, tx, ch); err != nil {
			return err
		}
		out = &t
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, usageErr
}

// OpenTasks lists up to limit unfinished tasks in id order, after the id after.
func (s *Store) OpenTasks(limit int, after string) ([]store.Task, error) {
	var out []store.Task
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) (err error) {
		out, err = docs[store.Task](ctx, q, `select doc from tasks where open and id collate "C" > $1 order by id collate "C" limit $2`, after, limit)
		return err
	})
	return out, err
}

// PruneTasks deletes up to limit tasks finished before before, with their images and what
// they left in the outbox.
func (s *Store) PruneTasks(before time.Time, limit int) (store.PruneResult, error) {
	return s.prune(func(ctx context.Context, tx pgx.Tx) (int, error) {
		rows, _ := tx.Query(ctx, "delete from tasks where id in (select id from tasks where done_ns < $1 order by done_ns limit $2) returning id",
			before.UnixNano(), limit)
		gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(gone) == 0 {
			return 0, err
		}
		_, err = tx.Exec(ctx, "delete from task_images where task_id = any($1); ", gone)
		if err == nil {
			_, err = tx.Exec(ctx, "delete from callbacks where task_id = any($1)", gone)
		}
		return len(gone), err
	})
}

// PruneImages deletes up to limit kept images that expired before before; their tasks stay.
func (s *Store) PruneImages(before time.Time, limit int) (store.PruneResult, error) {
	return s.pruneWhere("task_images", "blob", "expires_ns", before, limit)
}

// prune runs one pruning transaction and says how long it held its locks.
func (s *Store) prune(fn func(ctx context.Context, tx pgx.Tx) (int, error)) (store.PruneResult, error) {
	var res store.PruneResult
	var start time.Time
	err := s.tx(func(ctx context.Context, tx pgx.Tx) (err error) {
		start = time.Now()
		res.Deleted, err = fn(ctx, tx)
		return err
	})
	if !start.IsZero() {
		res.Held = time.Since(start)
	}
	return res, err
}

// pruneWhere deletes up to limit rows of table whose time column is before before, oldest
// first.
func (s *Store) pruneWhere(table, key, col string, before time.Time, limit int) (store.PruneResult, error) {
	return s.prune(func(ctx context.Context, tx pgx.Tx) (int, error) {
		tag, err := tx.Exec(ctx, "delete from "+table+" where "+key+" in (select "+key+" from "+table+" where "+col+" < $1 order by "+col+" limit $2)",
			before.UnixNano(), limit)
		return int(tag.RowsAffected()), err
	})
}

// enqueue adds a callback to the outbox; its id and times are set when empty.
func enqueue(ctx context.Context, tx pgx.Tx, c store.Callback) error {
	if err := c.Prepare(time.Now()); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "insert into callbacks (id, task_id, next_ns, doc) values ($1, $2, $3, $4) "+
		"on conflict (id) do update set next_ns = excluded.next_ns, doc = excluded.doc", c.ID, c.TaskID, c.NextAt.UnixNano(), encode(c))
	return err
}

// ScanDueCallbacks reads the callbacks due at now, the longest waiting first, at most scan of
// them: those skip(id) passes over are not decoded; the others go to take until it returns
// false.
func (s *Store) ScanDueCallbacks(now time.Time, scan int, skip func(id string) bool, take func(store.Callback) bool) error {
	return s.read(func(ctx context.Context, q *pgxpool.Pool) error {
		rows, err := q.Query(ctx, `select id, doc from callbacks where next_ns <= $1 order by next_ns, id collate "C" limit $2`, now.UnixNano(), scan)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var v []byte
			if err := rows.Scan(&id, &v); err != nil {
				return err
			}
			if skip(id) {
				continue
			}
			var cb store.Callback
			if err := decode(v, &cb); err != nil {
				return err
			}
			if !take(cb) {
				return nil
			}
		}
		return rows.Err()
	})
}

// AckCallback removes a delivered (or given up) callback.
func (s *Store) AckCallback(c store.Callback) error {
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "delete from callbacks where id = $1", c.ID)
		return err
	})
}

// RetryCallback puts a callback back for its next attempt (Attempt + 1) at next.
func (s *Store) RetryCallback(c store.Callback, next time.Time) error {
	c.Attempt++
	c.NextAt = next
	return s.tx(func(ctx context.Context, tx pgx.Tx) error { return enqueue(ctx, tx, c) })
}

// CallbackSecret is the account's callback signing secret, made on first use (by whichever
// replica asks first).
func (s *Store) CallbackSecret(account string) (string, error) {
	var secret string
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "insert into callback_secrets (account, secret) values ($1, $2) on conflict (account) do nothing",
			account, store.NewCallbackSecret()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "select secret from callback_secrets where account = $1", account).Scan(&secret)
	})
	return secret, err
}
