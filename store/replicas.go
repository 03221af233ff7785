package store

import "time"

// Replica is one gateway process sharing the store, as it last announced itself.
type Replica struct {
	Name      string
	Version   string
	StartedAt time.Time
	// LastSeen is when it last renewed its registration (its own clock).
	LastSeen time.Time
	// Lease is how long it may stay silent before it is taken for gone.
	Lease time.Duration
}

// Gone reports whether r has been silent for longer than its lease at now.
func (r Replica) Gone(now time.Time) bool { return now.Sub(r.LastSeen) > r.Lease }

// Replicas is the registry of the gateway processes sharing the store: each registers and
// renews itself (Heartbeat) within its lease, and leaves when it stops cleanly.
type Replicas interface {
	// Heartbeat registers r, or renews the replica of its name: every field becomes r's.
	Heartbeat(r Replica) error
	// Replicas lists the registered replicas, sorted by name.
	Replicas() ([]Replica, error)
	// LeaveReplica removes the replica of name (a clean stop); an unknown name is no error.
	LeaveReplica(name string) error
	// DropReplicas removes the replicas last seen before before, and says how many.
	DropReplicas(before time.Time) (int, error)
}

// maxReplicaName bounds a replica's name (a label in status).
const maxReplicaName = 253

// Validate checks what a registration must have: a name and a lease.
func (r Replica) Validate() error {
	if r.Name == "" || len(r.Name) > maxReplicaName {
		return Errorf(ErrInvalid, "replica name %q: give 1 to %d characters (replica.name; default the host name and pid)", ShortID(r.Name), maxReplicaName)
	}
	if r.Lease <= 0 {
		return Errorf(ErrInvalid, "replica %s: the lease must be positive, not %s", r.Name, r.Lease)
	}
	if r.LastSeen.IsZero() || r.StartedAt.IsZero() {
		return Errorf(ErrInvalid, "replica %s: started_at and last_seen are required", r.Name)
	}
	return nil
}
