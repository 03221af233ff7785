package bbolt

// Settlement: a served request becomes a usage record, its account's debit, its daily
// aggregate, its key's month spend and its route's usage, all in one transaction.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// Settle records one served request and debits its account, exactly once per RequestID. The
// record, the balance, the daily aggregates and the key's monthly spend change in one
// transaction, which is durable (fsync'd) when Settle returns nil. Settling a RequestID that is
// already recorded does nothing and returns nil. A zero Time means now.
//
// Settling is never refused, and never takes a balance below zero or a key past its monthly
// limit: what they cannot take is not debited and is kept as the record's Overage (capDebit).
// An account that does not exist fails with ErrNotFound and writes nothing; invalid records
// wrap ErrInvalid.
// The gateway settles through a Settler, which groups records into one transaction.
func (s *Store) Settle(rec store.UsageRecord) error {
	return s.SettleBatch([]store.UsageRecord{rec})[0]
}

// settling is one record, checked and encoded outside the transaction.
type settling struct {
	at                     int // index in the batch
	rec                    store.UsageRecord
	value, uKey, reqKey    []byte
	agKey, spKey, routeKey string
	add                    store.UsageTotals
}

// usageFill packs the usage bucket's pages: its keys start with the time, so records are
// appended at its end, where bbolt's default (half-full pages on split) would waste half the
// space for good.
const usageFill = 1.0

// SettleBatch settles recs as Settle does, all in one transaction and one fsync, and returns one
// error per record (nil: settled now or before). A record that fails (invalid, unknown account,
// a key or value bbolt refuses) writes nothing and does not stop the others; a transaction that
// fails (a full or failing disk, a damaged row) fails every record that was not wrong in
// itself. Records touching the same account, aggregate or month read and write it once per
// batch, so a batch costs little more than its records' own rows.
func (s *Store) SettleBatch(recs []store.UsageRecord) []error {
	errs, _ := s.settleWith(recs, settle.HoldChanges{})
	return errs
}

// prepareSettling checks and encodes each record outside the transaction; errs gets what is
// wrong with each.
func prepareSettling(recs []store.UsageRecord, errs []error) []settling {
	todo := make([]settling, 0, len(recs))
	for i := range recs {
		rec := recs[i]
		rec.Normalize(time.Now())
		if errs[i] = rec.Validate(); errs[i] != nil {
			continue
		}
		st := settling{
			at: i, rec: rec, value: encodeUsage(&rec),
			uKey:   usageKey(rec.Time, rec.RequestID),
			reqKey: []byte(rec.RequestID),
			agKey:  string(aggKey(rec.Time.Format(store.DayLayout), rec.KeyID, rec.Account, rec.Model)),
			spKey:  string(spendKey(rec.Time.Format(store.MonthLayout), rec.KeyID)),
			add:    rec.Totals(),
		}
		if rec.Route != "" {
			st.routeKey = string(routeAggKey(rec.Route, rec.Model))
		}
		todo = append(todo, st)
	}
	return todo
}

// settleTx writes todo in tx. Each record's own rows go first (putUsage): a record bbolt
// refuses fails alone in errs, and only records that are in fold into the shared rows, which
// are written once at the end. A record whose hold row is on disk (held; nil: none is) deletes
// it. An error returned fails the transaction.
func settleTx(tx *bolt.Tx, todo []settling, errs []error, held func(string) bool) error {
	byReq, usage, holds := tx.Bucket(bucketUsageByRequest), tx.Bucket(bucketUsage), tx.Bucket(bucketHolds)
	dropHold := func(st *settling) error {
		if held == nil || !held(st.rec.RequestID) {
			return nil
		}
		return holds.Delete(st.reqKey)
	}
	usage.FillPercent = usageFill
	accounts := jsonRows[store.Account](tx.Bucket(bucketAccounts))
	aggs := jsonRows[store.UsageTotals](tx.Bucket(bucketUsageAgg))
	routes := jsonRows[store.UsageTotals](tx.Bucket(bucketUsageRoute))
	// Month spend is stored as a bare decimal string.
	spends := foldedRows[decimal.Decimal]{b: tx.Bucket(bucketSpendMonth), decode: decodeDecimal, encode: encodeDecimal}
	keys := jsonRows[store.Key](tx.Bucket(bucketKeys)) // read for their limits, never written
	for _, st := range todo {
		rec := &st.rec
		if byReq.Get(st.reqKey) != nil {
			if err := dropHold(&st); err != nil {
				return err
			}
			continue // already settled, in an earlier transaction or earlier in this one
		}
		// Every shared row the record folds into is read before its own rows are written: a
		// damaged row (one that does not decode) fails the records that touch it, not the
		// transaction, so it cannot hold up other accounts' records.
		// A paid request (x402) debits no credits: its account (a key's, or the endpoint's
		// x402.<slug>, which has no row) and the key's month spend stay as they are.
		paid := rec.Payment != nil
		a, err := accounts.row(rec.Account, false)
		if err != nil && !paid {
			errs[st.at] = err
			continue
		}
		if a == nil && !paid {
			errs[st.at] = store.Errorf(store.ErrNotFound, "settle %q: account %q: not found", store.ShortID(rec.RequestID), rec.Account)
			continue
		}
		ag, err := aggs.row(st.agKey, true)
		if err != nil {
			errs[st.at] = err
			continue
		}
		var rt *store.UsageTotals
		if st.routeKey != "" {
			if rt, err = routes.row(st.routeKey, true); err != nil {
				errs[st.at] = err
				continue
			}
		}
		var sp *decimal.Decimal
		if !paid {
			if sp, err = spends.row(st.spKey, true); err != nil {
				errs[st.at] = err
				continue
			}
			k, err := keys.row(rec.KeyID, false)
			if err != nil {
				errs[st.at] = err
				continue
			}
			capDebit(&st, a.Balance, *sp, k) // st.rec, which rec points at, may change
		}
		if err := putUsage(usage, byReq, st.uKey, st.reqKey, st.value); err != nil {
			var undo *undoError
			if errors.As(err, &undo) {
				return err // a half-written record: the transaction must not commit
			}
			errs[st.at] = err
			continue
		}
		if err := dropHold(&st); err != nil {
			return err
		}
		ag.Add(st.add)
		if rt != nil {
			rt.Add(st.add)
		}
		if !paid {
			a.Balance = a.Balance.Sub(rec.Cost)
			*sp = sp.Add(rec.Cost)
		}
	}
	return errors.Join(accounts.flush(), aggs.flush(), routes.flush(), spends.flush())
}

// capDebit keeps st's debit within what its account and key can take (store's CapDebit).
func capDebit(st *settling, balance, spent decimal.Decimal, k *store.Key) {
	var limit *decimal.Decimal
	if k != nil {
		limit = k.MonthlyLimit
	}
	if st.rec.CapDebit(balance, spent, limit) {
		st.value, st.add = encodeUsage(&st.rec), st.rec.Totals()
	}
}

// foldedRows reads each row of one bucket at most once per transaction, lets every record of a
// batch fold into it, and writes each row it handed out once, at flush.
type foldedRows[T any] struct {
	b      *bolt.Bucket
	decode func([]byte, *T) error
	encode func(*T) ([]byte, error)
	rows   map[string]*T
}

// row is the row at k, read from the bucket the first time. An absent row is a zero value when
// create is set, else nil (and nothing is written for it).
func (f *foldedRows[T]) row(k string, create bool) (*T, error) {
	if r, ok := f.rows[k]; ok {
		return r, nil
	}
	r := new(T)
	if v := f.b.Get([]byte(k)); v != nil {
		if err := f.decode(v, r); err != nil {
			// A damaged row: settling again cannot mend it, so the records that touch it are
			// reported at once (ErrInvalid) rather than retried.
			return nil, store.Errorf(store.ErrInvalid, "store: row %q is damaged (%v)", k, err)
		}
	} else if !create {
		return nil, nil
	}
	if f.rows == nil {
		f.rows = map[string]*T{}
	}
	f.rows[k] = r
	return r, nil
}

func (f *foldedRows[T]) flush() error {
	for k, r := range f.rows {
		v, err := f.encode(r)
		if err != nil {
			return fmt.Errorf("store: encode %q: %w", k, err)
		}
		if err := f.b.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

// jsonRows folds rows stored as JSON.
func jsonRows[T any](b *bolt.Bucket) foldedRows[T] {
	return foldedRows[T]{b: b,
		decode: func(v []byte, r *T) error { return json.Unmarshal(v, r) },
		encode: func(r *T) ([]byte, error) { return json.Marshal(r) },
	}
}

func decodeDecimal(v []byte, d *decimal.Decimal) error {
	var err error
	*d, err = decimal.NewFromString(string(v))
	return err
}

func encodeDecimal(d *decimal.Decimal) ([]byte, error) { return []byte(d.String()), nil }
