package store

// The ledger's records: accounts hold a credit balance, and every served request is settled once
// as a usage record that debits its account. Money is exact decimal (shopspring/decimal), never
// float64.

import (
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Layouts of the UTC day and month usage is counted by.
const (
	DayLayout   = "2006-01-02"
	MonthLayout = "2006-01"
)

// Account is a prepaid balance that keys draw on. Settling never takes it below zero: usage
// that costs more than is left is recorded, the rest as overage (CapDebit).
type Account struct {
	ID        string          `json:"id"`
	Balance   decimal.Decimal `json:"balance"`
	CreatedAt time.Time       `json:"created_at"`
}

var accountIDFormat = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

// ValidAccountID refuses an account id that is not 1-128 characters of letters, digits and
// _ . @ - (ErrInvalid).
func ValidAccountID(id string) error {
	if !accountIDFormat.MatchString(id) {
		return Errorf(ErrInvalid, "account id %q must be 1-128 characters of letters, digits and _ . @ -, starting with a letter or digit", ShortID(id))
	}
	return nil
}

// NewAccountID refuses an id no account may be created with: an invalid one, or one of the
// gateway's own (PaidAccountPrefix).
func NewAccountID(id string) error {
	if err := ValidAccountID(id); err != nil {
		return err
	}
	if strings.HasPrefix(id, PaidAccountPrefix) {
		return Errorf(ErrInvalid, "account id %q: ids starting with %q are the gateway's own (requests paid through x402 without a key); choose another", ShortID(id), PaidAccountPrefix)
	}
	return nil
}

// NewAccount is the record of a new account holding credits (>= 0) created at now; an invalid
// id or negative credits wrap ErrInvalid.
func NewAccount(id string, credits decimal.Decimal, now time.Time) (Account, error) {
	if err := NewAccountID(id); err != nil {
		return Account{}, err
	}
	if credits.Sign() < 0 {
		return Account{}, Errorf(ErrInvalid, "account %q: credits %s are negative", id, credits)
	}
	return Account{ID: id, Balance: credits, CreatedAt: now.UTC()}, nil
}

// CheckCredit refuses a credit that is not positive (ErrInvalid).
func CheckCredit(id string, amount decimal.Decimal) error {
	if amount.Sign() <= 0 {
		return Errorf(ErrInvalid, "account %q: a credit must be positive, got %s", id, amount)
	}
	return nil
}

// AccountNotFound is the error of an account that does not exist.
func AccountNotFound(id string) error { return Errorf(ErrNotFound, "account %q: not found", id) }

// CheckMonth refuses a month that is not "2006-01" (ErrInvalid).
func CheckMonth(month string) error {
	if _, err := time.Parse(MonthLayout, month); err != nil || len(month) != len(MonthLayout) {
		return Errorf(ErrInvalid, "month %q: want YYYY-MM", month)
	}
	return nil
}

// UsageFilter selects usage. Empty strings match everything; Since and Until select whole UTC
// days, inclusive, and a zero time is unbounded.
type UsageFilter struct {
	KeyID, Account, Model string
	Since, Until          time.Time
}

// Days are f's first and last day ("" unbounded).
func (f UsageFilter) Days() (since, until string) {
	if !f.Since.IsZero() {
		since = f.Since.UTC().Format(DayLayout)
	}
	if !f.Until.IsZero() {
		until = f.Until.UTC().Format(DayLayout)
	}
	return since, until
}

// Match reports whether usage of keyID, account and model passes f's strings.
func (f UsageFilter) Match(keyID, account, model string) bool {
	return (f.KeyID == "" || f.KeyID == keyID) &&
		(f.Account == "" || f.Account == account) &&
		(f.Model == "" || f.Model == model)
}

// Window is f's days as record times: >= lo and < hi; zero is unbounded.
func (f UsageFilter) Window() (lo, hi time.Time) {
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

// LastUsed is when a key last settled a request: the record's time when a usage record still
// shows it (Exact), else the start of the last UTC day the daily aggregates count it on.
type LastUsed struct {
	Time  time.Time `json:"time"`
	Exact bool      `json:"exact"`
}

// RecordRows sums usage records per day, route, key, account and model (UsageByRecords).
type RecordRows map[[5]string]*RecordRow

// Add counts r in its row.
func (m RecordRows) Add(r *UsageRecord) {
	id := [5]string{r.Time.UTC().Format(DayLayout), r.Route, r.KeyID, r.Account, r.Model}
	row := m[id]
	if row == nil {
		row = &RecordRow{Day: id[0], Route: id[1], KeyID: id[2], Account: id[3], Model: id[4]}
		m[id] = row
	}
	row.Add(r.Totals())
}

// Sorted is the rows by day, route, key, account and model.
func (m RecordRows) Sorted() []RecordRow {
	out := make([]RecordRow, 0, len(m))
	for _, r := range m {
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
	return out
}
