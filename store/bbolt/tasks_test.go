package bbolt

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

func newTask(kind string) *store.Task {
	now := time.Now().UTC()
	return &store.Task{ID: store.NewTaskID(kind), Kind: kind, Account: "acme", KeyID: "k1", Model: "hailuo-02", Family: "V1",
		Provider: "hailuo", ProviderTaskID: "106916112212032", Status: "queued", Hold: decimal.RequireFromString("0.45"),
		CallbackURL: "https://hooks.example.com/v", CreatedAt: now, UpdatedAt: now}
}

// TestTaskLifecycleSurvivesRestart: a task put is there after a reopen; its status change and
// the callback announcing it commit together; finished tasks leave the open index; the outbox
// hands out what is due, in order, and survives a reopen too.
func TestTaskLifecycleSurvivesRestart(t *testing.T) {
	s, path := openTemp(t)
	a, b := newTask("video"), newTask("video")
	for _, x := range []*store.Task{a, b} {
		if err := s.PutTask(x); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(a.ID, "video_") || len(a.ID) != len("video_")+26 || a.ID == b.ID {
		t.Fatalf("ids %s %s", a.ID, b.ID)
	}
	if err := s.PutTask(a); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second put: %v", err)
	}
	open, err := s.OpenTasks(10, "")
	if err != nil || len(open) != 2 {
		t.Fatalf("open %d %v", len(open), err)
	}
	_, err = s.UpdateTask(a.ID, func(x *store.Task) (store.TaskChange, error) {
		x.Status, x.Cost, x.Settled = "completed", decimal.RequireFromString("0.27"), true
		x.Videos = []store.TaskVideo{{URL: "https://cdn/x.mp4", Seconds: decimal.RequireFromString("6")}}
		return store.TaskChange{Callbacks: []store.Callback{{TaskID: x.ID, Account: x.Account, URL: x.CallbackURL, Body: []byte(`{"status":"completed"}`)}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateTask(b.ID, func(x *store.Task) (store.TaskChange, error) {
		x.Status = "failed"
		return store.TaskChange{Callbacks: []store.Callback{{TaskID: x.ID, URL: x.CallbackURL, Body: []byte("{}")}}}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed update: %v", err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetTask(a.ID)
	if err != nil || got.Status != "completed" || !got.Cost.Equal(decimal.RequireFromString("0.27")) || len(got.Videos) != 1 {
		t.Fatalf("after reopen %+v %v", got, err)
	}
	if gb, _ := s.GetTask(b.ID); gb.Status != "queued" {
		t.Fatalf("a failed update changed the task: %+v", gb)
	}
	open, _ = s.OpenTasks(10, "")
	if len(open) != 1 || open[0].ID != b.ID {
		t.Fatalf("open after completion %+v", open)
	}
	if _, err := s.GetTask("video_nope"); !errors.Is(err, store.ErrTaskNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	due, err := s.DueCallbacks(time.Now(), 10)
	if err != nil || len(due) != 1 || due[0].TaskID != a.ID || !strings.HasPrefix(due[0].ID, "cb_") {
		t.Fatalf("due %+v %v", due, err)
	}
	if err := s.RetryCallback(due[0], time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.DueCallbacks(time.Now(), 10); len(d) != 0 {
		t.Fatalf("a callback retried in an hour is due now: %+v", d)
	}
	later, _ := s.DueCallbacks(time.Now().Add(2*time.Hour), 10)
	if len(later) != 1 || later[0].Attempt != 1 || later[0].ID != due[0].ID {
		t.Fatalf("later %+v", later)
	}
	if err := s.AckCallback(later[0]); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.DueCallbacks(time.Now().Add(2*time.Hour), 10); len(d) != 0 {
		t.Fatalf("acked callback still due: %+v", d)
	}
	s1, _ := s.CallbackSecret("acme")
	s2, _ := s.CallbackSecret("acme")
	s3, _ := s.CallbackSecret("other")
	if s1 == "" || s1 != s2 || s1 == s3 || !strings.HasPrefix(s1, "whsec_") {
		t.Fatalf("secrets %q %q %q", s1, s2, s3)
	}
	if _, err := s.Accounts(); err != nil {
		t.Fatalf("accounts still list: %v", err)
	}
}

// TestTaskRecordsAreBounded: a provider's oversized answer cannot make a record the store then
// refuses to read; it is refused when written.
func TestTaskRecordsAreBounded(t *testing.T) {
	s, _ := openTemp(t)
	x := newTask("video")
	x.CallbackURL = "https://" + strings.Repeat("a", 5000)
	if err := s.PutTask(x); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("long callback URL: %v", err)
	}
	x = newTask("video")
	_ = s.PutTask(x)
	if _, err := s.UpdateTask(x.ID, func(t *store.Task) (store.TaskChange, error) {
		t.Videos = []store.TaskVideo{{URL: strings.Repeat("u", 5000)}}
		return store.TaskChange{}, nil
	}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("long video URL: %v", err)
	}
}

// TestTaskUsageSettlesWithTheTask: a task update that carries a usage record settles it in the
// same transaction, once per request id; a record for an account that does not exist leaves
// the task updated and says so with ErrUsageNotSettled; an update that fails writes neither.
func TestTaskUsageSettlesWithTheTask(t *testing.T) {
	s, _ := openTemp(t)
	if _, err := s.CreateAccount("acme", decimal.RequireFromString("5")); err != nil {
		t.Fatal(err)
	}
	x := newTask("video")
	if err := s.PutTask(x); err != nil {
		t.Fatal(err)
	}
	bill := func(account string) *store.UsageRecord {
		return &store.UsageRecord{RequestID: "req." + x.ID, KeyID: "k1", Account: account, Model: "hailuo-02", Provider: "hailuo", Cost: decimal.RequireFromString("0.27")}
	}
	boom := errors.New("boom")
	if _, err := s.UpdateTask(x.ID, func(t *store.Task) (store.TaskChange, error) {
		t.Status = "completed"
		return store.TaskChange{Usage: bill("acme")}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing update: %v", err)
	}
	for i := 0; i < 2; i++ { // settled once however often it is sent
		got, err := s.UpdateTask(x.ID, func(t *store.Task) (store.TaskChange, error) {
			t.Status, t.Cost, t.Settled = "completed", decimal.RequireFromString("0.27"), true
			return store.TaskChange{Usage: bill("acme")}, nil
		})
		if err != nil || got.Status != "completed" {
			t.Fatalf("update %d: %+v %v", i, got, err)
		}
	}
	a, _ := s.GetAccount("acme")
	recs, _ := s.UsageRecords(store.UsageFilter{}, 10)
	if !a.Balance.Equal(decimal.RequireFromString("4.73")) || len(recs) != 1 {
		t.Fatalf("balance %s, %d records", a.Balance, len(recs))
	}
	y := newTask("video")
	_ = s.PutTask(y)
	got, err := s.UpdateTask(y.ID, func(t *store.Task) (store.TaskChange, error) {
		t.Status = "completed"
		return store.TaskChange{Usage: &store.UsageRecord{RequestID: "req." + y.ID, KeyID: "k1", Account: "gone", Model: "m", Provider: "p", Cost: decimal.RequireFromString("1")}}, nil
	})
	if !errors.Is(err, store.ErrUsageNotSettled) || !errors.Is(err, store.ErrNotFound) || got == nil || got.Status != "completed" {
		t.Fatalf("gone account: %+v %v", got, err)
	}
	if stored, _ := s.GetTask(y.ID); stored.Status != "completed" {
		t.Fatalf("task not stored: %+v", stored)
	}
}

// TestFinishedTasksArePruned: finished tasks older than the window go (with deliveries still in
// the outbox for them), running and recent ones stay; a file written before the finished-task
// index existed gets it built when opened, so its old tasks are pruned too.
func TestFinishedTasksArePruned(t *testing.T) {
	s, path := openTemp(t)
	now := time.Now().UTC()
	finish := func(age time.Duration, status string) *store.Task {
		x := newTask("video")
		x.Status, x.CompletedAt, x.UpdatedAt = status, now.Add(-age), now.Add(-age)
		if err := s.PutTask(x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	old, oldFailed, recent := finish(40*24*time.Hour, "completed"), finish(31*24*time.Hour, "failed"), finish(2*24*time.Hour, "completed")
	running := newTask("video")
	running.CreatedAt = now.Add(-60 * 24 * time.Hour)
	if err := s.PutTask(running); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateTask(old.ID, func(x *store.Task) (store.TaskChange, error) {
		return store.TaskChange{Callbacks: []store.Callback{{TaskID: x.ID, Account: x.Account, URL: x.CallbackURL, Body: []byte("{}")}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// An older file: no finished-task index. Reopening builds it.
	if err := s.update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketTasksDone) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.PruneTasks(now.Add(-30*24*time.Hour), 1)
	if err != nil || res.Deleted != 1 {
		t.Fatalf("first chunk: %+v %v", res, err)
	}
	if res, err = s.PruneTasks(now.Add(-30*24*time.Hour), 10); err != nil || res.Deleted != 1 {
		t.Fatalf("second chunk: %+v %v", res, err)
	}
	for _, gone := range []*store.Task{old, oldFailed} {
		if _, err := s.GetTask(gone.ID); !errors.Is(err, store.ErrTaskNotFound) {
			t.Errorf("task %s kept: %v", gone.Status, err)
		}
	}
	for _, kept := range []*store.Task{recent, running} {
		if _, err := s.GetTask(kept.ID); err != nil {
			t.Errorf("task %s (%s) pruned: %v", kept.ID, kept.Status, err)
		}
	}
	if due, _ := s.DueCallbacks(now.Add(time.Hour), 10); len(due) != 0 {
		t.Errorf("deliveries of pruned tasks left: %+v", due)
	}
	if open, _ := s.OpenTasks(10, ""); len(open) != 1 || open[0].ID != running.ID {
		t.Errorf("open tasks %+v", open)
	}
}

// TestScanDueCallbacks: the scan reads due callbacks oldest first, passes over those skip names
// (by id, before decoding), stops when take says so, and reads at most scan entries.
func TestScanDueCallbacks(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	task := newTask("video")
	if err := s.PutTask(task); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Minute)
	var cbs []store.Callback
	for i := range 6 {
		cbs = append(cbs, store.Callback{ID: "cb_" + strconv.Itoa(i), TaskID: task.ID, Account: "a", URL: "http://h" + strconv.Itoa(i%2) + "/", Body: []byte(`{}`),
			NextAt: base.Add(time.Duration(i) * time.Second)})
	}
	cbs = append(cbs, store.Callback{ID: "cb_later", TaskID: task.ID, Account: "a", URL: "http://h0/", Body: []byte(`{}`), NextAt: time.Now().Add(time.Hour)})
	if _, err := s.UpdateTask(task.ID, func(*store.Task) (store.TaskChange, error) { return store.TaskChange{Callbacks: cbs}, nil }); err != nil {
		t.Fatal(err)
	}
	var taken, skipped []string
	skip := func(id string) bool {
		if id == "cb_0" || id == "cb_2" {
			skipped = append(skipped, id)
			return true
		}
		return false
	}
	if err := s.ScanDueCallbacks(time.Now(), 100, skip, func(c store.Callback) bool { taken = append(taken, c.ID); return len(taken) < 3 }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(taken, ",") != "cb_1,cb_3,cb_4" || strings.Join(skipped, ",") != "cb_0,cb_2" {
		t.Fatalf("taken %v, skipped %v", taken, skipped)
	}
	taken = nil
	if err := s.ScanDueCallbacks(time.Now(), 2, func(string) bool { return false }, func(c store.Callback) bool { taken = append(taken, c.ID); return true }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(taken, ",") != "cb_0,cb_1" {
		t.Fatalf("a scan of 2 took %v", taken)
	}
}
