package store

import "time"

// SpoolStatus is a replica's local spool of usage records in front of a shared store: the
// lag (Records spooled and not yet shipped to the database, Oldest the oldest one's time;
// zero when none), its open holds, and what it shipped (records and batches) or had refused
// by the database (Rejected, kept in the spool). Outage is the spool's own (its disk), nil
// while it takes records.
type SpoolStatus struct {
	Path     string
	Records  int64
	Oldest   time.Time
	Holds    int64
	Shipped  int64
	Batches  int64
	Rejected int64
	Outage   *Outage
}

// Lag is how long the oldest record has waited to be shipped at now (0 when none waits).
func (s SpoolStatus) Lag(now time.Time) time.Duration {
	if s.Records == 0 || s.Oldest.IsZero() {
		return 0
	}
	return max(now.Sub(s.Oldest), 0)
}
