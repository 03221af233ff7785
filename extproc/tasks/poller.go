package tasks

// The poller: which running tasks this replica polls, and polling them. Each running task is
// leased to one replica (store.TaskLeases): to its creator as it is stored, renewed every
// quarter of the lease; a task whose lease ends unrenewed (its replica died, or lost the
// database) is claimed by the next replica that sweeps, so it is polled again within Lease
// plus a sweep (a fifth of Lease). One replica polls a task at a time: a replica counts a
// lease on its own clock from before it asked for it and stops querying at half of it, and a
// query started then is cut at the other half, before any other replica can claim the task.

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tollway/tollway/store"
)

// DefaultLease is how long a task's lease lasts unrenewed when Service.Lease is not set.
const DefaultLease = 15 * time.Second

// claimBatch bounds the tasks one claim takes.
const claimBatch = 100

func (s *Service) owner() string { return cmp.Or(s.Owner, "local") }

func (s *Service) leaseFor() time.Duration { return cmp.Or(s.Lease, DefaultLease) }

// lease is the lease a task this replica creates is stored with.
func (s *Service) lease() *store.TaskLease {
	return &store.TaskLease{Owner: s.owner(), For: s.leaseFor()}
}

// heldUntil is until when a lease asked for at asked lets this replica start queries.
func (s *Service) heldUntil(asked time.Time) time.Time { return asked.Add(s.leaseFor() / 2) }

// Resume takes up, at start, every running task no replica holds (all of them on a gateway of
// its own), due for a query now; it first releases what an earlier run under this replica's
// name held. It returns how many it took.
func (s *Service) Resume() (int, error) {
	if err := s.Store.ReleaseTasks(s.owner(), nil); err != nil {
		return 0, err
	}
	n := 0
	for {
		got, err := s.claim(s.Now())
		n += got
		if err != nil || got < claimBatch {
			return n, err
		}
	}
}

// claim leases up to claimBatch running tasks nobody holds, due now, and says how many.
func (s *Service) claim(now time.Time) (int, error) {
	ts, err := s.Store.ClaimTasks(s.owner(), s.leaseFor(), claimBatch)
	if err != nil {
		return 0, err
	}
	for i := range ts {
		s.sched.track(ts[i].ID, ts[i].CreatedAt, now, s.deadline(&ts[i]), s.heldUntil(now))
	}
	return len(ts), nil
}

// renew extends the leases of the tasks followed; those lost (another replica took them over,
// or they ended) are forgotten.
func (s *Service) renew(now time.Time) {
	ids := s.sched.ids()
	if len(ids) == 0 {
		return
	}
	held, err := s.Store.RenewTasks(s.owner(), ids, s.leaseFor())
	if err != nil {
		s.Log.Warn("task poller: leases not renewed; their tasks are not queried here past half their lease, and other replicas take them over once it ends",
			"tasks", len(ids), "error", err)
		return
	}
	if lost := len(ids) - len(held); lost > 0 {
		s.Log.Info("task poller: tasks now polled elsewhere or ended", "tasks", lost)
	}
	s.sched.renewed(ids, held, s.heldUntil(now))
}

// release lets the other replicas take this one's tasks over at once (a clean stop).
func (s *Service) release() {
	ids := s.sched.ids()
	if len(ids) == 0 {
		return
	}
	if err := s.Store.ReleaseTasks(s.owner(), ids); err != nil {
		s.Log.Warn("task poller: leases not released on stop; other replicas take the tasks over once they end", "tasks", len(ids), "error", err)
	}
}

// Poll advances the running tasks this replica leases in the background, so tasks complete
// (and their callbacks go out) without anybody asking: every tick, the tasks due (see
// interval) are queried with at most workers at a time; leases are renewed every quarter of
// the lease, and tasks nobody holds are claimed every fifth. On stop the leases are released.
func (s *Service) Poll(ctx context.Context, every time.Duration, workers int) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	defer s.release()
	defer wg.Wait()
	var renewed, swept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if now := s.Now(); now.Sub(renewed) >= s.leaseFor()/4 {
			s.renew(now)
			renewed = now
		}
		if now := s.Now(); now.Sub(swept) >= s.leaseFor()/5 {
			if n, err := s.claim(now); err != nil {
				s.Log.Warn("task poller: tasks nobody polls cannot be claimed", "error", err)
			} else if n > 0 {
				s.Log.Info("task poller: tasks taken over (their lease had ended)", "tasks", n)
			}
			swept = now
		}
		for _, id := range s.sched.due(s.Now()) {
			if !s.sched.holds(id, s.Now()) {
				continue // a lease not renewed in time: no query until it is
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				s.pollOne(ctx, id)
			}()
		}
	}
}

// pollOne queries one due task, cut at the other half of its lease.
func (s *Service) pollOne(ctx context.Context, id string) {
	t, err := s.Store.GetTask(id)
	if err != nil || t.Terminal() {
		if !errors.Is(err, store.ErrTaskNotFound) && err != nil {
			s.Log.Error("task poller: the store failed", "task", id, "error", err)
			s.sched.queried(id, s.Now(), failed, s.RefreshEvery)
			return
		}
		s.sched.forget(id) // gone or ended elsewhere
		return
	}
	rctx, cancel := context.WithTimeout(ctx, min(30*time.Second, s.leaseFor()/2))
	defer cancel()
	// A failure is the provider's (backed off in the schedule) or the store's (logged by
	// commit); either way the task stays scheduled and is tried again.
	_, _ = s.Refresh(rctx, t)
}

// Polls reports whether this replica polls task id (it holds its lease).
func (s *Service) Polls(id string) bool { return s.sched.polls(id) }
