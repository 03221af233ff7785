package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

// replicaCases: Replicas.
var replicaCases = []conformance{
	{"replicas/register-renew-leave-drop", func(t *testing.T, e *env) {
		s := e.s
		a := store.Replica{Name: "a", Version: "v1", StartedAt: day0, LastSeen: day0, Lease: 15 * time.Second}
		b := store.Replica{Name: "b", Version: "v1", StartedAt: day0, LastSeen: day0.Add(-time.Hour), Lease: time.Second}
		for _, r := range []store.Replica{b, a} {
			if err := s.Heartbeat(r); err != nil {
				t.Fatal(err)
			}
		}
		a.LastSeen, a.Version = day0.Add(5*time.Second), "v2" // renewed (say, after an upgrade)
		if err := s.Heartbeat(a); err != nil {
			t.Fatal(err)
		}
		got := replicas(t, s)
		if len(got) != 2 || !sameReplica(got[0], a) || !sameReplica(got[1], b) {
			t.Fatalf("replicas %+v, want a (renewed) and b, by name", got)
		}
		if got[0].Gone(day0.Add(10*time.Second)) || !got[1].Gone(day0) {
			t.Fatalf("gone: a %v (renewed 5 s before, lease 15 s), b %v (silent an hour, lease 1 s)", got[0].Gone(day0.Add(10*time.Second)), got[1].Gone(day0))
		}
		if n, err := s.DropReplicas(day0.Add(-time.Minute)); err != nil || n != 1 {
			t.Fatalf("dropped %d (%v), want b alone", n, err)
		}
		if err := s.LeaveReplica("a"); err != nil {
			t.Fatal(err)
		}
		if err := s.LeaveReplica("never-was"); err != nil {
			t.Fatalf("leaving twice: %v", err)
		}
		if got := replicas(t, s); len(got) != 0 {
			t.Fatalf("after a left and b was dropped: %+v", got)
		}
	}},
	{"replicas/refuses-a-nameless-one", func(t *testing.T, e *env) {
		for _, r := range []store.Replica{{Lease: time.Second, StartedAt: day0, LastSeen: day0}, {Name: "a", StartedAt: day0, LastSeen: day0}} {
			if err := e.s.Heartbeat(r); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("%+v registered: %v", r, err)
			}
		}
	}},
}

func replicas(t testing.TB, s store.Store) []store.Replica {
	t.Helper()
	rs, err := s.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// sameReplica compares as stored: times to the nanosecond, in any zone.
func sameReplica(got, want store.Replica) bool {
	return got.Name == want.Name && got.Version == want.Version && got.StartedAt.Equal(want.StartedAt) &&
		got.LastSeen.Equal(want.LastSeen) && got.Lease == want.Lease
}
