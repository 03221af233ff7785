package bbolt

// Media task records (videos, images) and the outbox of their callbacks. A task is written
// (committed, fsynced) before its client sees its id; a status change and the callback that
// announces it commit in one transaction, so a restart loses neither.

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

var (
	bucketTasks     = []byte("tasks")
	bucketTasksOpen = []byte("tasks_open")  // ids of tasks not yet completed or failed
	bucketTasksDone = []byte("tasks_done")  // finished tasks by completion time ‖ id, for retention
	bucketImages    = []byte("task_images") // images a provider sent inline, by expiry ‖ task id ‖ index
	bucketOutbox    = []byte("callback_outbox")
	bucketSecrets   = []byte("callback_secrets") // account -> its callback signing secret
)

func init() {
	allBuckets = append(allBuckets, bucketTasks, bucketTasksOpen, bucketTasksDone, bucketImages, bucketOutbox, bucketSecrets)
	bucketFill[string(bucketTasksDone)] = indexDoneTasks
}

// PutTask records a new task durably (the transaction is committed and synced when it
// returns).
func (s *Store) PutTask(t *store.Task) error { return s.PutTaskChange(t, store.TaskChange{}) }

// PutTaskChange records a new task with what ch writes beside it (a task that finished at
// creation: its callback and its bill), in one durable transaction; errors as UpdateTask.
func (s *Store) PutTaskChange(t *store.Task, ch store.TaskChange) error {
	if err := t.Validate(); err != nil {
		return store.Errorf(store.ErrInvalid, "store: %v", err)
	}
	if ch.Lease != nil {
		if err := ch.Lease.Validate(); err != nil {
			return err
		}
	}
	var usageErr error
	leased := false
	err := s.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketTasks).Get([]byte(t.ID)) != nil {
			return store.Errorf(store.ErrExists, "store: task %s exists", t.ID)
		}
		if ch.Lease != nil && !t.Terminal() { // leased before any claim can see the task
			s.setTask(t.ID, ch.Lease)
			leased = true
		}
		if err := putTask(tx, t); err != nil {
			return err
		}
		var err error
		usageErr, err = writeChange(tx, ch)
		return err
	})
	if err != nil {
		if leased {
			s.dropTask(t.ID)
		}
		return err
	}
	return usageErr
}

// writeChange writes what a task change carries beside the task. A usage record wrong in
// itself comes back as usageErr (the transaction may commit); any other failure as err.
func writeChange(tx *bolt.Tx, ch store.TaskChange) (usageErr, err error) {
	for _, c := range ch.Callbacks {
		if err := enqueue(tx, c); err != nil {
			return nil, err
		}
	}
	if ch.Usage == nil {
		return nil, nil
	}
	errs := []error{nil}
	if todo := prepareSettling([]store.UsageRecord{*ch.Usage}, errs); len(todo) > 0 {
		if err := settleTx(tx, todo, errs, nil); err != nil {
			return nil, err
		}
	}
	switch {
	case errs[0] == nil:
		return nil, nil
	case store.RecordFault(errs[0]):
		return fmt.Errorf("%w: %w", store.ErrUsageNotSettled, errs[0]), nil
	}
	return nil, errs[0]
}

func putTask(tx *bolt.Tx, t *store.Task) error {
	for i := range t.Images {
		im := &t.Images[i]
		if im.Data == nil || im.Blob != "" {
			continue
		}
		im.Blob = imageKey(im.ExpiresAt) + "/" + t.ID + "/" + strconv.Itoa(i)
		if err := tx.Bucket(bucketImages).Put([]byte(im.Blob), im.Data); err != nil {
			return err
		}
	}
	if err := putJSON(tx.Bucket(bucketTasks), t.ID, t); err != nil {
		return err
	}
	if t.Terminal() {
		if err := tx.Bucket(bucketTasksDone).Put(doneKey(t), nil); err != nil {
			return err
		}
		return tx.Bucket(bucketTasksOpen).Delete([]byte(t.ID))
	}
	return tx.Bucket(bucketTasksOpen).Put([]byte(t.ID), nil)
}

// doneKey orders finished tasks by when they ended (their update time if no completion time
// was recorded), so retention reads only what it deletes.
func doneKey(t *store.Task) []byte {
	at := t.CompletedAt
	if at.IsZero() {
		at = t.UpdatedAt
	}
	return usageKey(at, t.ID)
}

// indexDoneTasks indexes the finished tasks of a file written before tasks_done existed.
func indexDoneTasks(tx *bolt.Tx) error {
	done := tx.Bucket(bucketTasksDone)
	return tx.Bucket(bucketTasks).ForEach(func(_, v []byte) error {
		var t store.Task
		if jsonUnmarshal(v, &t) != nil || !t.Terminal() {
			return nil // unreadable rows stay where they are; open tasks are not due
		}
		return done.Put(doneKey(&t), nil)
	})
}

// PruneTasks deletes, in one transaction, up to limit finished tasks that ended before before,
// with what they left in the outbox. Fewer than limit deleted means none is left.
func (s *Store) PruneTasks(before time.Time, limit int) (store.PruneResult, error) {
	var res store.PruneResult
	var start time.Time
	end := usageKey(before, "")
	err := s.update(func(tx *bolt.Tx) error {
		start = time.Now()
		done, tasks := tx.Bucket(bucketTasksDone), tx.Bucket(bucketTasks)
		old := keysBefore(done, end, limit)
		gone := map[string]bool{}
		for _, k := range old {
			id := k[8:]
			var t store.Task
			if v := tasks.Get(id); v != nil && jsonUnmarshal(v, &t) == nil {
				for _, im := range t.Images {
					if im.Blob != "" {
						if err := tx.Bucket(bucketImages).Delete([]byte(im.Blob)); err != nil {
							return err
						}
					}
				}
			}
			if err := done.Delete(k); err != nil {
				return err
			}
			if err := tasks.Delete(id); err != nil {
				return err
			}
			gone[string(id)] = true
		}
		res.Deleted = len(old)
		if len(gone) == 0 {
			return nil
		}
		// Callbacks give up within a day, so a task kept at least a day leaves none behind; a
		// shorter window must not leave deliveries of tasks that are gone.
		var stale [][]byte
		oc := tx.Bucket(bucketOutbox).Cursor()
		for k, v := oc.First(); k != nil; k, v = oc.Next() {
			var cb store.Callback
			if jsonUnmarshal(v, &cb) == nil && gone[cb.TaskID] {
				stale = append(stale, bytes.Clone(k))
			}
		}
		for _, k := range stale {
			if err := tx.Bucket(bucketOutbox).Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if !start.IsZero() {
		res.Held = time.Since(start)
	}
	return res, err
}

// GetTask reads a task with the bytes of its images that are still kept; ErrTaskNotFound when
// there is none.
func (s *Store) GetTask(id string) (*store.Task, error) {
	var t *store.Task
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTasks).Get([]byte(id))
		if v == nil {
			return store.ErrTaskNotFound
		}
		t = &store.Task{}
		if err := jsonUnmarshal(v, t); err != nil {
			return err
		}
		for i := range t.Images {
			if b := t.Images[i].Blob; b != "" {
				t.Images[i].Data = bytes.Clone(tx.Bucket(bucketImages).Get([]byte(b))) // nil once pruned
			}
		}
		return nil
	})
	return t, err
}

// imageKey starts a kept image's key: its expiry as 16 hex digits of unix nanoseconds, so keys
// sort by expiry and stay text (the key is also the task record's Blob, a JSON string).
func imageKey(expires time.Time) string {
	return fmt.Sprintf("%016x", uint64(max(expires.UnixNano(), 0)))
}

// PruneImages deletes, in one transaction, up to limit kept images that expired before before.
// Their tasks stay: the object then says the image expired.
func (s *Store) PruneImages(before time.Time, limit int) (store.PruneResult, error) {
	var res store.PruneResult
	var start time.Time
	err := s.update(func(tx *bolt.Tx) error {
		start = time.Now()
		b := tx.Bucket(bucketImages)
		old := keysBefore(b, []byte(imageKey(before)), limit)
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		res.Deleted = len(old)
		return nil
	})
	if !start.IsZero() {
		res.Held = time.Since(start)
	}
	return res, err
}

// UpdateTask changes a task with fn and writes what fn returns beside it, in one durable
// transaction. fn may run again if the transaction is retried; it must only change t. A usage
// record that is wrong in itself does not hold back the task: the task commits and the error
// wraps ErrUsageNotSettled; any other failure to settle fails the whole update.
func (s *Store) UpdateTask(id string, fn func(t *store.Task) (store.TaskChange, error)) (*store.Task, error) {
	var out *store.Task
	var usageErr error
	err := s.update(func(tx *bolt.Tx) error {
		usageErr = nil
		v := tx.Bucket(bucketTasks).Get([]byte(id))
		if v == nil {
			return store.ErrTaskNotFound
		}
		t := &store.Task{}
		if err := jsonUnmarshal(v, t); err != nil {
			return err
		}
		ch, err := fn(t)
		if err != nil {
			return err
		}
		if t.ID != id {
			return store.Errorf(store.ErrInvalid, "store: a task update changed its id")
		}
		if err := t.Validate(); err != nil {
			return store.Errorf(store.ErrInvalid, "store: %v", err)
		}
		if err := putTask(tx, t); err != nil {
			return err
		}
		if usageErr, err = writeChange(tx, ch); err != nil {
			return err
		}
		out = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out.Terminal() {
		s.dropTask(id)
	}
	return out, usageErr
}

// OpenTasks lists up to limit tasks that are not finished, in id order after the id after.
func (s *Store) OpenTasks(limit int, after string) ([]store.Task, error) {
	var out []store.Task
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTasksOpen).Cursor()
		k, _ := c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, _ = c.Next()
		}
		for ; k != nil && len(out) < limit; k, _ = c.Next() {
			var t store.Task
			v := tx.Bucket(bucketTasks).Get(k)
			if v == nil {
				continue // the index outlived its task: harmless, skipped
			}
			if err := jsonUnmarshal(v, &t); err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// enqueue adds a callback to the outbox; its id and times are set here when empty. Keys sort
// by the time the callback is due, so DueCallbacks reads only what is due.
func enqueue(tx *bolt.Tx, c store.Callback) error {
	if err := c.Prepare(time.Now()); err != nil {
		return err
	}
	return putJSON(tx.Bucket(bucketOutbox), outboxKey(c), c)
}

func outboxKey(c store.Callback) string {
	return c.NextAt.UTC().Format("20060102T150405.000000000Z") + "/" + c.ID
}

// DueCallbacks lists up to limit callbacks due at now, the longest waiting first.
func (s *Store) DueCallbacks(now time.Time, limit int) ([]store.Callback, error) {
	var out []store.Callback
	err := s.ScanDueCallbacks(now, limit, func(string) bool { return false }, func(c store.Callback) bool {
		out = append(out, c)
		return len(out) < limit
	})
	return out, err
}

// ScanDueCallbacks reads the callbacks due at now, the longest waiting first, at most scan of
// them: one skip(id) passes over is not decoded; the others go to take until it returns false.
// One slow receiver's backlog is thus passed over cheaply to reach the callbacks behind it.
func (s *Store) ScanDueCallbacks(now time.Time, scan int, skip func(id string) bool, take func(store.Callback) bool) error {
	until := now.UTC().Format("20060102T150405.000000000Z") + "/~"
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, v := c.First(); k != nil && scan > 0 && string(k) <= until; k, v = c.Next() {
			scan--
			if _, id, _ := strings.Cut(string(k), "/"); skip(id) {
				continue
			}
			var cb store.Callback
			if err := jsonUnmarshal(v, &cb); err != nil {
				return err
			}
			if !take(cb) {
				return nil
			}
		}
		return nil
	})
}

// AckCallback removes a delivered (or given up) callback from the outbox.
func (s *Store) AckCallback(c store.Callback) error {
	defer s.dropCallback(c.ID)
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketOutbox).Delete([]byte(outboxKey(c))) })
}

// RetryCallback puts a callback back for another attempt at next.
func (s *Store) RetryCallback(c store.Callback, next time.Time) error {
	defer s.dropCallback(c.ID)
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketOutbox).Delete([]byte(outboxKey(c))); err != nil {
			return err
		}
		c.Attempt++
		c.NextAt = next
		return enqueue(tx, c)
	})
}

// CallbackSecret is the account's secret for signing callbacks, made on first use.
func (s *Store) CallbackSecret(account string) (string, error) {
	var secret string
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSecrets)
		key := []byte(account)
		if v := b.Get(key); v != nil {
			secret = string(v)
			return nil
		}
		secret = store.NewCallbackSecret()
		return b.Put(key, []byte(secret))
	})
	return secret, err
}
