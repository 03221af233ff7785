package bbolt

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollway/tollway/store"
)

// replicas is the registry of the processes sharing a bbolt file: one process owns the file, so
// the list is that process alone and lives in memory (a registration from before a restart
// names a process that cannot still hold the file).
type replicas struct {
	mu   sync.Mutex
	list map[string]store.Replica
}

// Heartbeat registers or renews r (store.Replicas).
func (s *Store) Heartbeat(r store.Replica) error {
	if err := r.Validate(); err != nil {
		return err
	}
	s.reps.mu.Lock()
	defer s.reps.mu.Unlock()
	if s.reps.list == nil {
		s.reps.list = map[string]store.Replica{}
	}
	s.reps.list[r.Name] = r
	return nil
}

// Replicas lists the registered replicas by name.
func (s *Store) Replicas() ([]store.Replica, error) {
	s.reps.mu.Lock()
	defer s.reps.mu.Unlock()
	out := make([]store.Replica, 0, len(s.reps.list))
	for _, r := range s.reps.list {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b store.Replica) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LeaveReplica removes the replica of name.
func (s *Store) LeaveReplica(name string) error {
	s.reps.mu.Lock()
	defer s.reps.mu.Unlock()
	delete(s.reps.list, name)
	return nil
}

// DropReplicas removes those last seen before before.
func (s *Store) DropReplicas(before time.Time) (int, error) {
	s.reps.mu.Lock()
	defer s.reps.mu.Unlock()
	n := 0
	for name, r := range s.reps.list {
		if r.LastSeen.Before(before) {
			delete(s.reps.list, name)
			n++
		}
	}
	return n, nil
}
