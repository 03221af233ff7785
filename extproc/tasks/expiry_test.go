package tasks

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// clock is a test's time: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// clockedTask is a service on a test clock (MaxAge maxAge; 0: the default) with one task
// created for prompt.
func clockedTask(t *testing.T, maxAge time.Duration, prompt string) (*Service, *[]string, *clock, *store.Task) {
	t.Helper()
	s, billed := newService(t)
	c := newClock()
	s.Now, s.MaxAge = c.now, maxAge
	task, err := s.newTask(t, prompt)
	if err != nil {
		t.Fatal(err)
	}
	return s, billed, c, task
}

// endedWith checks that task id ended failed with code, its hold released (billed failed at no
// cost, no usage record), and its callback says so.
func endedWith(t *testing.T, s *Service, billed *[]string, id, code string) *store.Task {
	t.Helper()
	got, err := s.Store.GetTask(id)
	if err != nil || got.Status != "failed" || got.Error == nil || got.Error.Code != code || got.Settled || !got.Cost.IsZero() || got.CompletedAt.IsZero() {
		t.Fatalf("task %+v (error %+v) %v, want failed with %s", got, got.Error, err, code)
	}
	if len(*billed) != 1 || (*billed)[0] != id+" failed 0" {
		t.Fatalf("billed %v, want the hold of %s released once", *billed, id)
	}
	if recs, _ := boltOf(s).UsageRecords(store.UsageFilter{Account: "acme"}, 10); len(recs) != 0 {
		t.Fatalf("usage records %+v", recs)
	}
	due, _ := boltOf(s).DueCallbacks(time.Now().Add(24*time.Hour), 10)
	last := due[len(due)-1]
	var o Object
	if err := json.Unmarshal(last.Body, &o); err != nil || o.Status != "failed" || o.Error == nil || o.Error.Code != code || o.Cost != nil {
		t.Fatalf("last callback %s", last.Body)
	}
	if s.Running() != 0 {
		t.Fatalf("%d tasks still followed", s.Running())
	}
	return got
}

// TestTaskTimesOutAtMaxAge: a task its provider never finishes fails with task_timeout once it
// is MaxAge old (from its created_at), after one last query; its hold is released, nothing is
// billed, and its callback says why.
func TestTaskTimesOutAtMaxAge(t *testing.T) {
	s, billed, c, task := clockedTask(t, time.Hour, "never fox")
	s.Charge = true
	if _, err := boltOf(s).CreateAccount("acme", decimal.RequireFromString("10")); err != nil {
		t.Fatal(err)
	}
	c.advance(59 * time.Minute)
	if got, err := s.Refresh(context.Background(), task); err != nil || got.Status != "in_progress" {
		t.Fatalf("before max_age: %+v %v", got, err)
	}
	c.advance(time.Minute)
	before := s.Queries()
	got, err := s.Refresh(context.Background(), task)
	if err != nil || got.Status != "failed" || s.Queries() != before+1 {
		t.Fatalf("at max_age: %+v %v (%d queries)", got, err, s.Queries()-before)
	}
	got = endedWith(t, s, billed, task.ID, "task_timeout")
	if !strings.Contains(got.Error.Message, "1h0m0s") || !strings.Contains(got.Error.Message, "tasks.max_age") {
		t.Fatalf("message %q does not name tasks.max_age and its value", got.Error.Message)
	}
	if o := ObjectOf(got, c.now()); o.Progress != 100 || o.CompletedAt == nil {
		t.Fatalf("object %+v", o)
	}
}

// TestTimeoutNeedsNoAnswer: a task whose provider cannot be reached still times out at MaxAge
// (the poller's backoff never carries it past its deadline), and a GET past the deadline ends
// it at once.
func TestTimeoutNeedsNoAnswer(t *testing.T) {
	s, billed, c, task := clockedTask(t, 30*time.Minute, "never fox")
	// The provider goes away: queries fail and back off up to 10 minutes, never past the deadline.
	cat := s.Catalog().(catalog)
	cat.ps["up"] = nil
	s.Catalog = func() Catalog { return cat }
	for i := 0; i < 20; i++ {
		c.advance(2 * time.Minute)
		if due := s.sched.due(c.now().Add(10 * time.Minute)); len(due) != 1 {
			t.Fatalf("not due within the backoff: %v", due)
		}
		s.sched.mu.Lock()
		next := s.sched.tasks[task.ID].next
		s.sched.mu.Unlock()
		if limit := task.CreatedAt.Add(30 * time.Minute); next.After(limit) && c.now().Before(limit) {
			t.Fatalf("next query at %s, after the deadline %s", next, limit)
		}
		if c.now().Sub(task.CreatedAt) >= 30*time.Minute {
			break
		}
		_, _ = s.Refresh(context.Background(), task)
	}
	if _, err := s.Get(context.Background(), "acme", task.ID); err != nil {
		t.Fatal(err)
	}
	endedWith(t, s, billed, task.ID, "task_timeout")
}

// TestTimeoutSurvivesRestart: max_age counts from the stored created_at, so a task that was
// running when the gateway stopped times out at its first query after the restart, with the
// default max_age of 6 h.
func TestTimeoutSurvivesRestart(t *testing.T) {
	s, _, c, task := clockedTask(t, 0, "never fox")
	c.advance(6*time.Hour + time.Second)
	var (
		mu     sync.Mutex
		billed []string
	)
	again := &Service{Store: s.Store, Envoy: s.Envoy, Log: s.Log, Now: c.now, Catalog: s.Catalog, Adapters: s.Adapters, RefreshEvery: time.Hour,
		Price: s.Price, Bill: func(t *store.Task) {
			mu.Lock()
			defer mu.Unlock()
			billed = append(billed, t.ID+" "+t.Status+" "+t.Cost.String())
		}}
	if n, err := again.Resume(); n != 1 || err != nil {
		t.Fatalf("resume: %d %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go again.Poll(ctx, 5*time.Millisecond, 2)
	for again.Running() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	endedWith(t, again, &billed, task.ID, "task_timeout")
}

// TestLateAnswerAfterTheEndIsIgnored: once a task has ended (timed out), a provider's later
// answer, even a success, changes nothing and bills nothing.
func TestLateAnswerAfterTheEndIsIgnored(t *testing.T) {
	s, billed, c, task := clockedTask(t, time.Hour, "slow fox") // completes at its 5th query
	stale, _ := s.Refresh(context.Background(), task)
	c.advance(time.Hour)
	if got, _ := s.Refresh(context.Background(), stale); got.Status != "failed" {
		t.Fatalf("not timed out: %+v", got)
	}
	for i := 0; i < 3; i++ { // a refresh that began before the timeout was stored, reaching the success
		_, _ = s.Refresh(context.Background(), stale)
	}
	endedWith(t, s, billed, task.ID, "task_timeout")
}

// TestUnknownTaskEndsAfterConfirmations: a provider saying it does not know a task ends it as
// task_expired_or_unknown only after 3 such answers in a row spanning UnknownGrace (default 1
// minute): right after a create a provider's query side may not know the task yet. An answer
// that knows the task starts the count again.
func TestUnknownTaskEndsAfterConfirmations(t *testing.T) {
	s, billed, c, lost := clockedTask(t, 0, "lost fox")
	for i, step := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 29 * time.Second} {
		c.advance(step)
		if got, err := s.Refresh(context.Background(), lost); err != nil || got.Terminal() {
			t.Fatalf("unknown answer %d (%s after the first): %+v %v", i+1, c.now().Sub(lost.CreatedAt), got, err)
		}
	}
	c.advance(time.Second) // 3 answers and more, the first a minute ago
	got, err := s.Refresh(context.Background(), lost)
	if err != nil || got.Status != "failed" {
		t.Fatalf("after a minute of unknown answers: %+v %v", got, err)
	}
	got = endedWith(t, s, billed, lost.ID, "task_expired_or_unknown")
	if !strings.Contains(got.Error.Message, "stand-in: no such task") || !strings.Contains(got.Error.Message, got.ProviderTaskID) {
		t.Fatalf("message %q lacks the provider's words or its task id", got.Error.Message)
	}

	// flaky: unknown, unknown, known (in_progress), then unknown again.
	*billed = nil
	flaky, err := s.newTask(t, "flaky fox")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		c.advance(40 * time.Second)
		if got, err := s.Refresh(context.Background(), flaky); err != nil || got.Terminal() {
			t.Fatalf("flaky query %d: %+v %v (a known answer restarts the count)", i, got, err)
		}
	}
	c.advance(40 * time.Second)
	if got, _ := s.Refresh(context.Background(), flaky); got.Status != "failed" {
		t.Fatalf("three unknown answers over 80 s after the known one: %+v", got)
	}
}
