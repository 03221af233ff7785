package postgres

// Health: the database is unavailable from the moment a call fails for a reason that is not
// its data's (the server unreachable, restarting, out of room, a timeout) or the listener
// loses its connection, until a call commits again or the listener is back. Reading it is one
// atomic load: no round trip on the request path.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/store"
)

type health struct {
	outage    atomic.Pointer[store.Outage]
	mu        sync.Mutex
	recovered chan struct{} // closed when the current outage ends; nil while healthy
}

func (h *health) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outage.Load() != nil {
		return
	}
	h.outage.Store(&store.Outage{Cause: store.CauseUnreachable, Err: err, Since: time.Now().UTC()})
	h.recovered = make(chan struct{})
}

func (h *health) ok() {
	if h.outage.Load() == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recovered != nil {
		close(h.recovered)
		h.recovered = nil
	}
	h.outage.Store(nil)
}

// Unavailable is the current outage as an error, nil while the database takes writes.
func (s *Store) Unavailable() error {
	if o := s.health.outage.Load(); o != nil {
		return o
	}
	return nil
}

// Outage is the current outage, nil while healthy.
func (s *Store) Outage() *store.Outage { return s.health.outage.Load() }

// ReserveState is "none": the database's disk is the server's to keep room on.
func (s *Store) ReserveState() string { return "none" }

// recovery is closed when the current outage ends; nil while there is none.
func (s *Store) recovery() <-chan struct{} {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.recovered
}
