package store

// Leases on running tasks and due callbacks: which replica polls each task and which sends
// each callback. A lease ends at an expiry unless renewed, so a replica that dies is replaced
// once its leases end; the store's own clock (the database's, on Postgres) decides expiry, so
// replicas' clocks need not agree.

import "time"

// TaskLeases say which replica polls each running task: exactly one at a time.
type TaskLeases interface {
	// ClaimTasks leases to owner, for lease, up to limit running tasks no replica holds (never
	// leased, released, or whose lease expired), and returns them. Of any number of concurrent
	// claims, each task goes to one; a finished task is never claimed.
	ClaimTasks(owner string, lease time.Duration, limit int) ([]Task, error)
	// RenewTasks extends owner's leases on ids to lease from now and returns the ids owner
	// still holds; a task another replica claimed, or that finished, is left out.
	RenewTasks(owner string, ids []string, lease time.Duration) ([]string, error)
	// ReleaseTasks ends owner's leases on ids (all of owner's when ids is nil), so any replica
	// claims them at once: a clean stop, or a restart under the same name.
	ReleaseTasks(owner string, ids []string) error
}

// TaskLease is a lease a new task is written with (TaskChange.Lease): its creator polls it.
type TaskLease struct {
	Owner string
	For   time.Duration
}

// Validate checks a lease: an owner and a positive duration.
func (l *TaskLease) Validate() error {
	if l.Owner == "" || len(l.Owner) > maxReplicaName || l.For <= 0 {
		return Errorf(ErrInvalid, "store: a task lease needs an owner (a replica name of 1 to %d characters) and a positive duration, not %q for %s",
			maxReplicaName, ShortID(l.Owner), l.For)
	}
	return nil
}

// CallbackLeases say which replica sends each due callback: exactly one at a time, and
// another once the lease of one that died ends (the same callback, with the same id).
type CallbackLeases interface {
	// ClaimCallback leases c to owner for lease if it is still due and nobody holds it, and
	// reports whether it did: only then may owner send it. Ack or Retry ends the lease; a
	// lease that ends unacknowledged makes c due again.
	ClaimCallback(c Callback, owner string, lease time.Duration) (bool, error)
}
