package settle

import "github.com/tollway/tollway/store"

// HoldChanges are the hold rows a settling transaction writes beside its records.
type HoldChanges struct {
	// Put writes each hold's record (a new hold, or a checkpoint of its progress).
	Put []store.UsageRecord
	// Drop deletes the rows of holds released unbilled.
	Drop []string
	// Held reports whether a record's hold row is on disk: settling the record deletes it.
	// Nil: none is.
	Held func(requestID string) bool
}

// Empty reports whether hc writes no hold row.
func (h *HoldChanges) Empty() bool { return len(h.Put) == 0 && len(h.Drop) == 0 }

// Held settles recs, the records of holds left unsettled, with settle (a store's
// SettleWith), deleting their hold rows and those of bad (holds that did not decode, whose
// failures are in failed): a hold whose record cannot be stored is dropped and its failure
// returned. It reports how many records were settled (now, or before the stop).
func Held(settle func([]store.UsageRecord, HoldChanges) ([]error, error), recs []store.UsageRecord, bad []string,
	failed []error) (settled int, _ []error, err error) {
	if len(recs) == 0 && len(bad) == 0 {
		return 0, failed, nil
	}
	all := func(string) bool { return true }
	errs, err := settle(recs, HoldChanges{Drop: bad, Held: all})
	if err != nil {
		return 0, failed, err
	}
	bad = bad[:0]
	for i, e := range errs {
		switch {
		case e == nil:
			settled++
		case store.RecordFault(e):
			bad = append(bad, recs[i].RequestID)
			failed = append(failed, e)
		default:
			return settled, failed, e
		}
	}
	if len(bad) > 0 {
		if _, err := settle(nil, HoldChanges{Drop: bad}); err != nil {
			return settled, failed, err
		}
	}
	return settled, failed, nil
}
