package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds/ir"
)

// standIn is a provider family for the lifecycle's tests: create answers {"task_id"}, a query
// answers {"status", "url"}.
type standIn struct{}

func (standIn) Validate(*ir.Model, provider.Request) (task.Validated, error) {
	return task.Validated{MaxSeconds: 6}, nil
}
func (standIn) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	return &provider.Upstream{Path: "/create", Body: []byte(`{"model":"` + model + `","prompt":` + string(req["prompt"]) + `}`)}, nil
}
func (standIn) Created(status int, body []byte) (task.Created, error) {
	var a struct {
		TaskID string `json:"task_id"`
		Code   string `json:"code"`
	}
	_ = json.Unmarshal(body, &a)
	switch {
	case a.Code != "":
		return task.Created{}, &task.Error{Code: a.Code, Message: "refused"}
	case status != 200 || a.TaskID == "":
		return task.Created{}, fmt.Errorf("HTTP %d", status)
	}
	return task.Created{TaskID: a.TaskID}, nil
}
func (standIn) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return &provider.Upstream{Method: "GET", Path: "/query/" + id}, nil
}
func (standIn) Queried(status int, body []byte) (task.State, error) {
	var a struct{ Status, URL string }
	if status == 404 {
		return task.State{}, fmt.Errorf("%w: stand-in: no such task", task.ErrUnknown)
	}
	if status != 200 || json.Unmarshal(body, &a) != nil {
		return task.State{}, fmt.Errorf("HTTP %d", status)
	}
	st := task.State{Status: task.Status(a.Status), FamilyStatus: strings.ToUpper(a.Status)}
	if a.URL != "" {
		st.Videos = []task.Video{{URL: a.URL, Seconds: decimal.RequireFromString("6"), ExpiresAt: time.Now().Add(time.Hour)}}
	}
	return st, nil
}
func (standIn) Followed(*task.State, int, []byte) error { return nil }
func (standIn) Cancel(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return &provider.Upstream{Method: "POST", Path: "/cancel/" + id}, nil
}

// cancelled are the task ids fakeEnvoy's providers were asked to cancel.
var cancelled sync.Map

// standIns are the stand-in families' adapters, and the real ones.
func standIns(family string) (task.Adapter, error) {
	switch family {
	case "standin":
		return standIn{}, nil
	case "syncstandin":
		return syncStandIn{}, nil
	}
	return task.For(family)
}

type catalog struct {
	ps map[string]*ir.Provider
	m  *ir.Model
}

func (c catalog) Provider(n string) *ir.Provider { return c.ps[n] }
func (c catalog) Model(id string) *ir.Model {
	if id == c.m.ID {
		return c.m
	}
	return nil
}

// fakeEnvoy stands for Envoy's internal listener in front of two providers: "down" answers
// every create with 503; "up" creates tasks that run for two queries and then complete.
func fakeEnvoy(t *testing.T) (*Envoy, *atomic.Int32) {
	var queries atomic.Int32
	var mu sync.Mutex
	polls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		cluster := r.Header.Get(ir.ClusterHeader)
		switch {
		case cluster == ir.ClusterPrefix+"down":
			w.WriteHeader(503)
		case cluster == ir.ClusterPrefix+"badkey": // a refused credential, in a 400 (as Gemini does)
			w.WriteHeader(400)
			w.Write([]byte(`{"code":"provider_auth_failed"}`))
		case r.URL.Path == "/create" && strings.Contains(string(body), "forbidden"):
			w.Write([]byte(`{"code":"content_filter"}`))
		case r.URL.Path == "/create":
			// The task id starts with the prompt's behaviour word, which the queries read.
			kind := "t"
			for _, k := range []string{"blocked", "slow", "never", "lost", "flaky"} {
				if strings.Contains(string(body), k) {
					kind = k
					break
				}
			}
			w.Write([]byte(`{"task_id":"` + kind + `-` + fmt.Sprint(time.Now().UnixNano()) + `"}`))
		case strings.HasPrefix(r.URL.Path, "/cancel/"):
			cancelled.Store(strings.TrimPrefix(r.URL.Path, "/cancel/"), true)
		case strings.HasPrefix(r.URL.Path, "/query/"):
			queries.Add(1)
			mu.Lock()
			polls[r.URL.Path]++
			n := polls[r.URL.Path]
			mu.Unlock()
			switch {
			case strings.Contains(r.URL.Path, "/never-"), strings.Contains(r.URL.Path, "/flaky-") && n == 3:
				w.Write([]byte(`{"status":"in_progress"}`)) // never: a task the provider never finishes
				return
			case strings.Contains(r.URL.Path, "/lost-"), strings.Contains(r.URL.Path, "/flaky-"):
				w.WriteHeader(404) // the provider does not know the task (flaky: but at its 3rd query)
				return
			}
			if n < 2 || (strings.Contains(r.URL.Path, "/slow-") && n < 5) {
				w.Write([]byte(`{"status":"in_progress"}`))
			} else {
				w.Write([]byte(`{"status":"completed","url":"https://cdn.example/v.mp4"}`))
			}
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return &Envoy{Addr: strings.TrimPrefix(srv.URL, "http://")}, &queries
}

// boltOf is the bbolt store under a test's service.
func boltOf(s *Service) *bbolt.Store { return s.Store.(*bbolt.Store) }

func newService(t *testing.T) (*Service, *[]string) {
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, _ := fakeEnvoy(t)
	cat := catalog{ps: map[string]*ir.Provider{
		"down": {Name: "down", Type: "standin", Host: "down.example", Port: 443, TLS: true},
		"up":   {Name: "up", Type: "standin", Host: "up.example", Port: 443, TLS: true},
	}, m: &ir.Model{ID: "clip", Family: "standin"}}
	var mu sync.Mutex
	billed := &[]string{}
	s := &Service{Store: st, Envoy: e, Log: slog.New(slog.DiscardHandler), Now: time.Now, Adapters: standIns,
		Catalog: func() Catalog { return cat },
		Price: func(t *store.Task) decimal.Decimal {
			if t.Status != "completed" { // a failed task: the tokens its provider reported (none here)
				return decimal.Zero
			}
			return decimal.RequireFromString("0.1").Add(decimal.RequireFromString("0.05").Mul(Seconds(t)))
		},
		Bill: func(t *store.Task) {
			mu.Lock()
			defer mu.Unlock()
			*billed = append(*billed, t.ID+" "+t.Status+" "+t.Cost.String())
		},
	}
	return s, billed
}

func (s *Service) newTask(t *testing.T, prompt string) (*store.Task, error) {
	cat := s.Catalog()
	return s.Create(context.Background(), NewTask{Kind: "video", Account: "acme", KeyID: "k1", Model: cat.Model("clip"),
		Attempts: []Attempt{{Provider: cat.Provider("down"), Model: "c-1"}, {Provider: cat.Provider("up"), Model: "c-1"}},
		Body:     provider.Request{"prompt": json.RawMessage(`"` + prompt + `"`)},
		Request:  task.Validated{MaxSeconds: 6, CallbackURL: "https://hooks.example.com/v"}, Hold: decimal.RequireFromString("0.4")})
}

// TestTaskLifecycle: a create that the first provider fails goes to the next; the task is
// stored before its id is returned; another account cannot see it; refreshes move it through
// its statuses, each change with a callback in the outbox; completion bills once, at the price
// of what was produced, and the cost shows in the object.
func TestTaskLifecycle(t *testing.T) {
	s, billed := newService(t)
	task, err := s.newTask(t, "a fox")
	if err != nil || task.Provider != "up" || task.Status != "queued" {
		t.Fatalf("create: %+v %v", task, err)
	}
	if _, err := s.Store.GetTask(task.ID); err != nil {
		t.Fatalf("not stored: %v", err)
	}
	var te *Error
	if _, err := s.Get(context.Background(), "other", task.ID); !errors.As(err, &te) || te.Kind != KindNotFound {
		t.Fatalf("other account: %v", err)
	}
	if _, err := s.newTask(t, "forbidden"); !errors.As(err, &te) || te.Kind != KindBadRequest || te.Code != "content_filter" {
		t.Fatalf("refused request: %v", err)
	}
	got, err := s.Get(context.Background(), "acme", task.ID)
	if err != nil || got.Status != "in_progress" || got.Progress != 50 {
		t.Fatalf("first refresh %+v %v", got, err)
	}
	got, _ = s.Get(context.Background(), "acme", task.ID)
	o := ObjectOf(got, time.Now())
	if got.Status != "completed" || o.Cost == nil || *o.Cost != "0.4" || o.Result == nil || o.Result.Videos[0].URL == "" || o.Seconds != "6" {
		t.Fatalf("completed %+v object %+v", got, o)
	}
	got, _ = s.Get(context.Background(), "acme", task.ID) // terminal: answered from the store
	if len(*billed) != 1 || (*billed)[0] != task.ID+" completed 0.4" {
		t.Fatalf("billed %v", *billed)
	}
	due, _ := boltOf(s).DueCallbacks(time.Now(), 10)
	if len(due) != 2 || !strings.Contains(string(due[1].Body), `"status":"completed"`) || !strings.Contains(string(due[1].Body), `"cost":"0.4"`) {
		t.Fatalf("callbacks %d: %+v", len(due), due)
	}
}

// TestUnrecordedTaskIsCancelled: a task the provider accepted and the store could not record
// (its disk failing: every write refused) is cancelled at the provider, which allows it, and
// the client is told so with 503 store_unavailable, never given an id nobody can look up.
func TestUnrecordedTaskIsCancelled(t *testing.T) {
	s, billed := newService(t)
	if err := boltOf(s).Close(); err != nil { // from here every write fails, as a broken disk's would
		t.Fatal(err)
	}
	task, err := s.newTask(t, "a fox")
	var te *Error
	if !errors.As(err, &te) || te.Kind != KindUnavailable || te.Code != "store_unavailable" || !strings.Contains(te.Message, "it was cancelled at the provider") {
		t.Fatalf("create the store cannot record: %+v %v", task, err)
	}
	n := 0
	cancelled.Range(func(k, _ any) bool { n++; return strings.HasPrefix(k.(string), "t-") })
	if n != 1 || len(*billed) != 0 {
		t.Fatalf("%d cancels at the provider, billed %v: want the one task cancelled, nothing billed", n, *billed)
	}
}

// TestPollerCompletesTasksNobodyAsksFor: the background poller refreshes due tasks until they
// finish.
func TestPollerCompletesTasksNobodyAsksFor(t *testing.T) {
	s, billed := newService(t)
	s.RefreshEvery = 10 * time.Millisecond
	task, err := s.newTask(t, "a fox")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Poll(ctx, 10*time.Millisecond, 4); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := s.Store.GetTask(task.ID)
		if got.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still %s", got.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if open, _ := s.Store.OpenTasks(10, ""); len(open) != 0 || len(*billed) != 1 {
		t.Fatalf("open %d billed %v", len(open), *billed)
	}
}

// TestCompletionCommitsItsBill: the completion of a task and its usage record commit in one
// transaction. The gateway dying right after that commit (here: Bill, the in-memory step that
// follows it, never runs) leaves the task billed exactly once in the store, and refreshing
// again bills nothing more.
func TestCompletionCommitsItsBill(t *testing.T) {
	s, _ := newService(t)
	s.Charge = true
	s.Bill = func(*store.Task) {} // the process is gone before the ledger hears of it
	if _, err := boltOf(s).CreateAccount("acme", decimal.RequireFromString("10")); err != nil {
		t.Fatal(err)
	}
	task, err := s.newTask(t, "a fox")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.Refresh(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := boltOf(s).UsageRecords(store.UsageFilter{Account: "acme"}, 10)
	if err != nil || len(recs) != 1 || !recs[0].Cost.Equal(decimal.RequireFromString("0.4")) || recs[0].RequestID != task.RequestID+"."+task.ID {
		t.Fatalf("usage records %+v %v", recs, err)
	}
	a, err := boltOf(s).GetAccount("acme")
	if err != nil || !a.Balance.Equal(decimal.RequireFromString("9.6")) {
		t.Fatalf("balance %s %v", a.Balance, err)
	}
}

// TestOverReportedTaskIsBilledItsHold: a provider reporting far more than the task's worst
// case (DashScope's usage.duration of 1,000 s for a 5 s video) bills the hold, not the report:
// the task's cost and its usage record say the hold, the account is not taken below it.
func TestOverReportedTaskIsBilledItsHold(t *testing.T) {
	s, billed := newService(t)
	s.Charge = true
	s.Price = func(*store.Task) decimal.Decimal { return decimal.RequireFromString("100") }
	var logs strings.Builder
	s.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := boltOf(s).CreateAccount("acme", decimal.RequireFromString("0.6")); err != nil {
		t.Fatal(err)
	}
	task, err := s.newTask(t, "a fox") // holds 0.4
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if task, err = s.Refresh(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	if task.Status != "completed" || !task.Cost.Equal(decimal.RequireFromString("0.4")) || !task.Overage.Equal(decimal.RequireFromString("99.6")) {
		t.Fatalf("task %s cost %s overage %s, want completed at its hold 0.4, 99.6 over", task.Status, task.Cost, task.Overage)
	}
	recs, err := boltOf(s).UsageRecords(store.UsageFilter{Account: "acme"}, 10)
	if err != nil || len(recs) != 1 || !recs[0].Cost.Equal(decimal.RequireFromString("0.4")) || !recs[0].Overage.Equal(decimal.RequireFromString("99.6")) {
		t.Fatalf("usage records %+v %v", recs, err)
	}
	if a, _ := boltOf(s).GetAccount("acme"); !a.Balance.Equal(decimal.RequireFromString("0.2")) {
		t.Fatalf("balance %s, want 0.2", a.Balance)
	}
	if len(*billed) != 1 || (*billed)[0] != task.ID+" completed 0.4" {
		t.Fatalf("the ledger was told %v", *billed)
	}
	if l := logs.String(); !strings.Contains(l, `level=WARN msg="OVERAGE`) || !strings.Contains(l, "provider=up") ||
		!strings.Contains(l, "metered=100 held=0.4") || !strings.Contains(l, "model=clip") {
		t.Fatalf("log %q: want a WARN naming the provider, the model, what was metered and held", l)
	}
}

// TestCompletionOfAGoneAccount: an account deleted while its task ran cannot be debited; the
// task still completes (nothing is lost) and the refusal is logged.
func TestCompletionOfAGoneAccount(t *testing.T) {
	s, billed := newService(t)
	s.Charge = true
	task, err := s.newTask(t, "a fox")
	if err != nil {
		t.Fatal(err)
	}
	var got *store.Task
	for i := 0; i < 3; i++ {
		if got, err = s.Refresh(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}
	if got.Status != "completed" || len(*billed) != 1 {
		t.Fatalf("task %+v billed %v", got, *billed)
	}
	if recs, _ := boltOf(s).UsageRecords(store.UsageFilter{}, 10); len(recs) != 0 {
		t.Fatalf("records for a missing account: %+v", recs)
	}
}

// TestQueriesThatChangeNothingWriteNothing: a running task queried again with the same answer
// leaves its record untouched (no transaction, no fsync); the schedule in memory still moves,
// so a GET inside RefreshEvery answers from the store without a query.
func TestQueriesThatChangeNothingWriteNothing(t *testing.T) {
	s, _ := newService(t)
	s.RefreshEvery = time.Hour
	task, err := s.newTask(t, "slow fox")
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Refresh(context.Background(), task)
	if err != nil || first.Status != "in_progress" {
		t.Fatalf("first query: %+v %v", first, err)
	}
	for i := 0; i < 2; i++ {
		again, err := s.Refresh(context.Background(), first)
		if err != nil || again.Status != "in_progress" {
			t.Fatalf("query %d: %+v %v", i, again, err)
		}
	}
	stored, _ := s.Store.GetTask(task.ID)
	if !stored.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("an unchanged query rewrote the task: updated %s, then %s", first.UpdatedAt, stored.UpdatedAt)
	}
	before := s.Queries()
	if _, err := s.Get(context.Background(), "acme", task.ID); err != nil || s.Queries() != before {
		t.Fatalf("GET inside RefreshEvery queried the provider: %v, %d queries", err, s.Queries()-before)
	}
}

// TestResumeSchedulesRunningTasks: a service started over a store (a restart) follows every
// running task of it, due at once, and forgets them as they end.
func TestResumeSchedulesRunningTasks(t *testing.T) {
	s, _ := newService(t)
	for _, p := range []string{"a fox", "a hare"} {
		if _, err := s.newTask(t, p); err != nil {
			t.Fatal(err)
		}
	}
	again := &Service{Store: s.Store, Envoy: s.Envoy, Log: s.Log, Now: time.Now, Catalog: s.Catalog, Adapters: s.Adapters, RefreshEvery: time.Hour}
	if n, err := again.Resume(); n != 2 || err != nil || again.Running() != 2 {
		t.Fatalf("resume: %d %v, running %d", n, err, again.Running())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go again.Poll(ctx, 5*time.Millisecond, 2)
	// Each task needs two queries (in_progress, then completed); the second is made due at once
	// rather than an hour later.
	for again.Running() > 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
		again.sched.mu.Lock()
		for _, p := range again.sched.tasks {
			p.next = time.Time{}
		}
		again.sched.mu.Unlock()
	}
	if again.Running() != 0 {
		t.Fatalf("%d tasks still followed", again.Running())
	}
	open, _ := s.Store.OpenTasks(10, "")
	if len(open) != 0 {
		t.Fatalf("open tasks left: %d", len(open))
	}
}

// TestPollingInterval: young tasks are queried every RefreshEvery, older ones at a tenth of
// their age up to 15 s; failing providers back off from 5 s to 10 min.
func TestPollingInterval(t *testing.T) {
	for _, c := range []struct{ age, want time.Duration }{
		{0, 3 * time.Second}, {20 * time.Second, 3 * time.Second}, {60 * time.Second, 6 * time.Second},
		{10 * time.Minute, 15 * time.Second}, {3 * time.Hour, 15 * time.Second},
	} {
		if got := interval(c.age, 3*time.Second); got != c.want {
			t.Errorf("interval at age %s = %s, want %s", c.age, got, c.want)
		}
	}
	for f, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 7: 320 * time.Second, 8: 10 * time.Minute, 50: 10 * time.Minute} {
		if got := backoff(f); got != want {
			t.Errorf("backoff(%d) = %s, want %s", f, got, want)
		}
	}
}

// syncStandIn answers a create with the finished task (as Gemini does): a PNG's bytes inline,
// or, for a prompt with "blocked", a failed task whose tokens the provider billed anyway.
type syncStandIn struct{ standIn }

func (syncStandIn) Created(status int, body []byte) (task.Created, error) {
	if status != 200 {
		return task.Created{}, fmt.Errorf("HTTP %d", status)
	}
	if strings.Contains(string(body), "blocked") {
		return task.Created{Done: &task.State{Status: task.Failed, FamilyStatus: "SAFETY",
			Error: &task.Error{Code: "content_filter", Message: "blocked"}, PromptTokens: 10}}, nil
	}
	return task.Created{Done: &task.State{Status: task.Completed, FamilyStatus: "STOP", Text: "here",
		Images:       []task.Image{{Data: []byte("\x89PNG fake"), MIMEType: "image/png", Width: 2, Height: 2}},
		PromptTokens: 10, CompletionTokens: 3}}, nil
}

// TestTaskFinishedAtCreation: a provider that answers with the finished task gives a task born
// completed: stored with its image bytes (read back by GetTask, rendered as b64_json, withheld
// once expired), billed in the same transaction, its callback enqueued, never polled. A task
// born failed is billed only the tokens the provider reported, no images.
func TestTaskFinishedAtCreation(t *testing.T) {
	s, billed := newService(t)
	s.Charge, s.ImageLife = true, time.Hour
	cat := s.Catalog().(catalog)
	cat.m = &ir.Model{ID: "clip", Family: "syncstandin"}
	s.Catalog = func() Catalog { return cat }
	s.Price = func(t *store.Task) decimal.Decimal {
		cost := decimal.NewFromInt(t.PromptTokens).Mul(decimal.RequireFromString("0.001"))
		if t.Status == "completed" {
			cost = cost.Add(decimal.NewFromInt(Images(t)).Mul(decimal.RequireFromString("0.04")))
		}
		return cost
	}
	if _, err := boltOf(s).CreateAccount("acme", decimal.RequireFromString("1")); err != nil {
		t.Fatal(err)
	}
	create := func(prompt string) *store.Task {
		task, err := s.Create(context.Background(), NewTask{Kind: "image", Account: "acme", KeyID: "k1", Model: cat.m,
			Attempts: []Attempt{{Provider: cat.Provider("up"), Model: "img-1"}},
			Body:     provider.Request{"prompt": json.RawMessage(`"` + prompt + `"`)},
			Request:  task.Validated{MaxImages: 1, CallbackURL: "https://hooks.example.com/i"}, Hold: decimal.RequireFromString("0.1")})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	done := create("a fox")
	if done.Status != "completed" || s.Running() != 0 || !done.Cost.Equal(decimal.RequireFromString("0.05")) {
		t.Fatalf("born completed: %+v, running %d", done, s.Running())
	}
	got, err := s.Get(context.Background(), "acme", done.ID)
	if err != nil || len(got.Images) != 1 || string(got.Images[0].Data) != "\x89PNG fake" {
		t.Fatalf("read back: %+v %v", got, err)
	}
	o := ObjectOf(got, time.Now())
	if o.Result == nil || o.Result.Text != "here" || o.Result.Images[0].B64JSON != "iVBORyBmYWtl" || o.Cost == nil || *o.Cost != "0.05" {
		t.Fatalf("object %+v", o.Result)
	}
	if later := ObjectOf(got, time.Now().Add(2*time.Hour)); later.Result.Images[0].B64JSON != "" || !later.Result.Images[0].Expired {
		t.Fatalf("after its expiry %+v", later.Result.Images[0])
	}
	failed := create("blocked fox")
	if failed.Status != "failed" || failed.Error.Code != "content_filter" || !failed.Cost.Equal(decimal.RequireFromString("0.01")) || !failed.Settled {
		t.Fatalf("born failed: %+v", failed)
	}
	recs, _ := boltOf(s).UsageRecords(store.UsageFilter{Account: "acme"}, 10)
	a, _ := boltOf(s).GetAccount("acme")
	if len(recs) != 2 || !a.Balance.Equal(decimal.RequireFromString("0.94")) || recs[0].PromptTokens != 10 {
		t.Fatalf("records %+v balance %s", recs, a.Balance)
	}
	due, _ := boltOf(s).DueCallbacks(time.Now(), 10)
	if len(due) != 2 || strings.Contains(string(due[0].Body), "b64_json") {
		t.Fatalf("callbacks (no inline bytes in them): %d %s", len(due), due[0].Body)
	}
	if len(*billed) != 0 { // Bill is the caller's for a task born finished (it holds the hold)
		t.Fatalf("billed by the service: %v", *billed)
	}
	// The kept bytes go when they expire; the task stays and says so.
	if res, err := boltOf(s).PruneImages(time.Now().Add(2*time.Hour), 10); err != nil || res.Deleted != 1 {
		t.Fatalf("prune images: %+v %v", res, err)
	}
	got, _ = s.Store.GetTask(done.ID)
	if got.Images[0].Data != nil || !ObjectOf(got, time.Now().Add(2*time.Hour)).Result.Images[0].Expired {
		t.Fatalf("after pruning %+v", got.Images[0])
	}
}

// TestRefusedCredentialInA400FallsBack: a provider that refuses the gateway's credential with
// a 400 (Gemini's API_KEY_INVALID), which its adapter reads as provider_auth_failed, passes the
// task to the next provider instead of blaming the client's request.
func TestRefusedCredentialInA400FallsBack(t *testing.T) {
	s, _ := newService(t)
	cat := s.Catalog().(catalog)
	cat.ps["badkey"] = &ir.Provider{Name: "badkey", Type: "standin", Host: "bad.example", Port: 443, TLS: true}
	task, err := s.Create(context.Background(), NewTask{Kind: "video", Account: "acme", KeyID: "k1", Model: cat.m,
		Attempts: []Attempt{{Provider: cat.Provider("badkey"), Model: "c-1"}, {Provider: cat.Provider("up"), Model: "c-1"}},
		Body:     provider.Request{"prompt": json.RawMessage(`"a fox"`)}, Request: task.Validated{MaxSeconds: 6}})
	if err != nil || task.Provider != "up" {
		t.Fatalf("create: %+v %v", task, err)
	}
}

// failingTasks is a task store whose first n updates fail as a full disk's would.
type failingTasks struct {
	store.Tasks
	mu sync.Mutex
	n  int
}

func (f *failingTasks) UpdateTask(id string, fn func(t *store.Task) (store.TaskChange, error)) (*store.Task, error) {
	f.mu.Lock()
	fail := f.n > 0
	f.n--
	f.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("%w: no space left on device", store.ErrUnavailable)
	}
	return f.Tasks.UpdateTask(id, fn)
}

var _ store.Tasks = (*failingTasks)(nil)

// logBuffer is a log that tests read while the code under test writes it.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPollerStoreFailureIsLoggedAndRetried: a provider's answer the store cannot record (its
// first two writes fail) is logged, with the task, and the poller queries and writes it again
// at the task's next turn until it is stored: the task completes, billed once.
func TestPollerStoreFailureIsLoggedAndRetried(t *testing.T) {
	s, billed := newService(t)
	var log logBuffer
	s.Log = slog.New(slog.NewTextHandler(&log, nil))
	s.RefreshEvery = 10 * time.Millisecond
	task, err := s.newTask(t, "a fox")
	if err != nil {
		t.Fatal(err)
	}
	s.Store = &failingTasks{Tasks: s.Store, n: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Poll(ctx, 10*time.Millisecond, 4); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for got, _ := s.Store.GetTask(task.ID); !got.Terminal(); got, _ = s.Store.GetTask(task.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("task still %s: the poller dropped it after the store failed", got.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if n := strings.Count(log.String(), "level=ERROR msg=\"task: its new state could not be stored"); n != 2 || !strings.Contains(log.String(), "task="+task.ID) {
		t.Fatalf("%d store failures logged, want 2; log:\n%s", n, log.String())
	}
	if len(*billed) != 1 {
		t.Fatalf("billed %v", *billed)
	}
}

// TestCreateStopsWhenTheClientIsGone: a client that goes away while the first provider is
// answering its create (the request's context ends) gets no task from the next provider; the
// call in flight runs to its answer, so a task a provider accepted would still be recorded.
func TestCreateStopsWhenTheClientIsGone(t *testing.T) {
	s, _ := newService(t)
	var mu sync.Mutex
	var creates []string
	inFlightCut := make(chan bool, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // read whole: the server then notices a caller that hangs up
		cluster := strings.TrimPrefix(r.Header.Get(ir.ClusterHeader), ir.ClusterPrefix)
		mu.Lock()
		creates = append(creates, cluster)
		mu.Unlock()
		if cluster == "slow" { // answers 503 after a while, unless its caller hangs up first
			select {
			case <-time.After(300 * time.Millisecond):
				inFlightCut <- false
				w.WriteHeader(503)
			case <-r.Context().Done():
				inFlightCut <- true
			}
			return
		}
		w.Write([]byte(`{"task_id":"t-1"}`))
	}))
	defer srv.Close()
	s.Envoy = &Envoy{Addr: strings.TrimPrefix(srv.URL, "http://")}
	slow := &ir.Provider{Name: "slow", Type: "standin", Host: "slow.example", Port: 443, TLS: true}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel) // the client goes away during the first attempt
	cat := s.Catalog()
	task, err := s.Create(ctx, NewTask{Kind: "video", Account: "acme", KeyID: "k1", Model: cat.Model("clip"),
		Attempts: []Attempt{{Provider: slow, Model: "c-1"}, {Provider: cat.Provider("up"), Model: "c-1"}},
		Body:     provider.Request{"prompt": json.RawMessage(`"a fox"`)}, Hold: decimal.RequireFromString("0.4")})
	mu.Lock()
	defer mu.Unlock()
	if err == nil || task != nil || len(creates) != 1 || creates[0] != "slow" {
		t.Fatalf("a create whose client left during its first attempt: task %+v, error %v, creates sent %v (want only the first)", task, err, creates)
	}
	if <-inFlightCut {
		t.Fatal("the attempt in flight was cut when the client left: a task the provider accepted would be lost")
	}
}

// TestUnknownTaskIDQuotedWhole: the id a not-found answer quotes is cut at a character
// boundary, never inside one (docs/api.md#errors: messages are JSON in UTF-8).
func TestUnknownTaskIDQuotedWhole(t *testing.T) {
	s, _ := newService(t)
	id := "t" + strings.Repeat("é", 100) // two bytes a character: the cut at 80 splits one
	_, err := s.Get(context.Background(), "acme", id)
	var te *Error
	if !errors.As(err, &te) || te.Kind != KindNotFound {
		t.Fatalf("unknown id: %v", err)
	}
	if !utf8.ValidString(te.Message) || strings.Contains(te.Message, `\x`) || strings.Contains(te.Message, id) {
		t.Errorf("the id is not clipped to whole characters: %s", te.Message)
	}
}
