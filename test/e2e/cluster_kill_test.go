package e2e

// A replica killed with SIGKILL under load (issue 29, "kill -9 of a replica under load"): three
// replicas, each with its own Envoy, on one database; the killed one restarted under its own
// name on its own spool (docs/money.md#spool).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// killLoad sends requests from workers round-robin across the replicas that are up, until
// stop: what each request id got, by outcome.
type killLoad struct {
	gs       []*gateway
	down     []atomic.Bool
	mu       sync.Mutex
	answered map[string]int    // 200: the replica that answered
	refused  map[string]int    // 403 spend_limit_exceeded
	cut      map[string]string // on the killed replica around the kill: what it got
	failed   []string          // anything else: fails the test
	afterAB  atomic.Int64      // answered by the others while one is down
	stop     chan struct{}
	done     sync.WaitGroup
}

// try sends one request with the client request id id: status and code, or the transport's
// error (a killed replica's Envoy drops its connections).
func try(g *gateway, key, id string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("authorization", "Bearer "+key)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-request-id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e apiError
	_ = jsonUnmarshal(string(raw), &e)
	return resp.StatusCode, e.Error.Code, nil
}

func startKillLoad(gs []*gateway, key string, workers int, pace time.Duration) *killLoad {
	l := &killLoad{gs: gs, down: make([]atomic.Bool, len(gs)), answered: map[string]int{}, refused: map[string]int{},
		cut: map[string]string{}, stop: make(chan struct{})}
	for w := range workers {
		l.done.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-time.After(pace):
				}
				r := (w + i) % len(gs)
				for l.down[r].Load() {
					r = (r + 1) % len(gs)
				}
				l.one(r, key, fmt.Sprintf("w%d-%d", w, i))
			}
		})
	}
	return l
}

// one sends a request to replica r and files its outcome.
func (l *killLoad) one(r int, key, id string) {
	l.mu.Lock()
	g := l.gs[r]
	l.mu.Unlock()
	status, code, err := try(g, key, id)
	wasDown := l.down[r].Load() // marked down before the kill: anything it got was cut
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil && status == 200:
		l.answered[id] = r
		if l.anyDown() && !wasDown {
			l.afterAB.Add(1)
		}
	case err == nil && status == 403 && code == "spend_limit_exceeded":
		l.refused[id] = r
	case wasDown:
		l.cut[id] = fmt.Sprintf("%d %s %v", status, code, err)
	default:
		l.failed = append(l.failed, fmt.Sprintf("%s on replica %d: %d %s %v", id, r+1, status, code, err))
	}
}

func (l *killLoad) anyDown() bool {
	for i := range l.down {
		if l.down[i].Load() {
			return true
		}
	}
	return false
}

func (l *killLoad) end() {
	close(l.stop)
	l.done.Wait()
}

// dbRecord is a usage record as the database keeps it.
type dbRecord struct {
	cost      decimal.Decimal
	estimated bool
	reason    string
}

// dbRecords reads account's records from the database by client request id; a request
// recorded twice fails the test.
func dbRecords(t *testing.T, dsn, account string) map[string]dbRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	out := map[string]dbRecord{}
	rows, _ := conn.Query(ctx, "select request_id, cost::text, estimated, estimate_reason from usage_records where account = $1", account)
	var id, cost, reason string
	var est bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &cost, &est, &reason}, func() error {
		client, _, _ := strings.Cut(id, ".")
		if _, dup := out[client]; dup {
			return fmt.Errorf("request %s recorded twice", client)
		}
		out[client] = dbRecord{decimal.RequireFromString(cost), est, reason}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// dbScalar runs a query of one text column on dsn.
func dbScalar(dsn, query string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var s string
	err = conn.QueryRow(ctx, query, args...).Scan(&s)
	return s, err
}

// TestClusterKill9UnderLoad: three replicas under a bounded concurrent load on one key with a
// monthly limit of $10 and an account of $100, each request costing exactly its hold ($0.01).
// Replica C is killed with SIGKILL mid-load; A and B keep serving; C is started again under its
// own name on its own spool. Then: every answered request is recorded in the database exactly
// once; a request cut by the kill has at most a gateway_restart estimate (no other record);
// nothing is recorded twice; the balance is the credits minus the records; the key's month
// spend never passes its limit, and once the load has run into the limit, requests one at a
// time spend it to the cent (C's slices came back: at its restart, or at its lease's end).
func TestClusterKill9UnderLoad(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	// Every answer takes 30 ms, so requests are in flight when C dies and each one's hold is
	// durable in its spool before its answer.
	delays := make([]fakeupstream.Fault, 20000)
	for i := range delays {
		delays[i] = fakeupstream.Fault{Delay: 30 * time.Millisecond}
	}
	fake.Script(delays...)
	dsn := pgDSN(t)
	body := "billing: {enabled: true}\n" + catalog(fake.URL(), `pricing: {request: "0.01"}`)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	start := func(i int) *gateway {
		return startWith(t, harness.Options{Dir: dirs[i], Body: body, Env: []string{"FAKE_PROVIDER_KEY=" + providerKey,
			"TOLLWAY_STORE_DRIVER=postgres", "TOLLWAY_STORE_DSN=" + dsn,
			fmt.Sprintf("TOLLWAY_REPLICA_NAME=replica-%c", 'a'+i), "TOLLWAY_REPLICA_LEASE=" + clusterLease.String()}})
	}
	gs := []*gateway{start(0), start(1), start(2)}
	l0 := append([]*gateway(nil), gs...)
	if err := gs[0].NewAccount(context.Background(), "acme", "100"); err != nil {
		t.Fatal(err)
	}
	key := gs[0].newKey("acme", "--monthly-limit", "10")
	knowsKey(t, gs, key)

	l := startKillLoad(l0, key, 6, 20*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	l.down[2].Store(true)
	gs[2].Kill()
	killed := time.Now()
	// When C's slices leave the database: at its lease's end (reclaimed) or its restart.
	recovered := make(chan time.Duration, 1)
	go func() {
		for time.Since(killed) < 60*time.Second {
			n, err := dbScalar(dsn, "select count(*)::text from budget_leases where replica = 'replica-c' and amount > 0")
			if err == nil && n == "0" {
				recovered <- time.Since(killed)
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		recovered <- -1
	}()
	time.Sleep(time.Second)
	gs[2] = start(2) // its own spool: shipped, its cut holds billed, before it reads balances
	l.mu.Lock()
	l.gs[2] = gs[2]
	l.mu.Unlock()
	restarted := time.Since(killed)
	l.down[2].Store(false)
	servedWhileDown := l.afterAB.Load()
	// Run on until the load has met the limit (bounded).
	waitFor(t, "the load running into the key's limit", 60*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.refused) >= 30
	})
	l.end()
	if len(l.failed) > 0 {
		t.Fatalf("%d requests got neither 200 nor 403 spend_limit_exceeded on a live replica, e.g. %s", len(l.failed), l.failed[0])
	}
	if servedWhileDown < 1 {
		t.Fatal("no request answered by A or B while C was down")
	}
	// Requests one at a time round-robin spend what is left to the cent.
	sweep := 0
	for refusals := 0; refusals < 3 && sweep < 200; sweep++ {
		id := fmt.Sprintf("sweep-%d", sweep)
		status, code, err := try(gs[sweep%3], key, id)
		switch {
		case err == nil && status == 200:
			l.answered[id], refusals = sweep%3, 0
		case err == nil && status == 403 && code == "spend_limit_exceeded":
			refusals++
		default:
			t.Fatalf("sweep request %s: %d %s %v", id, status, code, err)
		}
	}

	for i, g := range gs {
		waitFor(t, fmt.Sprintf("replica %d's spool shipped", i+1), 20*time.Second, func() bool {
			sp, _ := g.storeState()["spool"].(map[string]any)
			return sp["records"] == float64(0)
		})
	}
	recs := dbRecords(t, dsn, "acme")
	sum, estimates := decimal.Zero, 0
	for id, r := range recs {
		sum = sum.Add(r.cost)
		_, ok := l.answered[id]
		_, cut := l.cut[id]
		switch {
		case ok && r.estimated && r.reason != "gateway_restart":
			t.Errorf("answered request %s recorded as an estimate (%s)", id, r.reason)
		case ok:
		case cut && r.estimated && r.reason == "gateway_restart":
			estimates++
		case strings.HasPrefix(id, "warm-"):
		default:
			t.Errorf("a record of request %s (estimated %v %q), which was neither answered nor cut by the kill", id, r.estimated, r.reason)
		}
	}
	for id, r := range l.answered {
		if _, ok := recs[id]; !ok {
			t.Errorf("request %s was answered by replica %d and has no record in the database", id, r+1)
		}
	}
	balance, err := dbScalar(dsn, "select balance::text from accounts where id = 'acme'")
	if err != nil {
		t.Fatal(err)
	}
	if want := decimal.RequireFromString("100").Sub(sum); !decimal.RequireFromString(balance).Equal(want) {
		t.Fatalf("balance %s, want 100 - %s = %s", balance, sum, want)
	}
	spent, err := dbScalar(dsn, "select coalesce(sum(spent), 0)::text from spend_month where key_id = (select key_id from usage_records where account = 'acme' limit 1)")
	if err != nil {
		t.Fatal(err)
	}
	limit := decimal.RequireFromString("10")
	if s := decimal.RequireFromString(spent); s.GreaterThan(limit) || !sum.Equal(s) {
		t.Fatalf("the key's month spend %s (records %s), limit %s", s, sum, limit)
	}
	if !sum.Equal(limit) {
		t.Fatalf("records cost %s once the limit was met one request at a time, want the whole %s: slices left stranded", sum, limit)
	}
	took := <-recovered
	if took < 0 {
		t.Fatal("the killed replica's budget slices never left the database")
	}
	t.Logf("kill -9 of replica C under load: %d answered (%d by A and B while C was down), %d refused 403 spend_limit_exceeded, %d cut by the kill (%d billed as gateway_restart estimates), %d swept one at a time; "+
		"C back %v after the kill, its slices out of the database %v after; %d records, each once, cost %s = the limit; balance %s",
		len(l.answered), servedWhileDown, len(l.refused), len(l.cut), estimates, sweep, restarted.Round(time.Millisecond), took.Round(time.Millisecond), len(recs), sum, balance)
}
