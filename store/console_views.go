package store

// Reads and one update the web console needs (through the admin API): usage by route and day
// from the usage records, when each key was last used, and a key's limits changed in place.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
)

// SetKeyLimits replaces a key's monthly limit (nil: none) and model allow-list (empty: every
// model) together.
func (s *Store) SetKeyLimits(id string, limit *decimal.Decimal, models []string) (Key, error) {
	return s.ChangeKeyLimits(id, KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: limit, SetModels: true, Models: models})
}

// KeyLimitsChange says which of a key's limits change: a setting whose Set flag is false is kept.
type KeyLimitsChange struct {
	SetMonthlyLimit bool
	MonthlyLimit    *decimal.Decimal // nil: no limit
	SetModels       bool
	Models          []string // empty: every model
}

// ChangeKeyLimits changes the settings c names of a key, in one transaction, so a change of one
// never undoes a concurrent change of the other. A revoked key's limits cannot change.
func (s *Store) ChangeKeyLimits(id string, c KeyLimitsChange) (Key, error) {
	if c.MonthlyLimit != nil && c.MonthlyLimit.Sign() < 0 {
		return Key{}, errorOf(ErrInvalid, "monthly limit %s is negative", c.MonthlyLimit)
	}
	var list []string
	seen := make(map[string]bool, len(c.Models))
	for _, m := range c.Models {
		if m == "" {
			return Key{}, errorOf(ErrInvalid, "a key's model list has an empty model id")
		}
		if !seen[m] {
			seen[m] = true
			list = append(list, m)
		}
	}
	return s.updateKey(id, func(k *Key) (string, error) {
		if k.RevokedAt != nil {
			return "", errorOf(ErrInvalid, "key %q is revoked; its limits cannot change (create a new key instead)", id)
		}
		if c.SetMonthlyLimit {
			k.MonthlyLimit = nil
			if c.MonthlyLimit != nil {
				l := *c.MonthlyLimit
				k.MonthlyLimit = &l
			}
		}
		if c.SetModels {
			k.Models = list
		}
		return "", nil
	})
}

// RecordRow is the usage of one (day, route, key, account, model), summed from usage records.
// Route is "" for requests that named a model rather than a route.
type RecordRow struct {
	Day     string `json:"day"`
	Route   string `json:"route"`
	KeyID   string `json:"key_id"`
	Account string `json:"account"`
	Model   string `json:"model"`
	UsageTotals
}

// UsageByRecords sums the usage records f selects (and route, when not "") per day, route,
// key, account and model, sorted in that order. The daily aggregates (Usage) have no route;
// the records do, but only as long as the retention keeps them (store.usage_retention_days).
// Since and Until select whole UTC days, inclusive, as in Usage.
func (s *Store) UsageByRecords(f UsageFilter, route string) ([]RecordRow, error) {
	lo, hi := recordWindow(f)
	rows := map[[5]string]*RecordRow{}
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
			var r UsageRecord
			if err := decodeUsage(k, v, &r); err != nil {
				return err
			}
			if !f.match(r.KeyID, r.Account, r.Model) || (route != "" && r.Route != route) {
				continue
			}
			id := [5]string{r.Time.UTC().Format(dayLayout), r.Route, r.KeyID, r.Account, r.Model}
			row := rows[id]
			if row == nil {
				row = &RecordRow{Day: id[0], Route: id[1], KeyID: id[2], Account: id[3], Model: id[4]}
				rows[id] = row
			}
			row.Add(r.totals())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]RecordRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		for _, p := range [][2]string{{a.Day, b.Day}, {a.Route, b.Route}, {a.KeyID, b.KeyID}, {a.Account, b.Account}} {
			if p[0] != p[1] {
				return p[0] < p[1]
			}
		}
		return a.Model < b.Model
	})
	return out, nil
}

// recordWindow is f's days as record times: >= lo and < hi; zero is unbounded.
func recordWindow(f UsageFilter) (lo, hi time.Time) {
	if !f.Since.IsZero() {
		y, m, d := f.Since.UTC().Date()
		lo = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	if !f.Until.IsZero() {
		y, m, d := f.Until.UTC().Date()
		hi = time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	}
	return lo, hi
}

// LastUsed is when a key last settled a request: the record's time when a usage record still
// shows it (Exact), else the start of the last UTC day the daily aggregates count it on.
type LastUsed struct {
	Time  time.Time `json:"time"`
	Exact bool      `json:"exact"`
}

// KeysLastUsed returns, for every key that ever settled a request, when it last did. The day
// comes from the aggregates (kept for good); the exact time from the newest records, read
// backwards at most scanLimit of them (the rest keep the day).
func (s *Store) KeysLastUsed(scanLimit int) (map[string]LastUsed, error) {
	out := map[string]LastUsed{}
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
			day, err := time.Parse(dayLayout, parts[0])
			if err != nil {
				return fmt.Errorf("store: malformed usage aggregate day %q", parts[0])
			}
			out[parts[1]] = LastUsed{Time: day}
		}
		pending := len(out)
		rc := tx.Bucket(bucketUsage).Cursor()
		n := 0
		for k, v := rc.Last(); k != nil && pending > 0 && n < scanLimit; k, v = rc.Prev() {
			n++
			var r UsageRecord
			if err := decodeUsage(k, v, &r); err != nil {
				return err
			}
			if lu, ok := out[r.KeyID]; ok && !lu.Exact {
				out[r.KeyID] = LastUsed{Time: r.Time.UTC(), Exact: true}
				pending--
			}
		}
		return nil
	})
	return out, err
}
