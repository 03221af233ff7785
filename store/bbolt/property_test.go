package bbolt

// Property: in random batches that mix valid records with invalid ones of every kind, every
// valid record is stored exactly once, every invalid one is reported, and balances and
// aggregates equal the sums of the stored records. rapid draws the batches; a failure prints
// the seed that reproduces it (-rapid.seed=N) and is shrunk to a small case. -rapid.checks=N
// sets how many random cases run (100 by default).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	"pgregory.net/rapid"

	"github.com/tollway/tollway/store"
)

// kinds of generated records; the first is valid, the rest each break one rule.
var recordKinds = []string{
	"valid", "repeated id", "unknown account", "poison",
	"oversized id", "oversized key id", "oversized model", "oversized route", "NUL in an id",
	"control character", "invalid UTF-8", "empty id", "negative cost", "negative tokens",
	"huge tokens", "huge cost", "cost of many digits", "time before 1970", "time after 2261",
}

var propCredits = map[string]string{"a": "100", "b": "0.5", "c": "0"}

// genValid draws a valid record with a fresh id.
func genValid(t *rapid.T, n int) store.UsageRecord {
	return store.UsageRecord{
		RequestID:        fmt.Sprintf("req-%d", n),
		KeyID:            rapid.SampledFrom([]string{"key_1", "key_2", "key_3"}).Draw(t, "key"),
		Account:          rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "account"),
		Model:            rapid.SampledFrom([]string{"gpt-4o", "claude", ""}).Draw(t, "model"),
		Provider:         rapid.SampledFrom([]string{"openai", "", "ünïcode"}).Draw(t, "provider"),
		Route:            rapid.SampledFrom([]string{"", "route:fast"}).Draw(t, "route"),
		PromptTokens:     rapid.Int64Range(0, 1_000_000).Draw(t, "prompt"),
		CompletionTokens: rapid.Int64Range(0, 100_000).Draw(t, "completion"),
		CachedTokens:     rapid.Int64Range(0, 1000).Draw(t, "cached"),
		Cost:             decimal.New(rapid.Int64Range(0, 1_000_000).Draw(t, "cost"), -int32(rapid.IntRange(0, 12).Draw(t, "scale"))),
		Estimated:        rapid.Bool().Draw(t, "estimated"),
		// Sixty days across a month boundary, to the nanosecond.
		Time: time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC).Add(time.Duration(rapid.Int64Range(0, 60*24*3600*1e9).Draw(t, "nanos"))),
	}
}

// genRecord draws one record of a random kind. used holds the ids of valid records drawn
// so far, for repeats; poison (a record whose transaction fails for an unpredicted reason) is
// drawn only when allowed.
func genRecord(t *rapid.T, n int, used []string, poison bool) (store.UsageRecord, string) {
	kinds := recordKinds
	if !poison {
		kinds = append([]string{kinds[0], kinds[1], kinds[2]}, kinds[4:]...)
	}
	kind := rapid.SampledFrom(kinds).Draw(t, "kind")
	r := genValid(t, n)
	pick := func(field string) *string {
		return []*string{&r.RequestID, &r.KeyID, &r.Model, &r.Provider, &r.Route}[rapid.IntRange(0, 4).Draw(t, field)]
	}
	switch kind {
	case "repeated id":
		if len(used) > 0 {
			r.RequestID = rapid.SampledFrom(used).Draw(t, "repeat")
			r.Account = rapid.SampledFrom([]string{"a", "b", "c", "ghost"}).Draw(t, "repeat account")
		}
	case "unknown account":
		r.Account = "ghost"
	case "poison":
		r.Provider = "poison"
	case "oversized id":
		r.RequestID += strings.Repeat("x", rapid.IntRange(store.MaxRequestIDBytes+1, 40<<10).Draw(t, "id length"))
	case "oversized key id":
		r.KeyID = strings.Repeat("k", store.MaxKeyIDBytes+1)
	case "oversized model":
		r.Model = strings.Repeat("m", rapid.IntRange(store.MaxNameBytes+1, 40<<10).Draw(t, "model length"))
	case "oversized route":
		r.Route = strings.Repeat("r", store.MaxNameBytes+1)
	case "NUL in an id":
		*pick("NUL field") += "\x00x"
	case "control character":
		*pick("control field") += "\n"
	case "invalid UTF-8":
		*pick("UTF-8 field") += "\xc3"
	case "empty id":
		*[]*string{&r.RequestID, &r.KeyID, &r.Account}[rapid.IntRange(0, 2).Draw(t, "empty field")] = ""
	case "negative cost":
		r.Cost = r.Cost.Neg().Sub(decimal.New(1, -9))
	case "negative tokens":
		*[]*int64{&r.PromptTokens, &r.CompletionTokens, &r.CachedTokens}[rapid.IntRange(0, 2).Draw(t, "tokens field")] = -1
	case "huge tokens":
		r.CompletionTokens = rapid.Int64Range(store.MaxTokens+1, 1<<62).Draw(t, "huge tokens")
	case "huge cost":
		r.Cost = decimal.New(rapid.Int64Range(1, 1<<40).Draw(t, "huge cost"), 9).Add(decimal.New(1, -2))
	case "cost of many digits":
		r.Cost = decimal.New(1, -int32(rapid.IntRange(store.MaxCostChars, 100_000).Draw(t, "cost digits")))
	case "time before 1970":
		r.Time = time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)
	case "time after 2261":
		r.Time = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rapid.Int64Range(0, 1<<40).Draw(t, "late")))
	}
	return r, kind
}

// propLimits are the monthly limits of the keys records draw from (key_3 has none).
var propLimits = map[string]string{"key_1": "50", "key_2": "0.001"}

// ledgerModel is what the store must do with each record, in order.
type ledgerModel struct {
	stored map[string]store.UsageRecord
	used   []string
	// balance and spend (by month and key) so far: no record takes a balance below zero or a
	// key past its limit; what they cannot take is the record's overage.
	balance map[string]decimal.Decimal
	spend   map[string]decimal.Decimal
}

func newModel() *ledgerModel {
	m := &ledgerModel{stored: map[string]store.UsageRecord{}, balance: map[string]decimal.Decimal{}, spend: map[string]decimal.Decimal{}}
	for a, c := range propCredits {
		m.balance[a] = dec(c)
	}
	return m
}

// debit is what the store debits for rec, and the record as it must be stored.
func (m *ledgerModel) debit(rec store.UsageRecord) store.UsageRecord {
	sk := rec.Time.UTC().Format(store.MonthLayout) + " " + rec.KeyID
	room := decimal.Max(m.balance[rec.Account], decimal.Zero)
	if l, ok := propLimits[rec.KeyID]; ok {
		room = decimal.Min(room, decimal.Max(dec(l).Sub(m.spend[sk]), decimal.Zero))
	}
	if rec.Cost.GreaterThan(room) {
		rec.Cost, rec.Overage = room, rec.Overage.Add(rec.Cost.Sub(room))
	}
	m.balance[rec.Account] = m.balance[rec.Account].Sub(rec.Cost)
	m.spend[sk] = m.spend[sk].Add(rec.Cost)
	return rec
}

// apply returns the outcome the store must give rec: nil, ErrInvalid, ErrNotFound, or the
// poison error.
func (m *ledgerModel) apply(rec store.UsageRecord, kind string) error {
	switch {
	case kind == "poison":
		return errPoison
	case kind != "valid" && kind != "repeated id" && kind != "unknown account":
		return store.ErrInvalid
	case m.stored[rec.RequestID].RequestID != "":
		return nil // settled before: nothing happens
	case propCredits[rec.Account] == "":
		return store.ErrNotFound
	}
	m.stored[rec.RequestID] = m.debit(rec)
	m.used = append(m.used, rec.RequestID)
	return nil
}

var errPoison = errors.New("a failure nobody predicted")

// openProp opens a store for one case, without fsync (the property is not about durability).
func openProp(t *rapid.T) *Store {
	dir, err := os.MkdirTemp("", "tollway-prop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := Open(dir + "/p.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.db.NoSync = true
	for a, c := range propCredits {
		mustAccount(t, s, a, c)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for k, l := range propLimits {
			lim := dec(l)
			if err := putJSON(tx.Bucket(bucketKeys), k, store.Key{ID: k, Account: "a", MonthlyLimit: &lim}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkModel asserts that the store holds exactly the model's records, each once, and books
// that add up to them. exact: the records were settled in the model's order, so each one's
// split of its cost into debit and overage is the model's; else only their sum is, and no
// balance is below zero and no key past its limit.
func checkModel(t *rapid.T, s *Store, m *ledgerModel, exact bool) {
	got := allRecords(t, s)
	if len(got) != len(m.stored) {
		t.Errorf("%d records stored, want %d", len(got), len(m.stored))
	}
	for _, r := range got {
		want, ok := m.stored[r.RequestID]
		if !ok {
			t.Fatalf("record %q stored, but it should not be", store.ShortID(r.RequestID))
		}
		want.Time = want.Time.UTC()
		if r.KeyID != want.KeyID || r.Account != want.Account || r.Model != want.Model || r.Route != want.Route ||
			r.PromptTokens != want.PromptTokens || r.CompletionTokens != want.CompletionTokens || r.CachedTokens != want.CachedTokens ||
			!r.Cost.Add(r.Overage).Equal(want.Cost.Add(want.Overage)) || r.Estimated != want.Estimated || !r.Time.Equal(want.Time) ||
			(exact && (!r.Cost.Equal(want.Cost) || !r.Overage.Equal(want.Overage))) {
			t.Fatalf("record %q stored as %+v, want %+v", r.RequestID, r, want)
		}
	}
	sm := checkLedger(t, s, propCredits)
	for a := range propCredits {
		if b := balance(t, s, a); b.IsNegative() {
			t.Fatalf("account %s: balance %s is below zero", a, b)
		}
	}
	for month, spends := range sm.byMonthKey {
		for k, sp := range spends {
			if l, ok := propLimits[k]; ok && sp.GreaterThan(dec(l)) {
				t.Fatalf("key %s spent %s in %s, past its limit %s", k, sp, month, l)
			}
		}
	}
	ru, err := s.RouteUsage()
	if err != nil {
		t.Fatal(err)
	}
	var routed store.UsageTotals
	for _, rows := range ru {
		for _, row := range rows {
			routed.Add(row.UsageTotals)
		}
	}
	var wantRouted store.UsageTotals
	for _, r := range m.stored {
		if r.Route != "" {
			wantRouted.Add(r.Totals())
		}
	}
	if routed.Requests != wantRouted.Requests || !routed.Cost.Equal(wantRouted.Cost) || routed.PromptTokens != wantRouted.PromptTokens {
		t.Errorf("route usage %+v, records say %+v", routed, wantRouted)
	}
	if sm.requests != int64(len(m.stored)) {
		t.Errorf("ledger counts %d records, want %d", sm.requests, len(m.stored))
	}
}

// TestSettleBatchProperty: SettleBatch, batch by batch, gives each record its own outcome.
func TestSettleBatchProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := openProp(t)
		m := newModel()
		n := 0
		for b := range rapid.IntRange(1, 4).Draw(t, "batches") {
			var recs []store.UsageRecord
			var want []error
			for range rapid.IntRange(1, 40).Draw(t, "records") {
				r, kind := genRecord(t, n, m.used, false)
				n++
				recs, want = append(recs, r), append(want, m.apply(r, kind))
			}
			for i, err := range s.SettleBatch(recs) {
				if (err == nil) != (want[i] == nil) || (want[i] != nil && !errors.Is(err, want[i])) {
					t.Fatalf("batch %d record %d (%q): %v, want %v", b, i, store.ShortID(recs[i].RequestID), err, want[i])
				}
			}
		}
		checkModel(t, s, m, true)
	})
}

// TestSettlerProperty: through the gateway's writer, with records whose transaction fails for
// no predicted reason mixed in, every other valid record is stored once and every record that
// is not is reported once.
func TestSettlerProperty(t *testing.T) {
	setRetries(t, time.Millisecond, time.Millisecond)
	rapid.Check(t, func(t *rapid.T) {
		s := openProp(t)
		m := newModel()
		var mu sync.Mutex
		reported := map[string][]error{}
		q := faultySettler(s, time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported[r.RequestID] = append(reported[r.RequestID], err)
		}}, faulty(func(batch []store.UsageRecord) []error {
			for _, r := range batch {
				if r.Provider == "poison" {
					return failAll(batch, errPoison)
				}
			}
			return s.SettleBatch(batch)
		}), nil)
		t.Cleanup(q.Close) // also when the case fails half-way
		wantReported := map[string][]error{}
		for n := range rapid.IntRange(1, 150).Draw(t, "records") {
			r, kind := genRecord(t, n, m.used, true)
			if err := m.apply(r, kind); err != nil {
				wantReported[r.RequestID] = append(wantReported[r.RequestID], err)
			}
			q.Record(r)
		}
		q.Close()
		for id, want := range wantReported {
			got := reported[id]
			if len(got) != len(want) {
				t.Fatalf("record %q reported %v, want %v", store.ShortID(id), got, want)
			}
			for i := range got {
				if !errors.Is(got[i], want[i]) {
					t.Errorf("record %q reported with %v, want %v", store.ShortID(id), got[i], want[i])
				}
			}
		}
		if len(reported) != len(wantReported) {
			t.Errorf("%d records reported, want %d", len(reported), len(wantReported))
		}
		checkModel(t, s, m, false)
	})
}

// TestUsageEncodingRoundTrip: a record read back from its compact form is the record, and the
// admin API (JSON) shows it byte for byte as it showed records stored as JSON; fields added
// by a later version are skipped.
func TestUsageEncodingRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genValid(t, rapid.IntRange(0, 1<<20).Draw(t, "n"))
		if rapid.Bool().Draw(t, "long id") {
			r.RequestID = strings.Repeat("é", store.MaxRequestIDBytes/2)
		}
		if rapid.Bool().Draw(t, "overage") {
			r.Overage = decimal.New(rapid.Int64Range(1, 1_000_000).Draw(t, "overage units"), -int32(rapid.IntRange(0, 12).Draw(t, "overage scale")))
		}
		r.Time = r.Time.UTC().Round(0)
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		v := encodeUsage(&r)
		if rapid.Bool().Draw(t, "later field") {
			v = protowire.AppendString(protowire.AppendTag(v, 99, protowire.BytesType), "from a later version")
		}
		var got store.UsageRecord
		if err := decodeUsage(usageKey(r.Time, r.RequestID), v, &got); err != nil {
			t.Fatal(err)
		}
		if gotJSON, _ := json.Marshal(got); string(gotJSON) != string(want) {
			t.Fatalf("read back as %s, want %s", gotJSON, want)
		}
		// The same record stored as JSON by the old code reads the same.
		var legacy store.UsageRecord
		if err := decodeUsage(usageKey(r.Time, r.RequestID), want, &legacy); err != nil {
			t.Fatal(err)
		}
		if legacyJSON, _ := json.Marshal(legacy); string(legacyJSON) != string(want) {
			t.Fatalf("legacy value read back as %s, want %s", legacyJSON, want)
		}
	})
}

func TestDecodeUsageRefusesGarbage(t *testing.T) {
	k := usageKey(t0, "id")
	for _, v := range [][]byte{nil, {0x02, 1}, {usageFormatV1, 0x0a, 200}, {usageFormatV1, 0x4a, 1, 'x'}} {
		var r store.UsageRecord
		if err := decodeUsage(k, v, &r); err == nil {
			t.Errorf("value %x decoded as %+v, want an error", v, r)
		}
	}
}
