package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

type delivery struct{ id, task, status, body string }

// of lists task's deliveries in arrival order.
func (c *callbackSink) of(task string) []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []delivery
	for i, b := range c.bodies {
		var o struct{ ID, Status string }
		if json.Unmarshal([]byte(b), &o) == nil && o.ID == task {
			out = append(out, delivery{c.ids[i], o.ID, o.Status, b})
		}
	}
	return out
}

// once checks task's callbacks: each status announced by one delivery id, that id sent once,
// and the task's end among them.
func (d *callbackSink) once(t *testing.T, task, end string) {
	t.Helper()
	byStatus, byID := map[string]string{}, map[string][]delivery{}
	for _, x := range d.of(task) {
		if x.id == "" {
			t.Fatalf("a callback of %s without %s", task, tasks.DeliveryHeader)
		}
		if id, ok := byStatus[x.status]; ok && id != x.id {
			t.Fatalf("status %s of %s announced twice, as %s and %s", x.status, task, id, x.id)
		}
		byStatus[x.status] = x.id
		byID[x.id] = append(byID[x.id], x)
	}
	for id, xs := range byID {
		if len(xs) != 1 {
			t.Errorf("delivery %s of %s sent %d times (status %s), want once", id, task, len(xs), xs[0].status)
		}
	}
	if byStatus[end] == "" {
		t.Fatalf("no %s callback of %s: %+v", end, task, d.of(task))
	}
}

// minimaxQueries lists which replica (by the provider key its config resolved) queried each
// MiniMax task, in arrival order, by task id in creation order.
func minimaxQueries(fake *fakeupstream.Server, keys map[string]string) [][]string {
	by := map[int64][]string{}
	for _, r := range fake.Requests() {
		if r.Path != "/v1/query/video_generation" {
			continue
		}
		q, _ := url.ParseQuery(r.Query)
		id, _ := strconv.ParseInt(q.Get("task_id"), 10, 64)
		by[id] = append(by[id], keys[r.Header.Get("Authorization")])
	}
	ids := make([]int64, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([][]string, len(ids))
	for i, id := range ids {
		out[i] = by[id]
	}
	return out
}

// pollers is the replicas that queried one task, each once, in the order they first did; it
// fails when queries by one came again after another's (two pollers at a time).
func pollers(t *testing.T, queries []string) []string {
	t.Helper()
	var runs []string
	for _, q := range queries {
		if len(runs) == 0 || runs[len(runs)-1] != q {
			runs = append(runs, q)
		}
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r] {
			t.Fatalf("queries of one task interleave between replicas: %v", queries)
		}
		seen[r] = true
	}
	return runs
}

// TestClusterTasksOnePollerEach: three replicas, each with its own Envoy and its own provider
// key (so the fake provider tells who queried). A video task created on A is read on B and C
// as the same object (another account: 404) and queried by A alone, B's GETs included; its
// callbacks are sent once each across the three deliverers. A killed with SIGKILL right after
// creating a second task: another replica takes the task over within the lease, it completes,
// is billed once and its callbacks go out once, each with its own delivery id.
func TestClusterTasksOnePollerEach(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{}) // any key: each replica sends its own
	sink := newCallbackSink(t)
	body := mediaConfig("", fake.MiniMaxURL(), fake.DashScopeURL())
	dsn := pgDSN(t)
	keys := map[string]string{}
	gs := make([]*gateway, 3)
	for i := range gs {
		name := fmt.Sprintf("replica-%c", 'a'+i)
		keys["Bearer key-"+name] = name
		gs[i] = startWith(t, harness.Options{Body: body, Env: []string{"TOLLWAY_STORE_DRIVER=postgres", "TOLLWAY_STORE_DSN=" + dsn,
			"TOLLWAY_REPLICA_NAME=" + name, "TOLLWAY_REPLICA_LEASE=" + clusterLease.String(), "FAKE_PROVIDER_KEY=key-" + name}})
	}
	a, b, c := gs[0], gs[1], gs[2]
	for _, acct := range []string{"acme", "other"} {
		if code, out := a.adminJSON("POST", "/admin/v1/accounts", map[string]any{"id": acct, "credits": "10"}); code != 201 {
			t.Fatalf("create account %s: %d %v", acct, code, out)
		}
	}
	key, other := a.newKey("acme"), a.newKey("other")
	waitFor(t, "the keys on every replica", 5*time.Second, func() bool {
		code, _ := c.do("GET", other, "/videos/video_none", "")
		code2, _ := b.do("GET", key, "/videos/video_none", "")
		return code == 404 && code2 == 404
	})

	// Created on A, read on B and C: the same object; another account's key finds nothing.
	code, created := a.do("POST", key, "/videos", hailuoBody("a fox", sink.URL+"/cb"))
	id, _ := created["id"].(string)
	if code != 200 || id == "" {
		t.Fatalf("create on A: %d %v", code, created)
	}
	_, onB := b.do("GET", key, "/videos/"+id, "")
	_, onC := c.do("GET", key, "/videos/"+id, "")
	if !reflect.DeepEqual(onB, onC) || onB["id"] != id || onB["created_at"] != created["created_at"] || onB["model"] != "hailuo-02" {
		t.Fatalf("the task read on B %v and on C %v, created as %v", onB, onC, created)
	}
	for _, g := range []*gateway{b, c} {
		if code, obj := g.do("GET", other, "/videos/"+id, ""); code != 404 {
			t.Fatalf("another account reads the task: %d %v", code, obj)
		}
	}
	done := b.waitVideo(key, id, 40*time.Second) // B's GETs answer from the store: A polls
	if done["status"] != "completed" || done["cost"] != "0.32" {
		t.Fatalf("the task ended as %v", done)
	}
	waitFor(t, "the completed callback", 10*time.Second, func() bool {
		for _, x := range sink.of(id) {
			if x.status == "completed" {
				return true
			}
		}
		return false
	})
	qs := minimaxQueries(fake, keys)
	if len(qs) != 1 || !reflect.DeepEqual(pollers(t, qs[0]), []string{"replica-a"}) {
		t.Fatalf("queries of the task by replica: %v, want A's alone", qs)
	}
	t.Logf("first task: %d queries, all by its creator; callbacks %d", len(qs[0]), len(sink.of(id)))

	// A dies right after creating a task: another replica polls it within the lease.
	code, second := a.do("POST", key, "/videos", hailuoBody("a hare", sink.URL+"/cb"))
	id2, _ := second["id"].(string)
	if code != 200 || id2 == "" {
		t.Fatalf("second create on A: %d %v", code, second)
	}
	a.Kill()
	killed := time.Now()
	var heir string
	waitFor(t, "another replica to query the dead one's task", 3*clusterLease+5*time.Second, func() bool {
		qs := minimaxQueries(fake, keys)
		if len(qs) == 2 && len(qs[1]) > 0 && qs[1][len(qs[1])-1] != "replica-a" {
			heir = qs[1][len(qs[1])-1]
			return true
		}
		return false
	})
	took := time.Since(killed)
	t.Logf("the dead replica's task taken over by %s %v after the kill (lease %v)", heir, took.Round(time.Millisecond), clusterLease)
	if took > clusterLease+2*time.Second {
		t.Errorf("taken over %v after the kill, want within the lease (%v) plus a sweep and a tick", took, clusterLease)
	}
	done = c.waitVideo(key, id2, 40*time.Second)
	if done["status"] != "completed" || done["cost"] != "0.32" {
		t.Fatalf("the dead replica's task ended as %v", done)
	}
	waitFor(t, "its completed callback", 10*time.Second, func() bool {
		for _, x := range sink.of(id2) {
			if x.status == "completed" {
				return true
			}
		}
		return false
	})
	time.Sleep(1500 * time.Millisecond) // a duplicate would come within a read of the outbox
	qs = minimaxQueries(fake, keys)
	if ps := pollers(t, qs[1]); ps[len(ps)-1] != heir || (len(ps) == 2 && ps[0] != "replica-a") || len(ps) > 2 {
		t.Fatalf("queries of the second task by replica: %v", qs[1])
	}
	sink.once(t, id, "completed")
	sink.once(t, id2, "completed")
	// Billed once each: two records of 0.32 in the shared store.
	waitFor(t, "the two usage records", 10*time.Second, func() bool { return len(b.records("account=acme")) == 2 })
	for _, r := range b.records("account=acme") {
		if !r.Cost.Equal(decimal.RequireFromString("0.32")) {
			t.Fatalf("usage record %+v, want 0.32", r)
		}
	}
}
