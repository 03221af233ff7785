package postgres

// Health: the database is unavailable from the moment a call fails for a reason that is not
// its data's (the server unreachable, restarting, out of room, a timeout) or the listener
// loses its connection, until a call commits again or the listener is back. Reading it is one
// atomic load: no round trip on the request path.

import (
	"time"

	"github.com/tollway/tollway/store"
)

type health struct{ store.OutageState }

func (h *health) fail(err error) {
	h.Fail(&store.Outage{Cause: store.CauseUnreachable, Err: err, Since: time.Now().UTC()})
}

func (h *health) ok() { h.OK() }

// Unavailable is the current outage as an error, nil while the database takes writes.
func (s *Store) Unavailable() error { return s.health.Err() }

// Outage is the current outage, nil while healthy.
func (s *Store) Outage() *store.Outage { return s.health.Current() }

// ReserveState is "none": the database's disk is the server's to keep room on.
func (s *Store) ReserveState() string { return "none" }

// recovery is closed when the current outage ends; nil while there is none.
func (s *Store) recovery() <-chan struct{} { return s.health.Recovery() }

// Where is the database as errors and status name it: host:port/database, never the password.
func (s *Store) Where() string { return s.where }
