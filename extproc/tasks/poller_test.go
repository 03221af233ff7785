package tasks

import (
	"context"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

// replicaOf is a second service (another replica, owner) over s's store and providers.
func replicaOf(s *Service, owner string) *Service {
	return &Service{Store: s.Store, Envoy: s.Envoy, Log: s.Log, Now: time.Now, Catalog: s.Catalog, Adapters: s.Adapters,
		Price: s.Price, Bill: s.Bill, RefreshEvery: s.RefreshEvery, Owner: owner, Lease: s.Lease}
}

// waitEnded waits (at most 10 s) for every task of ids to end in the store.
func waitEnded(t *testing.T, st store.Tasks, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, id := range ids {
		for {
			got, err := st.GetTask(id)
			if err == nil && got.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s not ended within 10 s: %+v %v", id, got, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestOneReplicaPollsEachTask: two replicas poll one store; the tasks one creates are queried
// by it alone (the other, started later and sweeping for tasks nobody holds, queries none, and
// its GETs answer from the store), and they complete.
func TestOneReplicaPollsEachTask(t *testing.T) {
	a, _ := newService(t)
	a.Owner, a.Lease, a.RefreshEvery = "a", 400*time.Millisecond, 10*time.Millisecond
	var ids []string
	for _, p := range []string{"slow fox", "slow hare", "slow owl"} {
		tk, err := a.newTask(t, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
	}
	b := replicaOf(a, "b")
	if n, err := b.Resume(); n != 0 || err != nil {
		t.Fatalf("b resumes %d tasks a holds (%v)", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{}, 2)
	for _, s := range []*Service{a, b} {
		go func() { s.Poll(ctx, 10*time.Millisecond, 4); done <- struct{}{} }()
	}
	if _, err := b.Get(ctx, "acme", ids[0]); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, a.Store, ids...)
	cancel()
	<-done
	<-done
	if a.Queries() < 15 || b.Queries() != 0 {
		t.Fatalf("queries: a %d (want 5 a task), b %d (want none)", a.Queries(), b.Queries())
	}
}

// TestADeadReplicasTasksAreTakenOver: a replica that created a task and died (it never polls)
// is replaced as its poller once its lease ends, by a replica already running; the task
// completes and is billed once.
func TestADeadReplicasTasksAreTakenOver(t *testing.T) {
	a, billed := newService(t)
	a.Owner, a.Lease, a.RefreshEvery = "a", 600*time.Millisecond, 10*time.Millisecond
	b := replicaOf(a, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { b.Poll(ctx, 10*time.Millisecond, 4); close(done) }()
	created := time.Now()
	tk, err := a.newTask(t, "slow fox") // a dies right after
	if err != nil {
		t.Fatal(err)
	}
	for b.Queries() == 0 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(created)
	waitEnded(t, a.Store, tk.ID)
	cancel()
	<-done
	// Taken over after the lease (not before: a held it) and within it plus a sweep.
	if took < 600*time.Millisecond || took > 600*time.Millisecond+600*time.Millisecond/5+200*time.Millisecond {
		t.Fatalf("b took the task over %s after its creation, want within 600 ms plus a sweep", took)
	}
	if a.Queries() != 0 || b.Queries() != 5 || len(*billed) != 1 {
		t.Fatalf("queries a %d b %d, billed %v", a.Queries(), b.Queries(), *billed)
	}
	t.Logf("taken over %s after creation (lease 600 ms)", took.Round(time.Millisecond))
}

// TestALostLeaseStopsQueries: a replica whose renewals fail stops querying its tasks at half
// its lease, before another replica may claim them.
func TestALostLeaseStopsQueries(t *testing.T) {
	a, _ := newService(t)
	a.Owner, a.Lease, a.RefreshEvery = "a", time.Hour, time.Millisecond
	tk, err := a.newTask(t, "never fox")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if !a.sched.holds(tk.ID, now) || a.sched.holds(tk.ID, now.Add(31*time.Minute)) {
		t.Fatal("a lease of an hour lets queries start for half an hour after it was asked for, no longer")
	}
	a.sched.renewed([]string{tk.ID}, nil, now.Add(time.Hour)) // another replica took it
	if a.sched.polls(tk.ID) {
		t.Fatal("a task lost at renewal is still followed")
	}
}
