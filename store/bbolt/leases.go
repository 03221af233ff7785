package bbolt

// Leases on running tasks and due callbacks (store.TaskLeases, store.CallbackLeases). One
// process owns a bbolt file, so leases live in memory: a restart loses them, and every running
// task and due callback is then free to claim, as the process that held them is gone.

import (
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// leases are the live leases of tasks and callbacks, by id.
type leases struct {
	mu        sync.Mutex
	tasks     map[string]lease
	callbacks map[string]lease
}

type lease struct {
	owner string
	until time.Time
}

func (l lease) live(now time.Time) bool { return now.Before(l.until) }

// setTask leases task id to tl from now (PutTaskChange, under the write transaction).
func (s *Store) setTask(id string, tl *store.TaskLease) {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if s.leases.tasks == nil {
		s.leases.tasks = map[string]lease{}
	}
	s.leases.tasks[id] = lease{owner: tl.Owner, until: time.Now().Add(tl.For)}
}

// dropTask forgets the lease of a task that finished or was not written.
func (s *Store) dropTask(id string) {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	delete(s.leases.tasks, id)
}

// ClaimTasks leases to owner up to limit running tasks nobody holds (store.TaskLeases).
func (s *Store) ClaimTasks(owner string, d time.Duration, limit int) ([]store.Task, error) {
	if err := (&store.TaskLease{Owner: owner, For: d}).Validate(); err != nil {
		return nil, err
	}
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if s.leases.tasks == nil {
		s.leases.tasks = map[string]lease{}
	}
	var out []store.Task
	now := time.Now()
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTasksOpen).Cursor()
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			if s.leases.tasks[string(k)].live(now) {
				continue
			}
			v := tx.Bucket(bucketTasks).Get(k)
			if v == nil {
				continue // the index outlived its task
			}
			var t store.Task
			if err := jsonUnmarshal(v, &t); err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, t := range out {
		s.leases.tasks[t.ID] = lease{owner: owner, until: now.Add(d)}
	}
	return out, nil
}

// RenewTasks extends owner's leases on ids that are still running (store.TaskLeases).
func (s *Store) RenewTasks(owner string, ids []string, d time.Duration) ([]string, error) {
	if err := (&store.TaskLease{Owner: owner, For: d}).Validate(); err != nil {
		return nil, err
	}
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	var held []string
	err := s.db.View(func(tx *bolt.Tx) error {
		open := tx.Bucket(bucketTasksOpen)
		for _, id := range ids {
			l, ok := s.leases.tasks[id]
			switch {
			case !ok || l.owner != owner:
			case open.Get([]byte(id)) == nil:
				delete(s.leases.tasks, id)
			default:
				held = append(held, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	until := time.Now().Add(d)
	for _, id := range held {
		s.leases.tasks[id] = lease{owner: owner, until: until}
	}
	return held, nil
}

// ReleaseTasks ends owner's leases on ids, or all of owner's (store.TaskLeases).
func (s *Store) ReleaseTasks(owner string, ids []string) error {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if ids == nil {
		for id, l := range s.leases.tasks {
			if l.owner == owner {
				delete(s.leases.tasks, id)
			}
		}
		return nil
	}
	for _, id := range ids {
		if s.leases.tasks[id].owner == owner {
			delete(s.leases.tasks, id)
		}
	}
	return nil
}

// ClaimCallback leases c to owner if it is still in the outbox, due, and not held
// (store.CallbackLeases).
func (s *Store) ClaimCallback(c store.Callback, owner string, d time.Duration) (bool, error) {
	if err := (&store.TaskLease{Owner: owner, For: d}).Validate(); err != nil {
		return false, err
	}
	now := time.Now()
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if s.leases.callbacks[c.ID].live(now) || c.NextAt.After(now) {
		return false, nil
	}
	var there bool
	err := s.db.View(func(tx *bolt.Tx) error {
		there = tx.Bucket(bucketOutbox).Get([]byte(outboxKey(c))) != nil
		return nil
	})
	if err != nil || !there {
		return false, err
	}
	if s.leases.callbacks == nil {
		s.leases.callbacks = map[string]lease{}
	}
	s.leases.callbacks[c.ID] = lease{owner: owner, until: now.Add(d)}
	return true, nil
}

// dropCallback ends the lease of a callback delivered, given up or put back for a retry.
func (s *Store) dropCallback(id string) {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	delete(s.leases.callbacks, id)
}
