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

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// standIn is a provider family for the lifecycle's tests: create answers {"task_id"}, a query
// answers {"status", "url"}.
type standIn struct{}

func (standIn) Validate(*ir.Model, provider.Request) (provider.TaskRequest, error) {
	return provider.TaskRequest{MaxSeconds: 6}, nil
}
func (standIn) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	return &provider.Upstream{Path: "/create", Body: []byte(`{"model":"` + model + `","prompt":` + string(req["prompt"]) + `}`)}, nil
}
func (standIn) Created(status int, body []byte) (string, error) {
	var a struct {
		TaskID string `json:"task_id"`
		Code   string `json:"code"`
	}
	_ = json.Unmarshal(body, &a)
	switch {
	case a.Code != "":
		return "", &provider.TaskError{Code: a.Code, Message: "refused"}
	case status != 200 || a.TaskID == "":
		return "", fmt.Errorf("HTTP %d", status)
	}
	return a.TaskID, nil
}
func (standIn) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return &provider.Upstream{Method: "GET", Path: "/query/" + id}, nil
}
func (standIn) Queried(status int, body []byte) (provider.TaskState, error) {
	var a struct{ Status, URL string }
	if status != 200 || json.Unmarshal(body, &a) != nil {
		return provider.TaskState{}, fmt.Errorf("HTTP %d", status)
	}
	st := provider.TaskState{Status: provider.TaskStatus(a.Status), FamilyStatus: strings.ToUpper(a.Status)}
	if a.URL != "" {
		st.Videos = []provider.TaskVideo{{URL: a.URL, Seconds: decimal.RequireFromString("6"), ExpiresAt: time.Now().Add(time.Hour)}}
	}
	return st, nil
}
func (standIn) Followed(*provider.TaskState, int, []byte) error { return nil }

func init() { provider.RegisterTask("standin", standIn{}) }

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
		case r.URL.Path == "/create" && strings.Contains(string(body), "forbidden"):
			w.Write([]byte(`{"code":"content_filter"}`))
		case r.URL.Path == "/create":
			w.Write([]byte(`{"task_id":"t-` + fmt.Sprint(time.Now().UnixNano()) + `"}`))
		case strings.HasPrefix(r.URL.Path, "/query/"):
			queries.Add(1)
			mu.Lock()
			polls[r.URL.Path]++
			n := polls[r.URL.Path]
			mu.Unlock()
			if n < 2 {
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

func newService(t *testing.T) (*Service, *[]string) {
	st, err := store.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, _ := fakeEnvoy(t)
	cat := catalog{ps: map[string]*ir.Provider{
		"down": {Name: "down", Type: "standin", Host: "down.example", Port: 443, TLS: true},
		"up":   {Name: "up", Type: "standin", Host: "up.example", Port: 443, TLS: true},
	}, m: &ir.Model{ID: "clip", Family: "V1"}}
	var mu sync.Mutex
	billed := &[]string{}
	s := &Service{Store: st, Envoy: e, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Catalog: func() Catalog { return cat },
		Price: func(t *store.Task) decimal.Decimal {
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
		Request:  provider.TaskRequest{MaxSeconds: 6, CallbackURL: "https://hooks.example.com/v"}, Hold: decimal.RequireFromString("0.4")})
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
	due, _ := s.Store.DueCallbacks(time.Now(), 10)
	if len(due) != 2 || !strings.Contains(string(due[1].Body), `"status":"completed"`) || !strings.Contains(string(due[1].Body), `"cost":"0.4"`) {
		t.Fatalf("callbacks %d: %+v", len(due), due)
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
	if _, err := s.Store.CreateAccount("acme", decimal.RequireFromString("10")); err != nil {
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
	recs, err := s.Store.UsageRecords(store.UsageFilter{Account: "acme"}, 10)
	if err != nil || len(recs) != 1 || !recs[0].Cost.Equal(decimal.RequireFromString("0.4")) || recs[0].RequestID != task.RequestID+"."+task.ID {
		t.Fatalf("usage records %+v %v", recs, err)
	}
	a, err := s.Store.GetAccount("acme")
	if err != nil || !a.Balance.Equal(decimal.RequireFromString("9.6")) {
		t.Fatalf("balance %s %v", a.Balance, err)
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
	if recs, _ := s.Store.UsageRecords(store.UsageFilter{}, 10); len(recs) != 0 {
		t.Fatalf("records for a missing account: %+v", recs)
	}
}
