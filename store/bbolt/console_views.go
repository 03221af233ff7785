package bbolt

// Reads and one update the web console needs (through the admin API): usage by route and day
// from the usage records, when each key was last used, and a key's limits changed in place.

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// SetKeyLimits replaces a key's monthly limit (nil: none) and model allow-list (empty: every
// model) together.
func (s *Store) SetKeyLimits(id string, limit *decimal.Decimal, models []string) (store.Key, error) {
	return s.ChangeKeyLimits(id, store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: limit, SetModels: true, Models: models})
}

// ChangeKeyLimits changes the settings c names of a key, in one transaction, so a change of one
// never undoes a concurrent change of the other. A revoked key's limits cannot change.
func (s *Store) ChangeKeyLimits(id string, c store.KeyLimitsChange) (store.Key, error) {
	if err := c.Check(); err != nil {
		return store.Key{}, err
	}
	return s.updateKey(id, c.Apply)
}

// UsageByRecords sums the usage records f selects (and route, when not "") per day, route,
// key, account and model, sorted in that order. The daily aggregates (Usage) have no route;
// the records do, but only as long as the retention keeps them (store.usage_retention_days).
// Since and Until select whole UTC days, inclusive, as in Usage.
func (s *Store) UsageByRecords(f store.UsageFilter, route string) ([]store.RecordRow, error) {
	lo, hi := f.Window()
	rows := store.RecordRows{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketUsage).Cursor()
		var k, v []byte
		if lo.IsZero() {
			k, v = c.First()
		} else {
			k, v = c.Seek(usageKey(lo, ""))
		}
		for ; k != nil; k, v = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("store: malformed usage key %q", k)
			}
			if !hi.IsZero() && !usageKeyTime(k).Before(hi) {
				break
			}
			var r store.UsageRecord
			if err := decodeUsage(k, v, &r); err != nil {
				return err
			}
			if !f.Match(r.KeyID, r.Account, r.Model) || (route != "" && r.Route != route) {
				continue
			}
			rows.Add(&r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows.Sorted(), nil
}

// KeysLastUsed returns, for every key that ever settled a request, when it last did. The day
// comes from the aggregates (kept for good); the exact time from the newest records, read
// backwards at most scanLimit of them (the rest keep the day).
func (s *Store) KeysLastUsed(scanLimit int) (map[string]store.LastUsed, error) {
	out := map[string]store.LastUsed{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketUsageAgg).Cursor()
		for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
			parts := strings.SplitN(string(k), "\x00", 4)
			if len(parts) != 4 {
				return fmt.Errorf("store: malformed usage aggregate key %q", k)
			}
			if _, seen := out[parts[1]]; seen {
				continue
			}
			day, err := time.Parse(store.DayLayout, parts[0])
			if err != nil {
				return fmt.Errorf("store: malformed usage aggregate day %q", parts[0])
			}
			out[parts[1]] = store.LastUsed{Time: day}
		}
		pending := len(out)
		rc := tx.Bucket(bucketUsage).Cursor()
		n := 0
		for k, v := rc.Last(); k != nil && pending > 0 && n < scanLimit; k, v = rc.Prev() {
			n++
			var r store.UsageRecord
			if err := decodeUsage(k, v, &r); err != nil {
				return err
			}
			if lu, ok := out[r.KeyID]; ok && !lu.Exact {
				out[r.KeyID] = store.LastUsed{Time: r.Time.UTC(), Exact: true}
				pending--
			}
		}
		return nil
	})
	return out, err
}
