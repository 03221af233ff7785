package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/store/postgres/pgtest"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// Several `tollway run` processes, each with its own Envoy, on one PostgreSQL database: one
// private server for the package (pgtest, started on first use), a database per test.

var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// pgDSN is the DSN of a database of the test's own on the package's server.
func pgDSN(t testing.TB) string {
	t.Helper()
	pg.once.Do(func() { pg.srv, pg.err = pgtest.Start() })
	if pg.err != nil {
		t.Fatal(pg.err)
	}
	name := pgtest.Name(t.Name())
	if err := pg.srv.Create(name); err != nil {
		t.Fatal(err)
	}
	return pg.srv.URL(name)
}

// stopPostgres stops the server once the tests are done, if one started.
func stopPostgres() {
	if pg.srv != nil {
		if err := pg.srv.Stop(); err != nil {
			fmt.Println("e2e:", err)
		}
	}
}

// clusterLease is the replicas' lease in these tests: short, so a killed one is gone soon.
const clusterLease = 2 * time.Second

// startCluster starts n replicas (replica-a, replica-b ...) of a gateway whose config body is
// body, on the database dsn.
func startCluster(t testing.TB, dsn string, n int, body string, env ...string) []*gateway {
	t.Helper()
	gs := make([]*gateway, n)
	for i := range gs {
		e := append([]string{"TOLLWAY_STORE_DRIVER=postgres", "TOLLWAY_STORE_DSN=" + dsn,
			fmt.Sprintf("TOLLWAY_REPLICA_NAME=replica-%c", 'a'+i), "TOLLWAY_REPLICA_LEASE=" + clusterLease.String()}, env...)
		gs[i] = startWith(t, harness.Options{Body: body, Env: e})
	}
	return gs
}

// inForce waits until cond holds on each of gs and says how long after since it took, each.
func inForce(t *testing.T, what string, since time.Time, gs []*gateway, cond func(g *gateway) bool) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(gs))
	for i, g := range gs {
		deadline := time.Now().Add(10 * time.Second)
		for !cond(g) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not in force on replica %d within 10 s", what, i+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took[i] = time.Since(since)
	}
	t.Logf("%s in force on the other replicas after %v", what, took)
	for i, d := range took {
		if d >= time.Second {
			t.Errorf("%s: in force on replica %d after %v, want within 1 s", what, i+1, d)
		}
	}
	return took
}

// status answers with code for model on g with key.
func answers(g *gateway, key, model string, code int) bool {
	resp := g.chat(context.Background(), key, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == code
}

// replicaView is a replica as GET /admin/v1/status lists it.
type replicaView struct {
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Started  time.Time `json:"started_at"`
	LastSeen time.Time `json:"last_seen"`
	Gone     bool      `json:"gone"`
	Self     bool      `json:"self"`
}

func (g *gateway) replicas() []replicaView {
	g.t.Helper()
	out, err := g.cli("status", "--json")
	if err != nil {
		g.t.Fatal(err)
	}
	var st struct {
		Replicas []replicaView `json:"replicas"`
	}
	if err := jsonUnmarshal(out, &st); err != nil {
		g.t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st.Replicas
}

// TestClusterChangesWithinASecond: three replicas on one database, each with its own Envoy. An
// account and a key created on A, a model and a route added there, the route paused, the key
// rotated and revoked: each is in force on B and C within 1 s (measured from A's answer). Every
// replica's status lists all three; one killed with SIGKILL is shown gone once its lease ends.
func TestClusterChangesWithinASecond(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := "billing: {enabled: true}\n" + catalog(fake.URL(), `pricing: {request: "0.001"}`)
	gs := startCluster(t, pgDSN(t), 3, body, "FAKE_PROVIDER_KEY="+providerKey)
	a, others := gs[0], gs[1:]
	model := "gpt-4o-mini"

	t0 := time.Now()
	if code, out := a.adminJSON("POST", "/admin/v1/accounts", map[string]any{"id": "acme", "credits": "10"}); code != 201 {
		t.Fatalf("create account: %d %v", code, out)
	}
	code, k := a.adminJSON("POST", "/admin/v1/keys", map[string]any{"account": "acme"})
	if code != 201 {
		t.Fatalf("create key: %d %v", code, k)
	}
	key, id := k["key"].(string), k["id"].(string)
	inForce(t, "a new account and its key", t0, others, func(g *gateway) bool { return answers(g, key, model, 200) })

	t0 = time.Now()
	if code, out := a.adminJSON("PUT", "/admin/v1/models/second", map[string]any{
		"providers": []map[string]string{{"provider": "fake", "model": "fake-second"}}}); code != 200 {
		t.Fatalf("PUT model: %d %v", code, out)
	}
	inForce(t, "a new model", t0, others, func(g *gateway) bool { return answers(g, key, "second", 200) })

	t0 = time.Now()
	if code, out := a.adminJSON("POST", "/admin/v1/routes", map[string]any{"name": "night", "rule": "priority_fallback", "models": []string{"second", model}}); code != 200 && code != 201 {
		t.Fatalf("create route: %d %v", code, out)
	}
	inForce(t, "a new route", t0, others, func(g *gateway) bool { return answers(g, key, "route:night", 200) })
	t0 = time.Now()
	if code, out := a.adminJSON("POST", "/admin/v1/routes/route:night/pause", nil); code != 200 {
		t.Fatalf("pause route: %d %v", code, out)
	}
	inForce(t, "a paused route", t0, others, func(g *gateway) bool { return answers(g, key, "route:night", 409) })

	t0 = time.Now()
	code, r := a.adminJSON("POST", "/admin/v1/keys/"+id+"/rotate", nil)
	if code != 200 {
		t.Fatalf("rotate: %d %v", code, r)
	}
	rotated := r["key"].(string)
	inForce(t, "a rotated key", t0, others, func(g *gateway) bool { return answers(g, key, model, 401) && answers(g, rotated, model, 200) })
	t0 = time.Now()
	if code, out := a.adminJSON("POST", "/admin/v1/keys/"+id+"/revoke", nil); code != 200 {
		t.Fatalf("revoke: %d %v", code, out)
	}
	inForce(t, "a revoked key", t0, others, func(g *gateway) bool { return answers(g, rotated, model, 401) })

	// Every replica lists all three, itself marked.
	for i, g := range gs {
		rs := g.replicas()
		var names []string
		for _, r := range rs {
			names = append(names, r.Name)
			if r.Gone || r.Version == "" || r.Started.IsZero() || time.Since(r.LastSeen) > clusterLease {
				t.Errorf("replica %d lists %+v: want live, with a version and times", i+1, r)
			}
			if r.Self != (r.Name == fmt.Sprintf("replica-%c", 'a'+i)) {
				t.Errorf("replica %d marks %+v as itself or not wrongly", i+1, r)
			}
		}
		sort.Strings(names)
		if strings.Join(names, ",") != "replica-a,replica-b,replica-c" {
			t.Fatalf("replica %d lists %v, want all three", i+1, names)
		}
	}

	// C killed: A shows it gone once its lease ends (it renewed a third of a lease before at most).
	gs[2].Kill()
	killed := time.Now()
	waitFor(t, "the killed replica shown gone", 10*time.Second, func() bool {
		for _, r := range a.replicas() {
			if r.Name == "replica-c" {
				return r.Gone
			}
		}
		t.Fatal("the killed replica was dropped before it was shown gone")
		return false
	})
	gone := time.Since(killed)
	t.Logf("a replica killed with SIGKILL shown gone after %v (lease %v)", gone, clusterLease)
	if gone < clusterLease/2 || gone > clusterLease+2*time.Second {
		t.Errorf("shown gone %v after the kill, want about its lease (%v)", gone, clusterLease)
	}
	out, err := gs[1].cli("status")
	if err != nil || !strings.Contains(out, "2 live of 3") || !strings.Contains(out, "replica-c GONE") || !strings.Contains(out, "replica-b (this one) live") {
		t.Fatalf("tollway status on B: %v\n%s", err, out)
	}
}

// TestClusterServesAMigratedGateway: a bbolt gateway that served and billed requests is
// stopped, its file copied into an empty database with `tollway store migrate` (a second run
// copies nothing new), and a replica on that database serves its key with the balance, the
// records and the month's spend intact; billing goes on from there.
func TestClusterServesAMigratedGateway(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := "billing: {enabled: true}\n" + catalog(fake.URL(), `pricing: {request: "0.001", prompt: "0.000001", completion: "0.000002"}`)
	dir := t.TempDir()
	single := startGatewayIn(t, dir, body, "FAKE_PROVIDER_KEY="+providerKey)
	if err := single.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := single.newKey("acme", "--monthly-limit", "5")
	for range 3 {
		if !answers(single, key, "gpt-4o-mini", 200) {
			t.Fatal("the single gateway did not serve")
		}
	}
	recs := single.waitRecords("acme", 3)
	balance, spent := single.balance("acme"), single.keySpent()
	single.Stop()

	dsn := pgDSN(t)
	migrate := func() string {
		t.Helper()
		out, err := exec.Command(tollwayBin, "store", "migrate", "--from", filepath.Join(dir, "tollway.db"), "--to", dsn).CombinedOutput()
		if err != nil {
			t.Fatalf("tollway store migrate: %v\n%s", err, out)
		}
		return string(out)
	}
	out := migrate()
	if !strings.Contains(out, "copied ") || !strings.Contains(out, "usage_records") || strings.Contains(out, "\n0 new records copied") {
		t.Fatalf("first migration:\n%s", out)
	}
	t.Logf("tollway store migrate:\n%s", out)
	if again := migrate(); !strings.Contains(again, "\n0 new records copied") {
		t.Fatalf("a second migration copied again:\n%s", again)
	}

	r := startCluster(t, dsn, 1, body, "FAKE_PROVIDER_KEY="+providerKey)[0]
	if got := r.balance("acme"); !got.Equal(balance) {
		t.Fatalf("balance on the replica %s, was %s", got, balance)
	}
	if got := r.keySpent(); !got.Equal(spent) {
		t.Fatalf("the key's month spend on the replica %s, was %s", got, spent)
	}
	if got := r.records("account=acme"); len(got) != len(recs) || got[0].RequestID != recs[0].RequestID || !got[0].Cost.Equal(recs[0].Cost) {
		t.Fatalf("records on the replica %+v, were %+v", got, recs)
	}
	resp := r.chat(context.Background(), key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the migrated key is not served by the replica: %d %s", resp.StatusCode, answer)
	}
	r.waitRecords("acme", 4)
	if got := r.balance("acme"); !got.LessThan(balance) {
		t.Fatalf("a request on the replica did not debit the migrated balance: %s, was %s", got, balance)
	}
}
