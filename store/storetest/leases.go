package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

// leaseCases: TaskLeases and CallbackLeases, with two replicas ("a" and "b") on one store.
var leaseCases = []conformance{
	{"leases/concurrent-claims-split-the-running-tasks", func(t *testing.T, e *env) {
		s := e.s
		for i := range 40 {
			if err := s.PutTaskChange(task(fmt.Sprintf("video_%02d", i), "acme"), store.TaskChange{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 { // finished: never claimed
			done := task(fmt.Sprintf("video_done%d", i), "acme")
			done.Status, done.CompletedAt = "completed", day0
			if err := s.PutTaskChange(done, store.TaskChange{}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		got := map[string][]string{}
		var wg sync.WaitGroup
		for _, owner := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					ts, err := s.ClaimTasks(owner, time.Minute, 3)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ts) == 0 {
						return
					}
					mu.Lock()
					for _, tk := range ts {
						got[tk.ID] = append(got[tk.ID], owner)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(got) != 40 {
			t.Fatalf("%d tasks claimed, want the 40 running ones: %v", len(got), got)
		}
		for id, owners := range got {
			if len(owners) != 1 || strings.HasPrefix(id, "video_done") {
				t.Fatalf("task %s claimed by %v", id, owners)
			}
		}
		if ts, err := s.ClaimTasks("b", time.Minute, 100); err != nil || len(ts) != 0 {
			t.Fatalf("a claim with every task held: %d tasks, %v", len(ts), err)
		}
	}},
	{"leases/an-expired-lease-hands-the-task-over", func(t *testing.T, e *env) {
		s := e.s
		ids := []string{"video_1", "video_2", "video_3"}
		for _, id := range ids { // leased to their creator as they are written
			if err := s.PutTaskChange(task(id, "acme"), store.TaskChange{Lease: &store.TaskLease{Owner: "a", For: 400 * time.Millisecond}}); err != nil {
				t.Fatal(err)
			}
		}
		claim(t, s, "b", 400*time.Millisecond)
		time.Sleep(200 * time.Millisecond)
		if held, err := s.RenewTasks("a", append(ids, "video_none"), 400*time.Millisecond); err != nil || !sameIDs(held, ids) {
			t.Fatalf("a renews: holds %v, %v", held, err)
		}
		if held, err := s.RenewTasks("b", ids, time.Minute); err != nil || len(held) != 0 {
			t.Fatalf("b renews what it never held: %v, %v", held, err)
		}
		time.Sleep(250 * time.Millisecond) // past a's first lease, within its renewal
		claim(t, s, "b", time.Minute)
		time.Sleep(250 * time.Millisecond) // a stops renewing: its lease ends
		claim(t, s, "b", time.Minute, ids...)
		if held, err := s.RenewTasks("a", ids, time.Minute); err != nil || len(held) != 0 {
			t.Fatalf("a renews after b took its tasks over: %v, %v", held, err)
		}
		claim(t, s, "a", time.Minute)
	}},
	{"leases/release-and-finish", func(t *testing.T, e *env) {
		s := e.s
		for _, id := range []string{"video_1", "video_2", "video_3"} {
			if err := s.PutTaskChange(task(id, "acme"), store.TaskChange{}); err != nil {
				t.Fatal(err)
			}
		}
		claim(t, s, "a", time.Minute, "video_1", "video_2", "video_3")
		if err := s.ReleaseTasks("b", nil); err != nil { // not b's: nothing changes
			t.Fatal(err)
		}
		if err := s.ReleaseTasks("a", []string{"video_1"}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "b", time.Minute, "video_1")
		if _, err := s.UpdateTask("video_2", func(r *store.Task) (store.TaskChange, error) {
			r.Status, r.CompletedAt = "failed", day0
			return store.TaskChange{}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if held, err := s.RenewTasks("a", []string{"video_2", "video_3"}, time.Minute); err != nil || !sameIDs(held, []string{"video_3"}) {
			t.Fatalf("a renews a finished task and a running one: %v, %v", held, err)
		}
		if err := s.ReleaseTasks("a", nil); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "b", time.Minute, "video_3") // never the finished one
		done := task("video_4", "acme")
		done.Status, done.CompletedAt = "completed", day0
		if err := s.PutTaskChange(done, store.TaskChange{Lease: &store.TaskLease{Owner: "a", For: time.Minute}}); err != nil {
			t.Fatal(err)
		}
		claim(t, s, "b", time.Minute)
		if held, err := s.RenewTasks("a", []string{"video_4"}, time.Minute); err != nil || len(held) != 0 {
			t.Fatalf("a task born finished is leased: %v, %v", held, err)
		}
		if err := s.PutTaskChange(task("video_5", "acme"), store.TaskChange{Lease: &store.TaskLease{Owner: "", For: time.Minute}}); err == nil {
			t.Fatal("a lease without an owner was accepted")
		}
	}},
	{"leases/a-callback-goes-to-one-replica-and-again-after-its-lease", func(t *testing.T, e *env) {
		s := e.s
		tk := task("video_1", "acme")
		cb := store.Callback{TaskID: "video_1", Account: "acme", URL: "https://hooks.example/t", Body: []byte("{}"), NextAt: day0}
		if err := s.PutTaskChange(tk, store.TaskChange{Callbacks: []store.Callback{cb}}); err != nil {
			t.Fatal(err)
		}
		due := dueCallbacks(t, s)
		if len(due) != 1 {
			t.Fatalf("%d callbacks due, want 1", len(due))
		}
		c := due[0]
		var mu sync.Mutex
		var winners []string
		var wg sync.WaitGroup
		for _, owner := range []string{"a", "b", "a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				won, err := s.ClaimCallback(c, owner, 400*time.Millisecond)
				if err != nil {
					t.Error(err)
				}
				if won {
					mu.Lock()
					winners = append(winners, owner)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("claims won by %v, want exactly one", winners)
		}
		time.Sleep(500 * time.Millisecond) // the winner died: its lease ends
		again := dueCallbacks(t, s)
		if len(again) != 1 || again[0].ID != c.ID {
			t.Fatalf("after the lease: due %+v, want %s again (same id)", again, c.ID)
		}
		if won, err := s.ClaimCallback(again[0], "b", time.Minute); err != nil || !won {
			t.Fatalf("b claims it after the lease: %v, %v", won, err)
		}
		if won, err := s.ClaimCallback(again[0], "a", time.Minute); err != nil || won {
			t.Fatalf("a claims it while b holds it: %v, %v", won, err)
		}
		if err := s.RetryCallback(again[0], time.Now().Add(-time.Second)); err != nil { // b's attempt failed: due again at once
			t.Fatal(err)
		}
		retried := dueCallbacks(t, s)
		if len(retried) != 1 || retried[0].Attempt != 1 {
			t.Fatalf("after a retry: %+v", retried)
		}
		if won, err := s.ClaimCallback(retried[0], "a", time.Minute); err != nil || !won {
			t.Fatalf("a claims the retry: %v, %v", won, err)
		}
		if err := s.AckCallback(retried[0]); err != nil {
			t.Fatal(err)
		}
		if won, err := s.ClaimCallback(retried[0], "b", time.Minute); err != nil || won {
			t.Fatalf("b claims a delivered callback: %v, %v", won, err)
		}
	}},
}

// claim has owner claim running tasks for d and checks it got exactly want.
func claim(t *testing.T, s store.Store, owner string, d time.Duration, want ...string) {
	t.Helper()
	ts, err := s.ClaimTasks(owner, d, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range ts {
		got = append(got, tk.ID)
	}
	if !sameIDs(got, want) {
		t.Fatalf("%s claims %v, want %v", owner, got, want)
	}
}

func sameIDs(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// dueCallbacks lists the callbacks due now.
func dueCallbacks(t *testing.T, s store.Store) []store.Callback {
	t.Helper()
	var out []store.Callback
	err := s.ScanDueCallbacks(time.Now(), 100, func(string) bool { return false }, func(c store.Callback) bool {
		out = append(out, c)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
