package store

// Media task records (videos, images) and the outbox of their callbacks. A task is written
// (committed, fsynced) before its client sees its id; a status change and the callback that
// announces it commit in one transaction, so a restart loses neither.

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
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

// Task is one media generation task.
type Task struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind"` // video | image
	Account        string          `json:"account"`
	KeyID          string          `json:"key_id"`
	RequestID      string          `json:"request_id,omitempty"`
	Model          string          `json:"model"`
	Family         string          `json:"family"`
	Variant        string          `json:"variant,omitempty"`
	Route          string          `json:"route,omitempty"`
	Provider       string          `json:"provider"`
	ProviderTaskID string          `json:"provider_task_id"`
	Status         string          `json:"status"` // queued | in_progress | completed | failed
	FamilyStatus   string          `json:"family_status,omitempty"`
	Progress       int             `json:"progress"`
	Videos         []TaskVideo     `json:"videos,omitempty"`
	Images         []TaskImage     `json:"images,omitempty"`
	Text           string          `json:"text,omitempty"` // what the model wrote beside its images
	BilledSeconds  decimal.Decimal `json:"billed_seconds"` // the provider's usage, when it reports one
	// BilledImages is the provider's image count (usage), when it reports one.
	BilledImages int64 `json:"billed_images,omitempty"`
	// PromptTokens and CompletionTokens are the provider's token usage, for families also
	// billed by tokens (I3); ImageTokens is the part of CompletionTokens that was images.
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	ImageTokens      int64 `json:"image_tokens,omitempty"`
	// RequestedSeconds is the duration asked for: what is billed when the provider reports
	// neither usage nor the videos' durations (MiniMax).
	RequestedSeconds int64           `json:"requested_seconds"`
	Error            *TaskError      `json:"error,omitempty"`
	Hold             decimal.Decimal `json:"hold"` // held at creation, so a restart can hold it again
	Cost             decimal.Decimal `json:"cost"`
	// Overage is what the provider's report priced beyond the hold: the cost is capped at it.
	Overage decimal.Decimal `json:"overage,omitzero"`
	Settled bool            `json:"settled"`
	// Paid: the task was paid through x402 when it was created; its cost is shown, never
	// debited from credits.
	Paid        bool      `json:"paid,omitempty"`
	CallbackURL string    `json:"callback_url,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	CompletedAt time.Time `json:"completed_at"`
}

// TaskVideo is one produced video.
type TaskVideo struct {
	URL       string          `json:"url"`
	ExpiresAt time.Time       `json:"expires_at"`
	Seconds   decimal.Decimal `json:"seconds"`
	Width     int             `json:"width,omitempty"`
	Height    int             `json:"height,omitempty"`
}

// TaskImage is one produced image: a provider's URL, or the image itself (Blob), kept until
// ExpiresAt.
type TaskImage struct {
	URL       string    `json:"url,omitempty"`
	MIMEType  string    `json:"mime_type,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	Width     int       `json:"width,omitempty"`
	Height    int       `json:"height,omitempty"`
	// Blob is where the image's bytes are kept when the provider sent them (not a URL); set
	// by the store when the task is written with Data.
	Blob string `json:"blob,omitempty"`
	// Data is the image's bytes: written with the task, read back by GetTask (nil once expired).
	Data []byte `json:"-"`
}

// TaskError is why a task failed.
type TaskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Terminal reports whether the task's status never changes again.
func (t *Task) Terminal() bool { return t.Status == "completed" || t.Status == "failed" }

// Callback is one delivery of a task object to a client's callback URL.
type Callback struct {
	ID        string    `json:"id"` // the idempotency id receivers deduplicate on
	TaskID    string    `json:"task_id"`
	Account   string    `json:"account"`
	URL       string    `json:"url"`
	Body      []byte    `json:"body"`
	Attempt   int       `json:"attempt"`
	NextAt    time.Time `json:"next_at"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrTaskNotFound: no task has the id.
var ErrTaskNotFound = errors.New("task not found")

const (
	maxTaskURL     = 4096
	maxTaskText    = 4096
	maxTaskVideos  = 16
	maxTaskImages  = 16
	maxImageBytes  = 64 << 20
	maxModelText   = 256 << 10 // text a model returned beside its images
	maxCallbackLen = 1 << 20
)

var idEncoding = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// NewTaskID makes an unguessable task id: kind_ and 26 characters of 128 random bits.
func NewTaskID(kind string) string { return kind + "_" + randomID() }

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// check refuses a record the store must not hold.
func (t *Task) check() error {
	switch {
	case t.ID == "" || len(t.ID) > 64:
		return fmt.Errorf("task id %q", t.ID)
	case t.Account == "" || t.Model == "" || t.Provider == "" || t.ProviderTaskID == "" || len(t.ProviderTaskID) > 256:
		return fmt.Errorf("task %s lacks its account, model, provider or provider task id", t.ID)
	case len(t.CallbackURL) > maxTaskURL || len(t.Videos) > maxTaskVideos || len(t.Images) > maxTaskImages:
		return fmt.Errorf("task %s: callback URL, video or image list too long", t.ID)
	case len(t.Text) > maxModelText:
		return fmt.Errorf("task %s: the model's text is over %d bytes", t.ID, maxModelText)
	case t.Error != nil && (len(t.Error.Message) > maxTaskText || len(t.Error.Code) > 128):
		return fmt.Errorf("task %s: error text too long", t.ID)
	}
	for _, v := range t.Videos {
		if len(v.URL) > maxTaskURL {
			return fmt.Errorf("task %s: a video URL is over %d bytes", t.ID, maxTaskURL)
		}
	}
	for _, im := range t.Images {
		if len(im.URL) > maxTaskURL || len(im.MIMEType) > 128 || len(im.Data) > maxImageBytes {
			return fmt.Errorf("task %s: an image URL, type or size is over its bound (%d bytes of URL, %d MiB)", t.ID, maxTaskURL, maxImageBytes>>20)
		}
	}
	return nil
}

// PutTask records a new task durably (the transaction is committed and synced when it
// returns).
func (s *Store) PutTask(t *Task) error { return s.PutTaskChange(t, TaskChange{}) }

// PutTaskChange records a new task with what ch writes beside it (a task that finished at
// creation: its callback and its bill), in one durable transaction; errors as UpdateTask.
func (s *Store) PutTaskChange(t *Task, ch TaskChange) error {
	if err := t.check(); err != nil {
		return errorOf(ErrInvalid, "store: %v", err)
	}
	var usageErr error
	err := s.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketTasks).Get([]byte(t.ID)) != nil {
			return errorOf(ErrExists, "store: task %s exists", t.ID)
		}
		if err := putTask(tx, t); err != nil {
			return err
		}
		var err error
		usageErr, err = writeChange(tx, ch)
		return err
	})
	if err != nil {
		return err
	}
	return usageErr
}

// writeChange writes what a task change carries beside the task. A usage record wrong in
// itself comes back as usageErr (the transaction may commit); any other failure as err.
func writeChange(tx *bolt.Tx, ch TaskChange) (usageErr, err error) {
	for _, c := range ch.Callbacks {
		if err := enqueue(tx, c); err != nil {
			return nil, err
		}
	}
	if ch.Usage == nil {
		return nil, nil
	}
	errs := []error{nil}
	if todo := prepareSettling([]UsageRecord{*ch.Usage}, errs); len(todo) > 0 {
		if err := settleTx(tx, todo, errs, nil); err != nil {
			return nil, err
		}
	}
	switch {
	case errs[0] == nil:
		return nil, nil
	case wrongRecord(errs[0]):
		return fmt.Errorf("%w: %w", ErrUsageNotSettled, errs[0]), nil
	}
	return nil, errs[0]
}

func putTask(tx *bolt.Tx, t *Task) error {
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
func doneKey(t *Task) []byte {
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
		var t Task
		if jsonUnmarshal(v, &t) != nil || !t.Terminal() {
			return nil // unreadable rows stay where they are; open tasks are not due
		}
		return done.Put(doneKey(&t), nil)
	})
}

// PruneTasks deletes, in one transaction, up to limit finished tasks that ended before before,
// with what they left in the outbox. Fewer than limit deleted means none is left.
func (s *Store) PruneTasks(before time.Time, limit int) (PruneResult, error) {
	var res PruneResult
	var start time.Time
	end := usageKey(before, "")
	err := s.update(func(tx *bolt.Tx) error {
		start = time.Now()
		done, tasks := tx.Bucket(bucketTasksDone), tx.Bucket(bucketTasks)
		old := keysBefore(done, end, limit)
		gone := map[string]bool{}
		for _, k := range old {
			id := k[8:]
			var t Task
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
			var cb Callback
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
func (s *Store) GetTask(id string) (*Task, error) {
	var t *Task
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTasks).Get([]byte(id))
		if v == nil {
			return ErrTaskNotFound
		}
		t = &Task{}
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
func (s *Store) PruneImages(before time.Time, limit int) (PruneResult, error) {
	var res PruneResult
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

// TaskChange is what a task update writes beside the task, in the same transaction.
type TaskChange struct {
	Callbacks []Callback // announcements of the change, to the outbox
	// Usage is the bill of a task that completed: settled (record, debit, aggregates, month
	// spend, exactly once per RequestID) with the task's new state, so no crash can leave a
	// completed task unbilled or bill it twice.
	Usage *UsageRecord
}

// ErrUsageNotSettled: the task was updated but its usage record was refused on its own
// (invalid, or its account no longer exists); the error says why.
var ErrUsageNotSettled = errors.New("usage not settled")

// UpdateTask changes a task with fn and writes what fn returns beside it, in one durable
// transaction. fn may run again if the transaction is retried; it must only change t. A usage
// record that is wrong in itself does not hold back the task: the task commits and the error
// wraps ErrUsageNotSettled; any other failure to settle fails the whole update.
func (s *Store) UpdateTask(id string, fn func(t *Task) (TaskChange, error)) (*Task, error) {
	var out *Task
	var usageErr error
	err := s.update(func(tx *bolt.Tx) error {
		usageErr = nil
		v := tx.Bucket(bucketTasks).Get([]byte(id))
		if v == nil {
			return ErrTaskNotFound
		}
		t := &Task{}
		if err := jsonUnmarshal(v, t); err != nil {
			return err
		}
		ch, err := fn(t)
		if err != nil {
			return err
		}
		if t.ID != id {
			return errorOf(ErrInvalid, "store: a task update changed its id")
		}
		if err := t.check(); err != nil {
			return errorOf(ErrInvalid, "store: %v", err)
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
	return out, usageErr
}

// OpenTasks lists up to limit tasks that are not finished, in id order after the id after.
func (s *Store) OpenTasks(limit int, after string) ([]Task, error) {
	var out []Task
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTasksOpen).Cursor()
		k, _ := c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, _ = c.Next()
		}
		for ; k != nil && len(out) < limit; k, _ = c.Next() {
			var t Task
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
func enqueue(tx *bolt.Tx, c Callback) error {
	if c.URL == "" || len(c.URL) > maxTaskURL || len(c.Body) > maxCallbackLen {
		return errorOf(ErrInvalid, "store: callback for task %s: URL empty or too long, or body over %d bytes", c.TaskID, maxCallbackLen)
	}
	if c.ID == "" {
		c.ID = "cb_" + randomID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = time.Now().UTC()
	}
	if c.NextAt.IsZero() {
		c.NextAt = c.CreatedAt
	}
	return putJSON(tx.Bucket(bucketOutbox), outboxKey(c), c)
}

func outboxKey(c Callback) string {
	return c.NextAt.UTC().Format("20060102T150405.000000000Z") + "/" + c.ID
}

// DueCallbacks lists up to limit callbacks due at now, the longest waiting first.
func (s *Store) DueCallbacks(now time.Time, limit int) ([]Callback, error) {
	var out []Callback
	err := s.ScanDueCallbacks(now, limit, func(string) bool { return false }, func(c Callback) bool {
		out = append(out, c)
		return len(out) < limit
	})
	return out, err
}

// ScanDueCallbacks reads the callbacks due at now, the longest waiting first, at most scan of
// them: one skip(id) passes over is not decoded; the others go to take until it returns false.
// One slow receiver's backlog is thus passed over cheaply to reach the callbacks behind it.
func (s *Store) ScanDueCallbacks(now time.Time, scan int, skip func(id string) bool, take func(Callback) bool) error {
	until := now.UTC().Format("20060102T150405.000000000Z") + "/~"
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, v := c.First(); k != nil && scan > 0 && string(k) <= until; k, v = c.Next() {
			scan--
			if _, id, _ := strings.Cut(string(k), "/"); skip(id) {
				continue
			}
			var cb Callback
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
func (s *Store) AckCallback(c Callback) error {
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketOutbox).Delete([]byte(outboxKey(c))) })
}

// RetryCallback puts a callback back for another attempt at next.
func (s *Store) RetryCallback(c Callback, next time.Time) error {
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
		var r [32]byte
		_, _ = rand.Read(r[:])
		secret = "whsec_" + strings.ToLower(idEncoding.EncodeToString(r[:]))
		return b.Put(key, []byte(secret))
	})
	return secret, err
}
