package tasks

import (
	"sort"
	"sync"
	"time"
)

// schedule is when each running task this replica polls is queried next, in memory: the
// poller reads it every tick without touching the store, and a query that changes nothing
// writes nothing. It holds the tasks this replica leases (store.TaskLeases, poller.go), each
// until its lease is held (a lease not renewed in time stops its queries here before another
// replica may claim it). A restart loses it on purpose: every running task it claims is then
// due at once (Resume); its deadline comes from its stored created_at, so max_age holds across
// restarts (a run of unknown answers starts again).
type schedule struct {
	mu    sync.Mutex
	tasks map[string]*polling
}

// polling is one running task's place in the schedule.
type polling struct {
	created  time.Time
	deadline time.Time // when the task times out (created + max_age): it is due then at the latest
	next     time.Time // the poller queries it at or after next
	last     time.Time // the last query (a GET refreshes only when it is older than RefreshEvery)
	failures int       // queries in a row that failed (backoff)
	held     time.Time // this replica's lease counts until then (its own clock)
	// unknown counts the answers in a row saying the provider does not know the task, the
	// first of them at unknownSince.
	unknown      int
	unknownSince time.Time
}

// outcome is what one query of a task came to.
type outcome int

const (
	answered    outcome = iota // the provider said how the task is
	unknownTask                // the provider said it does not know the task
	failed                     // no answer (unreachable, an error): back off
)

// track adds a running task leased until held, due at next, timing out at deadline; a task
// tracked already has its lease extended.
func (s *schedule) track(id string, created, next, deadline, held time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks == nil {
		s.tasks = map[string]*polling{}
	}
	if p, ok := s.tasks[id]; ok {
		p.held = held
		return
	}
	s.tasks[id] = &polling{created: created, next: earliest(next, deadline), deadline: deadline, held: held}
}

// ids lists the tasks followed (to renew their leases).
func (s *schedule) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.tasks))
	for id := range s.tasks {
		out = append(out, id)
	}
	return out
}

// renewed records a renewal asked for asked: those of asked in held are leased until until;
// the others (another replica took them over, or they ended) are forgotten. Tasks tracked
// after the renewal was asked for keep their own lease.
func (s *schedule) renewed(asked, held []string, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := make(map[string]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	for _, id := range asked {
		if p := s.tasks[id]; p != nil {
			if keep[id] {
				p.held = until
			} else {
				delete(s.tasks, id)
			}
		}
	}
}

// holds reports whether this replica may start a query of task id at now: its lease, counted
// on this replica's clock, has not passed the point where queries stop.
func (s *schedule) holds(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.tasks[id]
	return p != nil && now.Before(p.held)
}

// polls reports whether this replica polls task id (it holds or held its lease, and has not
// learnt that it lost it).
func (s *schedule) polls(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[id] != nil
}

// forget removes a task that ended.
func (s *schedule) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lastQuery is when the task was last queried (zero: never, or not running here).
func (s *schedule) lastQuery(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.tasks[id]; p != nil {
		return p.last
	}
	return time.Time{}
}

// queried records a query's outcome: the next one is due after backoff on failure, else after
// the task's polling interval, and never after the task's deadline. It returns the answers in a
// row that did not know the task and when the first of them came (a failed query neither
// breaks nor extends the run).
func (s *schedule) queried(id string, now time.Time, o outcome, every time.Duration) (unknown int, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.tasks[id]
	if p == nil {
		return 0, time.Time{}
	}
	p.last = now
	switch o {
	case failed:
		p.failures++
		p.next = now.Add(backoff(p.failures))
	case unknownTask:
		if p.unknown == 0 {
			p.unknownSince = now
		}
		p.unknown++
		p.failures, p.next = 0, now.Add(interval(now.Sub(p.created), every))
	default:
		p.unknown = 0
		p.failures, p.next = 0, now.Add(interval(now.Sub(p.created), every))
	}
	if now.Before(p.deadline) {
		p.next = earliest(p.next, p.deadline)
	}
	return p.unknown, p.unknownSince
}

// due lists the tasks due at now, the longest overdue first.
func (s *schedule) due(now time.Time) []string {
	s.mu.Lock()
	type item struct {
		id string
		at time.Time
	}
	var out []item
	for id, p := range s.tasks {
		if !p.next.After(now) {
			out = append(out, item{id, p.next})
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	ids := make([]string, len(out))
	for i, it := range out {
		ids[i] = it.id
	}
	return ids
}

// size is the number of running tasks.
func (s *schedule) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tasks)
}

// maxInterval bounds the time between two background queries of a running task: a callback
// arrives at most this late after the provider finished.
const maxInterval = 15 * time.Second

// interval spaces the background queries of a task of age age: every (RefreshEvery) while it
// is young, then a tenth of its age, at most maxInterval. Videos take minutes; querying a
// five-minute task every 3 s would cost five times the queries for nothing.
func interval(age, every time.Duration) time.Duration {
	return max(every, min(age/10, maxInterval))
}

// backoff spaces the queries of a task whose provider fails: 5 s doubling to 10 min.
func backoff(failures int) time.Duration {
	d := 5 * time.Second
	for i := 1; i < failures && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}
