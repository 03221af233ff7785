// Package migrate is `tollway store migrate`: it copies a single gateway's bbolt file into a
// PostgreSQL database that several gateways can share. It reads the file through the store
// interfaces (and the few lists only the file has: holds, every task, signing secrets, used
// credentials), and writes through the database's own methods: the catalog, keys, tasks with
// their callbacks and images, pending x402 settlements and used credentials as the gateway
// writes them, and the money (accounts as they stand, usage records, aggregates, month spend,
// holds) imported as it is, nothing settled again (postgres.ImportLedger).
//
// The database must be empty, or hold exactly as many records of each kind as the file (a
// migration run before): then every record is found there and nothing is copied, so running it
// again is safe. Anything else is refused before a row is written.
package migrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/postgres"
)

// Kinds are the kinds of records copied, in the order they are reported (the database's table
// names).
var Kinds = []string{"providers", "models", "routes", "accounts", "api_keys", "usage_records", "usage_daily", "usage_route",
	"spend_month", "holds", "tasks", "callbacks", "callback_secrets", "pending_payments", "credentials"}

// Result is, per kind, how many records the file holds and how many were copied now (the rest
// were in the database already).
type Result struct {
	Found, Copied map[string]int
}

// source is everything read from the file.
type source struct {
	cat         store.Catalog
	keys        []store.Key
	ledger      store.LedgerCopy
	tasks       []*store.Task
	callbacks   map[string][]store.Callback // by task id
	pending     []store.PendingPayment
	credentials map[string]time.Time
}

// Run copies src into dst (see the package doc).
func Run(src *bbolt.Store, dst *postgres.Store) (Result, error) {
	s, err := read(src)
	if err != nil {
		return Result{}, fmt.Errorf("read the file: %w", err)
	}
	res := Result{Found: s.counts(), Copied: map[string]int{}}
	have, err := dst.Counts()
	if err != nil {
		return res, err
	}
	if err := fits(have, res.Found); err != nil {
		return res, err
	}
	return res, s.write(dst, res.Copied)
}

// fits refuses a database that is neither empty nor a copy of the file already.
func fits(have, want map[string]int) error {
	empty, same := true, true
	var differ []string
	for _, k := range Kinds {
		empty = empty && have[k] == 0
		if have[k] != want[k] {
			same = false
			differ = append(differ, fmt.Sprintf("%s %d (the file has %d)", k, have[k], want[k]))
		}
	}
	if empty || same {
		return nil
	}
	return fmt.Errorf("the database is not empty and does not hold this file's records (it has %v): migrate into an empty database (create a new one, or drop this one's tables if it is a failed copy)", differ)
}

func read(src *bbolt.Store) (*source, error) {
	s := &source{callbacks: map[string][]store.Callback{}}
	var err error
	if s.cat, err = src.Catalog(); err != nil {
		return nil, err
	}
	if s.keys, err = src.Keys(); err != nil {
		return nil, err
	}
	if err := readLedger(src, &s.ledger); err != nil {
		return nil, err
	}
	ids, err := src.TaskIDs()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		t, err := src.GetTask(id)
		if err != nil {
			return nil, err
		}
		s.tasks = append(s.tasks, t)
	}
	err = src.ScanDueCallbacks(time.Unix(0, math.MaxInt64), math.MaxInt32, func(string) bool { return false }, func(c store.Callback) bool {
		s.callbacks[c.TaskID] = append(s.callbacks[c.TaskID], c)
		return true
	})
	if err != nil {
		return nil, err
	}
	if s.pending, err = src.PendingPayments(); err != nil {
		return nil, err
	}
	s.credentials, err = src.Credentials()
	return s, err
}

// readLedger reads the money: accounts, records, the aggregates, each month's spend, holds
// and signing secrets.
func readLedger(src *bbolt.Store, l *store.LedgerCopy) error {
	var err error
	if l.Accounts, err = src.Accounts(); err != nil {
		return err
	}
	if l.Records, err = src.UsageRecords(store.UsageFilter{}, 0); err != nil {
		return err
	}
	sum, err := src.Usage(store.UsageFilter{})
	if err != nil {
		return err
	}
	l.Daily = sum.Rows
	if l.Routes, err = src.RouteUsage(); err != nil {
		return err
	}
	// Every month with spend has daily aggregates (kept for good).
	l.MonthSpend = map[string]map[string]decimal.Decimal{}
	for _, r := range l.Daily {
		month := r.Day[:7]
		if _, ok := l.MonthSpend[month]; ok {
			continue
		}
		if l.MonthSpend[month], err = src.MonthSpend(month); err != nil {
			return err
		}
	}
	if l.Holds, err = src.Holds(); err != nil {
		return err
	}
	l.Secrets, err = src.CallbackSecrets()
	return err
}

// counts is how many records of each kind the file holds (callbacks whose task is gone are
// not copied: their task cannot be written).
func (s *source) counts() map[string]int {
	l := &s.ledger
	n := map[string]int{"providers": len(s.cat.Providers), "models": len(s.cat.Models), "routes": len(s.cat.Routes),
		"accounts": len(l.Accounts), "api_keys": len(s.keys), "usage_records": len(l.Records), "usage_daily": len(l.Daily),
		"holds": len(l.Holds), "tasks": len(s.tasks), "callback_secrets": len(l.Secrets), "pending_payments": len(s.pending),
		"credentials": len(s.credentials)}
	for _, rows := range l.Routes {
		n["usage_route"] += len(rows)
	}
	for _, keys := range l.MonthSpend {
		n["spend_month"] += len(keys)
	}
	for _, t := range s.tasks {
		n["callbacks"] += len(s.callbacks[t.ID])
	}
	return n
}

// write writes what dst lacks, counting it in copied.
func (s *source) write(dst *postgres.Store, copied map[string]int) error {
	if err := writeCatalog(dst, s.cat, copied); err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	added, err := dst.ImportLedger(s.ledger)
	if err != nil {
		return fmt.Errorf("accounts, usage and holds: %w", err)
	}
	for k, n := range added {
		copied[k] += n
	}
	for _, k := range s.keys {
		if _, err := dst.GetKey(k.ID); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := dst.PutKey(k); err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		copied["api_keys"]++
	}
	if err := s.writeTasks(dst, copied); err != nil {
		return err
	}
	return s.writePayments(dst, copied)
}

// writeCatalog restores every provider, model and route as the file has them.
func writeCatalog(dst *postgres.Store, cat store.Catalog, copied map[string]int) error {
	had, err := dst.Catalog()
	if err != nil {
		return err
	}
	copied["providers"] = len(cat.Providers) - len(had.Providers)
	copied["models"] = len(cat.Models) - len(had.Models)
	copied["routes"] = len(cat.Routes) - len(had.Routes)
	return dst.RestoreCatalog(cat)
}

// writeTasks writes each task with its images and its callbacks, as a new task is.
func (s *source) writeTasks(dst *postgres.Store, copied map[string]int) error {
	for _, t := range s.tasks {
		for i := range t.Images {
			t.Images[i].Blob = "" // the database names the images it keeps (or none: pruned)
		}
		cbs := s.callbacks[t.ID]
		err := dst.PutTaskChange(t, store.TaskChange{Callbacks: cbs})
		if errors.Is(err, store.ErrExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("task %s: %w", t.ID, err)
		}
		copied["tasks"]++
		copied["callbacks"] += len(cbs)
	}
	return nil
}

// writePayments writes the pending x402 settlements and the used credentials.
func (s *source) writePayments(dst *postgres.Store, copied map[string]int) error {
	had, err := dst.PendingPayments()
	if err != nil {
		return err
	}
	for _, p := range s.pending {
		if slices.ContainsFunc(had, func(h store.PendingPayment) bool { return h.Record.RequestID == p.Record.RequestID }) {
			continue
		}
		if err := dst.AddPendingPayment(p); err != nil {
			return fmt.Errorf("pending payment %s: %w", store.ShortID(p.Record.RequestID), err)
		}
		copied["pending_payments"]++
	}
	for key, until := range s.credentials {
		err := dst.ClaimCredential(key, until)
		if errors.Is(err, store.ErrExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("credential: %w", err)
		}
		copied["credentials"]++
	}
	return nil
}
