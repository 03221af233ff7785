package bbolt

// The ledger: accounts hold a credit balance, and every served request is settled once as a
// usage record that debits its account. Money is exact decimal (shopspring/decimal), never
// float64, and is stored as decimal strings.
//
// Buckets:
//
//	accounts          account id → Account JSON
//	usage             8-byte big-endian unix nanos ‖ request id → the rest of the record (usage.go)
//	usage_by_request  request id → the record's 8-byte time (the idempotency index)
//	usage_agg         "2006-01-02" \x00 key id \x00 account \x00 model → UsageTotals JSON
//	spend_month       "2006-01" \x00 key id → decimal string
//	usage_route       route \x00 model → UsageTotals JSON
//
// Settle (SettleBatch, settle.go) writes all of them in one transaction, so the balance, the
// records and the aggregates always agree: initial credits + credits added == balance + sum of
// record costs. Records and their index are pruned after the retention window (prune.go); the
// aggregates, month spend and route usage are kept for good.

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

var (
	bucketAccounts       = []byte("accounts")
	bucketUsage          = []byte("usage")
	bucketUsageByRequest = []byte("usage_by_request")
	bucketUsageAgg       = []byte("usage_agg")
	bucketSpendMonth     = []byte("spend_month")
	bucketUsageRoute     = []byte("usage_route") // route \x00 model -> UsageTotals, all time
)

// CreateAccount creates an account holding credits (>= 0). An existing id fails with an error
// wrapping ErrExists; an invalid id or negative credits wrap ErrInvalid.
func (s *Store) CreateAccount(id string, credits decimal.Decimal) (store.Account, error) {
	a, err := store.NewAccount(id, credits, time.Now())
	if err != nil {
		return store.Account{}, err
	}
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		if b.Get([]byte(id)) != nil {
			return store.Errorf(store.ErrExists, "account %q already exists", id)
		}
		return putJSON(b, id, a)
	})
	if err != nil {
		return store.Account{}, err
	}
	s.changed(store.TopicAccounts, id)
	return a, nil
}

// EnsureAccount returns the account id, creating it with no credits if it does not exist;
// created says which happened.
func (s *Store) EnsureAccount(id string) (a store.Account, created bool, err error) {
	if err := store.NewAccountID(id); err != nil {
		return store.Account{}, false, err
	}
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		if v := b.Get([]byte(id)); v != nil {
			return jsonUnmarshal(v, &a)
		}
		a, created = store.Account{ID: id, Balance: decimal.Zero, CreatedAt: time.Now().UTC()}, true
		return putJSON(b, id, a)
	})
	if err != nil {
		return store.Account{}, false, err
	}
	if created {
		s.changed(store.TopicAccounts, id)
	}
	return a, created, nil
}

// CreditAccount adds amount (> 0) to an account's balance and returns the updated account.
func (s *Store) CreditAccount(id string, amount decimal.Decimal) (store.Account, error) {
	if err := store.CheckCredit(id, amount); err != nil {
		return store.Account{}, err
	}
	var a store.Account
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		if err := getAccount(b, id, &a); err != nil {
			return err
		}
		a.Balance = a.Balance.Add(amount)
		return putJSON(b, id, a)
	})
	if err != nil {
		return store.Account{}, err
	}
	s.changed(store.TopicAccounts, id)
	return a, nil
}

// GetAccount returns one account; ErrNotFound if absent.
func (s *Store) GetAccount(id string) (store.Account, error) {
	var a store.Account
	err := s.db.View(func(tx *bolt.Tx) error { return getAccount(tx.Bucket(bucketAccounts), id, &a) })
	return a, err
}

// Accounts lists all accounts sorted by id.
func (s *Store) Accounts() ([]store.Account, error) {
	var as []store.Account
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachJSON(tx.Bucket(bucketAccounts), func(a store.Account) { as = append(as, a) })
	})
	// bbolt iterates in byte order, which is id order; sort anyway so the contract does not
	// depend on the encoding.
	sort.Slice(as, func(i, j int) bool { return as[i].ID < as[j].ID })
	return as, err
}

func getAccount(b *bolt.Bucket, id string, a *store.Account) error {
	v := b.Get([]byte(id))
	if v == nil {
		return store.AccountNotFound(id)
	}
	return jsonUnmarshal(v, a)
}

// RouteUsage returns each route's usage since it was first used, by model: route id -> rows
// (Day and KeyID empty, Account empty, Model set).
func (s *Store) RouteUsage() (map[string][]store.UsageRow, error) {
	out := map[string][]store.UsageRow{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUsageRoute).ForEach(func(k, v []byte) error {
			route, model, _ := strings.Cut(string(k), "\x00")
			var ag store.UsageTotals
			if err := jsonUnmarshal(v, &ag); err != nil {
				return err
			}
			out[route] = append(out[route], store.UsageRow{Model: model, UsageTotals: ag})
			return nil
		})
	})
	return out, err
}

// MonthSpend returns each key's spend in month ("2006-01", UTC), key id → cost. Keys that spent
// nothing that month are absent.
func (s *Store) MonthSpend(month string) (map[string]decimal.Decimal, error) {
	if err := store.CheckMonth(month); err != nil {
		return nil, err
	}
	out := make(map[string]decimal.Decimal)
	prefix := []byte(month + "\x00")
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSpendMonth).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			d, err := decimal.NewFromString(string(v))
			if err != nil {
				return fmt.Errorf("store: decode spend %q: %w", k, err)
			}
			out[string(k[len(prefix):])] = d
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Usage sums the daily aggregates f selects. Rows are sorted by day, account, key, model.
func (s *Store) Usage(f store.UsageFilter) (store.UsageSummary, error) {
	since, until := f.Days()
	var sum store.UsageSummary
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketUsageAgg).Cursor()
		for k, v := c.Seek([]byte(since)); k != nil; k, v = c.Next() {
			parts := strings.SplitN(string(k), "\x00", 4)
			if len(parts) != 4 {
				return fmt.Errorf("store: malformed usage aggregate key %q", k)
			}
			if until != "" && parts[0] > until {
				break
			}
			if !f.Match(parts[1], parts[2], parts[3]) {
				continue
			}
			var ag store.UsageTotals
			if err := jsonUnmarshal(v, &ag); err != nil {
				return err
			}
			sum.Rows = append(sum.Rows, store.UsageRow{Day: parts[0], KeyID: parts[1], Account: parts[2], Model: parts[3], UsageTotals: ag})
			sum.Add(ag)
		}
		return nil
	})
	if err != nil {
		return store.UsageSummary{}, err
	}
	sort.Slice(sum.Rows, func(i, j int) bool {
		a, b := sum.Rows[i], sum.Rows[j]
		if a.Day != b.Day {
			return a.Day < b.Day
		}
		if a.Account != b.Account {
			return a.Account < b.Account
		}
		if a.KeyID != b.KeyID {
			return a.KeyID < b.KeyID
		}
		return a.Model < b.Model
	})
	return sum, nil
}

// UsageRecords returns the records f selects, newest first, at most limit of them (limit <= 0:
// all). Since and Until select whole UTC days, as in Usage, so both see the same requests.
func (s *Store) UsageRecords(f store.UsageFilter, limit int) ([]store.UsageRecord, error) {
	lo, hi := f.Window() // record time >= lo and < hi; zero is unbounded
	var out []store.UsageRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketUsage).Cursor()
		var k, v []byte
		if hi.IsZero() {
			k, v = c.Last()
		} else if k, _ = c.Seek(usageKey(hi, "")); k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		for ; k != nil; k, v = c.Prev() {
			if len(k) < 8 {
				return fmt.Errorf("store: malformed usage key %q", k)
			}
			if !lo.IsZero() && usageKeyTime(k).Before(lo) {
				break
			}
			var r store.UsageRecord
			if err := decodeUsage(k, v, &r); err != nil {
				return err
			}
			if !f.Match(r.KeyID, r.Account, r.Model) {
				continue
			}
			out = append(out, r)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// UsageRecordCount is the number of usage records kept (settled within the retention window).
func (s *Store) UsageRecordCount() (int, error) {
	var n int
	err := s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketUsageByRequest).Stats().KeyN
		return nil
	})
	return n, err
}
