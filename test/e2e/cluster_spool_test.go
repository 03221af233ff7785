package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// withPassword is dsn with a password (the test server trusts any): errors must never show it.
func withPassword(t *testing.T, dsn, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// dbBooks reads, straight from the database, account's records (cost by request id, each
// client request id once: a second fails the test) and its balance.
func dbBooks(t *testing.T, dsn, account string) (map[string]decimal.Decimal, decimal.Decimal) {
	t.Helper()
	recs := map[string]decimal.Decimal{}
	for id, r := range dbRecords(t, dsn, account) {
		recs[id] = r.cost
	}
	bal, err := dbScalar(dsn, "select balance::text from accounts where id = $1", account)
	if err != nil {
		t.Fatal(err)
	}
	return recs, decimal.RequireFromString(bal)
}

// load sends requests round-robin across gs from workers goroutines, paced, until stop: the
// client request ids answered 200; any other answer fails the test.
type load struct {
	mu       sync.Mutex
	answered map[string]bool
	failed   []string
	n        atomic.Int64
	stop     chan struct{}
	done     sync.WaitGroup
}

func startLoad(gs []*gateway, key string, workers int, pace time.Duration) *load {
	l := &load{answered: map[string]bool{}, stop: make(chan struct{})}
	for w := range workers {
		l.done.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-time.After(pace):
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				g := gs[(w+i)%len(gs)]
				status, code := g.served(key, id)
				l.mu.Lock()
				if status == 200 {
					l.answered[id] = true
					l.n.Add(1)
				} else {
					l.failed = append(l.failed, fmt.Sprintf("%s on replica %d: %d %s", id, (w+i)%len(gs)+1, status, code))
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *load) end() (map[string]bool, []string) {
	close(l.stop)
	l.done.Wait()
	return l.answered, l.failed
}

// TestClusterDatabaseDown: three replicas under a bounded load; the database is stopped and
// started again while requests keep coming. Requests are served while the replicas' budget
// slices last (records spool on each replica), then refused with 503 store_unavailable, never
// served unbilled and never another error; status and /metrics show the database unreachable and the spool's
// lag, an admin write fails with 503 store_unavailable naming the database's host (never its
// password) and the fix; once the database is back each replica ships its spool, and every
// answered request's record is in the database exactly once, the balance the credits minus
// their sum.
func TestClusterDatabaseDown(t *testing.T) {
	// Not parallel: it stops the package's PostgreSQL server, which other cluster tests share.
	const password = "s3cret-pw-never-shown"
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	dsn := withPassword(t, pgDSN(t), password)
	gs := startCluster(t, dsn, 3, "billing: {enabled: true}\n"+durableCatalog(fake), "FAKE_PROVIDER_KEY="+providerKey)
	a := gs[0]
	if code, out := a.adminJSON("POST", "/admin/v1/accounts", map[string]any{"id": "acme", "credits": "100"}); code != 201 {
		t.Fatalf("create account: %d %v", code, out)
	}
	key := a.newKey("acme")
	for i, g := range gs {
		waitFor(t, fmt.Sprintf("the key in force on replica %d", i+1), 10*time.Second, func() bool {
			status, _ := g.served(key, fmt.Sprintf("warm-%d-%d", i, time.Now().UnixNano()))
			return status == 200
		})
	}

	l := startLoad(gs, key, 6, 10*time.Millisecond)
	time.Sleep(time.Second)
	before := l.n.Load()
	if err := pg.srv.Down(); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	up := false
	t.Cleanup(func() {
		if !up {
			_ = pg.srv.Up()
		}
	})
	// The replicas find the database gone (their next write or their listener).
	for i, g := range gs {
		waitFor(t, fmt.Sprintf("replica %d showing the database unreachable", i+1), 10*time.Second, func() bool {
			db, _ := g.storeState()["database"].(map[string]any)
			return db["state"] == "unreachable"
		})
	}
	time.Sleep(1500 * time.Millisecond)
	during := l.n.Load()
	st := a.storeState()
	db, _ := st["database"].(map[string]any)
	sp, _ := st["spool"].(map[string]any)
	records, _ := sp["records"].(float64)
	lag, _ := sp["lag_seconds"].(float64)
	if st["state"] != "ok" || db["since"] == nil || !strings.Contains(fmt.Sprint(db["at"]), "127.0.0.1:") || records < 1 || lag < 1 {
		t.Fatalf("status with the database down: %v", st)
	}
	if a.metric("tollway_store_database_reachable") != "0" || a.metric("tollway_store_available") != "1" {
		t.Fatalf("/metrics with the database down: reachable %q, available %q", a.metric("tollway_store_database_reachable"), a.metric("tollway_store_available"))
	}
	if n, _ := strconv.ParseFloat(a.metric("tollway_spool_records"), 64); n < 1 {
		t.Fatalf("tollway_spool_records %q with the database down", a.metric("tollway_spool_records"))
	}
	if s, _ := strconv.ParseFloat(a.metric("tollway_spool_oldest_seconds"), 64); s < 1 {
		t.Fatalf("tollway_spool_oldest_seconds %q with the database down", a.metric("tollway_spool_oldest_seconds"))
	}
	code, out := a.adminJSON("POST", "/admin/v1/accounts", map[string]any{"id": "other", "credits": "1"})
	msg := fmt.Sprint(out)
	if code != 503 || !strings.Contains(msg, "store_unavailable") || !strings.Contains(msg, fmt.Sprint(db["at"])) ||
		!strings.Contains(msg, "check that the database is running") || strings.Contains(msg, password) {
		t.Fatalf("an admin write with the database down: %d %s", code, msg)
	}
	cli, _ := a.cli("status")
	if !strings.Contains(cli, "UNREACHABLE since") || !strings.Contains(cli, "records not shipped") || strings.Contains(cli, password) {
		t.Fatalf("tollway status with the database down:\n%s", cli)
	}
	t.Logf("database down %v: %d requests answered meanwhile (%d before); replica A's spool: %v records, lag %.1f s",
		time.Since(downAt).Round(time.Millisecond), during-before, before, records, lag)

	if err := pg.srv.Up(); err != nil {
		t.Fatal(err)
	}
	up = true
	back := time.Now()
	time.Sleep(time.Second)
	// Served again once the database is back (slices leased again).
	for i, g := range gs {
		waitFor(t, fmt.Sprintf("replica %d serving again", i+1), 20*time.Second, func() bool {
			status, _ := g.served(key, fmt.Sprintf("warm-back-%d-%d", i, time.Now().UnixNano()))
			return status == 200
		})
	}
	answered, failed := l.end()
	if during-before < 1 {
		t.Fatalf("no request served with the database down (%d before): the slices held must serve until they run out", before)
	}
	refused := 0
	for _, f := range failed {
		if !strings.HasSuffix(f, ": 503 store_unavailable") {
			t.Fatalf("%d requests not answered 200 (of %d answered); one not refused as store_unavailable: %s", len(failed), len(answered), f)
		}
		refused++
	}
	t.Logf("%d answered 200, %d refused 503 store_unavailable once the slices ran out", len(answered), refused)
	for i, g := range gs {
		waitFor(t, fmt.Sprintf("replica %d's spool shipped", i+1), 20*time.Second, func() bool {
			s := g.storeState()
			db, _ := s["database"].(map[string]any)
			sp, _ := s["spool"].(map[string]any)
			return db["state"] == "reachable" && sp["records"] == float64(0)
		})
	}
	t.Logf("every spool shipped %v after the database came back", time.Since(back).Round(time.Millisecond))
	recs, balance := dbBooks(t, dsn, "acme")
	sum := decimal.Zero
	for id, c := range recs {
		if !strings.HasPrefix(id, "warm-") && !answered[id] {
			t.Errorf("a record of request %s, which was not answered", id)
		}
		sum = sum.Add(c)
	}
	for id := range answered {
		if _, ok := recs[id]; !ok {
			t.Errorf("request %s was answered and has no record in the database", id)
		}
	}
	if want := decimal.RequireFromString("100").Sub(sum); !balance.Equal(want) {
		t.Fatalf("balance %s, want 100 - %s = %s", balance, sum, want)
	}
	t.Logf("%d requests answered, each recorded once; balance 100 - %s = %s", len(answered), sum, balance)
}

// bedAndFake starts an x402 test bed and a fake provider for the test.
func bedAndFake(t *testing.T) (*harness.Bed, *fakeupstream.Server) {
	t.Helper()
	bed, err := harness.StartBed()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bed.Stop)
	return bed, fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
}

// TestClusterPaymentNonceSingleUse: fifty concurrent copies of one x402 credential sent to three
// replicas at once run exactly one business call and one settlement: one is paid, every other
// is refused (409 payment_in_progress while a copy on the same replica holds it, 402
// payment_already_used once the store's claim is another's), and afterwards the credential is
// refused as used on every replica.
func TestClusterPaymentNonceSingleUse(t *testing.T) {
	t.Parallel()
	bed, fake := bedAndFake(t)
	gs := startCluster(t, pgDSN(t), 3, paidBody(bed, fake, ""), "FAKE_PROVIDER_KEY="+providerKey)
	payURL := "http://" + gs[0].Public // one pay_url: a credential is good on any replica
	ps := make([]*paidGateway, len(gs))
	for i, g := range gs {
		setPayURL(t, g, payURL)
		ps[i] = &paidGateway{gateway: g, bed: bed, fake: fake}
	}
	chatCalls := func() int {
		n := 0
		for _, r := range fake.Requests() {
			if strings.HasSuffix(r.Path, "/chat/completions") {
				n++
			}
		}
		return n
	}
	cred := ps[0].capture("chat-mini", paidChat, "--scheme", "exact").Signature
	ps[0].reset()
	calls := chatCalls()
	fake.Script(fakeupstream.Fault{Delay: time.Second})

	type outcome struct {
		replica, status int
		code, body      string
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 50}, Timeout: 60 * time.Second}
	defer client.CloseIdleConnections()
	outcomes := make([]outcome, 50)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range outcomes {
		wg.Go(func() {
			<-start
			r := i % len(gs)
			req, _ := http.NewRequest("POST", "http://"+gs[r].Public+"/x402/chat-mini", strings.NewReader(paidChat))
			req.Header.Set("content-type", "application/json")
			req.Header.Set("payment-signature", cred)
			resp, err := client.Do(req)
			if err != nil {
				outcomes[i] = outcome{replica: r, body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e apiError
			_ = json.Unmarshal(b, &e)
			outcomes[i] = outcome{r, resp.StatusCode, e.Error.Code, string(b)}
		})
	}
	close(start)
	wg.Wait()
	paid, inProgress, used := 0, 0, 0
	paidOn := -1
	for _, o := range outcomes {
		switch {
		case o.status == 200 && strings.Contains(o.body, "hello paid world"):
			paid, paidOn = paid+1, o.replica
		case o.status == 409 && o.code == "payment_in_progress":
			inProgress++
		case o.status == 402 && o.code == "payment_already_used":
			used++
		default:
			t.Errorf("a copy on replica %d: %d %s", o.replica+1, o.status, o.body)
		}
	}
	t.Logf("fifty copies on three replicas: %d paid (replica %d), %d in progress (409), %d already used (402)", paid, paidOn+1, inProgress, used)
	if paid != 1 || inProgress+used != 49 {
		t.Fatalf("fifty copies of one credential on three replicas: %d paid, %d in progress, %d used", paid, inProgress, used)
	}
	if n := chatCalls() - calls; n != 1 {
		t.Fatalf("fifty copies of one credential on three replicas ran %d business calls", n)
	}
	if v, s := ps[0].facilitatorCalls(); s != 1 {
		t.Fatalf("fifty copies on three replicas: verify %d settle %d, want one settlement", v, s)
	}
	for i, p := range ps {
		wantPayError(t, p.paidDo("POST", "/x402/chat-mini", paidChat, map[string]string{"payment-signature": cred}), 402, "payment_already_used")
		if n := chatCalls() - calls; n != 1 {
			t.Fatalf("a replay on replica %d ran the business call", i+1)
		}
	}
}

// TestClusterDatabaseDownRefusesPaidAndTasks: with the database down, what the database itself
// must record is refused up front, 503 store_unavailable with retry-after: a paid request before
// it is priced (no 402 asking the client to sign a credential that could not be claimed), and a
// task create before any provider call. Billable chat keeps being served from the spool
// (TestClusterDatabaseDown).
func TestClusterDatabaseDownRefusesPaidAndTasks(t *testing.T) {
	// Not parallel: it stops the package's PostgreSQL server, which other cluster tests share.
	bed, fake := bedAndFake(t)
	g := startCluster(t, pgDSN(t), 1, paidBody(bed, fake, ""), "FAKE_PROVIDER_KEY="+providerKey)[0]
	setPayURL(t, g, "http://"+g.Public)
	if code, out := g.adminJSON("POST", "/admin/v1/accounts", map[string]any{"id": "media-acct", "credits": "100"}); code != 201 {
		t.Fatalf("create account: %d %v", code, out)
	}
	key := g.newKey("media-acct")
	if err := pg.srv.Down(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.srv.Up() })
	waitFor(t, "the database unreachable", 10*time.Second, func() bool {
		db, _ := g.storeState()["database"].(map[string]any)
		return db["state"] == "unreachable"
	})
	refused := func(what string, resp *http.Response) {
		t.Helper()
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || !strings.Contains(string(raw), `"code":"store_unavailable"`) || resp.Header.Get("retry-after") == "" {
			t.Fatalf("%s with the database down: %d %s", what, resp.StatusCode, raw)
		}
	}
	resp, err := http.Post("http://"+g.Public+"/x402/chat-mini", "application/json", strings.NewReader(paidChat))
	if err != nil {
		t.Fatal(err)
	}
	refused("a paid request", resp)
	before := fake.RequestCount()
	req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/videos", strings.NewReader(`{"model":"hailuo-02","prompt":"a cat"}`))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	refused("a task create", resp)
	if n := fake.RequestCount() - before; n != 0 {
		t.Fatalf("the provider got %d requests for a create refused up front", n)
	}
}
