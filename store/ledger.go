package store

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
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
)

var (
	bucketAccounts       = []byte("accounts")
	bucketUsage          = []byte("usage")
	bucketUsageByRequest = []byte("usage_by_request")
	bucketUsageAgg       = []byte("usage_agg")
	bucketSpendMonth     = []byte("spend_month")
	bucketUsageRoute     = []byte("usage_route") // route \x00 model -> UsageTotals, all time
)

const (
	dayLayout   = "2006-01-02"
	monthLayout = "2006-01"
)

// Account is a prepaid balance that keys draw on. Settling never takes it below zero: usage
// that costs more than is left is recorded, the rest as overage (settle.go).
type Account struct {
	ID        string          `json:"id"`
	Balance   decimal.Decimal `json:"balance"`
	CreatedAt time.Time       `json:"created_at"`
}

var accountIDFormat = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

func validAccountID(id string) error {
	if !accountIDFormat.MatchString(id) {
		return errorOf(ErrInvalid, "account id %q must be 1-128 characters of letters, digits and _ . @ -, starting with a letter or digit", ShortID(id))
	}
	return nil
}

// CreateAccount creates an account holding credits (>= 0). An existing id fails with an error
// wrapping ErrExists; an invalid id or negative credits wrap ErrInvalid.
func (s *Store) CreateAccount(id string, credits decimal.Decimal) (Account, error) {
	if err := validAccountID(id); err != nil {
		return Account{}, err
	}
	if strings.HasPrefix(id, PaidAccountPrefix) {
		return Account{}, errorOf(ErrInvalid, "account id %q: ids starting with %q are the gateway's own (requests paid through x402 without a key); choose another", ShortID(id), PaidAccountPrefix)
	}
	if credits.Sign() < 0 {
		return Account{}, errorOf(ErrInvalid, "account %q: credits %s are negative", id, credits)
	}
	a := Account{ID: id, Balance: credits, CreatedAt: time.Now().UTC()}
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		if b.Get([]byte(id)) != nil {
			return errorOf(ErrExists, "account %q already exists", id)
		}
		return putJSON(b, id, a)
	})
	if err != nil {
		return Account{}, err
	}
	return a, nil
}

// EnsureAccount returns the account id, creating it with no credits if it does not exist;
// created says which happened.
func (s *Store) EnsureAccount(id string) (a Account, created bool, err error) {
	if err := validAccountID(id); err != nil {
		return Account{}, false, err
	}
	if strings.HasPrefix(id, PaidAccountPrefix) {
		return Account{}, false, errorOf(ErrInvalid, "account id %q: ids starting with %q are the gateway's own (requests paid through x402 without a key); choose another", ShortID(id), PaidAccountPrefix)
	}
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		if v := b.Get([]byte(id)); v != nil {
			return jsonUnmarshal(v, &a)
		}
		a, created = Account{ID: id, Balance: decimal.Zero, CreatedAt: time.Now().UTC()}, true
		return putJSON(b, id, a)
	})
	if err != nil {
		return Account{}, false, err
	}
	return a, created, nil
}

// CreditAccount adds amount (> 0) to an account's balance and returns the updated account.
func (s *Store) CreditAccount(id string, amount decimal.Decimal) (Account, error) {
	if amount.Sign() <= 0 {
		return Account{}, errorOf(ErrInvalid, "account %q: a credit must be positive, got %s", id, amount)
	}
	var a Account
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccounts)
		if err := getAccount(b, id, &a); err != nil {
			return err
		}
		a.Balance = a.Balance.Add(amount)
		return putJSON(b, id, a)
	})
	if err != nil {
		return Account{}, err
	}
	return a, nil
}

// GetAccount returns one account; ErrNotFound if absent.
func (s *Store) GetAccount(id string) (Account, error) {
	var a Account
	err := s.db.View(func(tx *bolt.Tx) error { return getAccount(tx.Bucket(bucketAccounts), id, &a) })
	return a, err
}

// Accounts lists all accounts sorted by id.
func (s *Store) Accounts() ([]Account, error) {
	var as []Account
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachJSON(tx.Bucket(bucketAccounts), func(a Account) { as = append(as, a) })
	})
	// bbolt iterates in byte order, which is id order; sort anyway so the contract does not
	// depend on the encoding.
	sort.Slice(as, func(i, j int) bool { return as[i].ID < as[j].ID })
	return as, err
}

func getAccount(b *bolt.Bucket, id string, a *Account) error {
	v := b.Get([]byte(id))
	if v == nil {
		return errorOf(ErrNotFound, "account %q: not found", id)
	}
	return jsonUnmarshal(v, a)
}

// RouteUsage returns each route's usage since it was first used, by model: route id -> rows
// (Day and KeyID empty, Account empty, Model set).
func (s *Store) RouteUsage() (map[string][]UsageRow, error) {
	out := map[string][]UsageRow{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUsageRoute).ForEach(func(k, v []byte) error {
			route, model, _ := strings.Cut(string(k), "\x00")
			var ag UsageTotals
			if err := jsonUnmarshal(v, &ag); err != nil {
				return err
			}
			out[route] = append(out[route], UsageRow{Model: model, UsageTotals: ag})
			return nil
		})
	})
	return out, err
}

// MonthSpend returns each key's spend in month ("2006-01", UTC), key id → cost. Keys that spent
// nothing that month are absent.
func (s *Store) MonthSpend(month string) (map[string]decimal.Decimal, error) {
	if _, err := time.Parse(monthLayout, month); err != nil || len(month) != len(monthLayout) {
		return nil, errorOf(ErrInvalid, "month %q: want YYYY-MM", month)
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

// UsageFilter selects usage. Empty strings match everything; Since and Until select whole UTC
// days, inclusive, and a zero time is unbounded.
type UsageFilter struct {
	KeyID, Account, Model string
	Since, Until          time.Time
}

func (f UsageFilter) days() (since, until string) {
	if !f.Since.IsZero() {
		since = f.Since.UTC().Format(dayLayout)
	}
	if !f.Until.IsZero() {
		until = f.Until.UTC().Format(dayLayout)
	}
	return since, until
}

func (f UsageFilter) match(keyID, account, model string) bool {
	return (f.KeyID == "" || f.KeyID == keyID) &&
		(f.Account == "" || f.Account == account) &&
		(f.Model == "" || f.Model == model)
}

// UsageRow is the usage of one key on one model on one UTC day.
type UsageRow struct {
	Day     string `json:"day"`
	KeyID   string `json:"key_id"`
	Account string `json:"account"`
	Model   string `json:"model"`
	UsageTotals
}

// UsageSummary totals the rows a filter selects.
type UsageSummary struct {
	UsageTotals
	Rows []UsageRow `json:"rows"`
}

// Usage sums the daily aggregates f selects. Rows are sorted by day, account, key, model.
func (s *Store) Usage(f UsageFilter) (UsageSummary, error) {
	since, until := f.days()
	var sum UsageSummary
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
			if !f.match(parts[1], parts[2], parts[3]) {
				continue
			}
			var ag UsageTotals
			if err := jsonUnmarshal(v, &ag); err != nil {
				return err
			}
			sum.Rows = append(sum.Rows, UsageRow{Day: parts[0], KeyID: parts[1], Account: parts[2], Model: parts[3], UsageTotals: ag})
			sum.Add(ag)
		}
		return nil
	})
	if err != nil {
		return UsageSummary{}, err
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
func (s *Store) UsageRecords(f UsageFilter, limit int) ([]UsageRecord, error) {
	lo, hi := recordWindow(f) // record time >= lo and < hi; zero is unbounded
	var out []UsageRecord
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
			var r UsageRecord
			if err := decodeUsage(k, v, &r); err != nil {
				return err
			}
			if !f.match(r.KeyID, r.Account, r.Model) {
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
