package bbolt

// A record that cannot be stored fails alone: it never fails, delays or loses other records.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// TestSettleBatchOversizedIDFailsAlone: a request id over bbolt's 32 KiB key limit used to fail
// the whole transaction, and with it every other account's record.
func TestSettleBatchOversizedIDFailsAlone(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "10")
	mustAccount(t, s, "b", "10")
	huge := rec(strings.Repeat("x", 40<<10), "b", "1")
	batch := []store.UsageRecord{rec("a1", "a", "1"), huge, rec("b1", "b", "2")}
	errs := s.SettleBatch(batch)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("valid records failed with the oversized one: %v / %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], store.ErrInvalid) {
		t.Errorf("oversized id: %v, want ErrInvalid", errs[1])
	} else if len(errs[1].Error()) > 300 {
		t.Errorf("the error quotes the whole id (%d bytes)", len(errs[1].Error()))
	}
	wantDec(t, "a", balance(t, s, "a"), "9")
	wantDec(t, "b", balance(t, s, "b"), "8")
	checkLedger(t, s, map[string]string{"a": "10", "b": "10"})
}

// TestSettlerOversizedIDFailsAlone: through the gateway's writer, the other records are stored
// at once (not after ~25 s of retries of the whole batch, then dropped) and only the bad one is
// reported.
func TestSettlerOversizedIDFailsAlone(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "10")
	mustAccount(t, s, "b", "10")
	var mu sync.Mutex
	var reported []error
	q := NewSettler(s, 20*time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err)
	}})
	defer q.Close()
	for i := range 50 {
		q.Record(rec(fmt.Sprintf("a%d", i), "a", "0.1"))
		if i == 25 {
			q.Record(rec(strings.Repeat("x", 40<<10), "b", "1"))
		}
		q.Record(rec(fmt.Sprintf("b%d", i), "b", "0.01"))
	}
	waitUntil(t, "the 100 valid records of other accounts stored next to an oversized id", 2*time.Second,
		func() bool { return count(t, s) == 100 })
	q.Close()
	if len(reported) != 1 || !errors.Is(reported[0], store.ErrInvalid) {
		t.Errorf("reported %v, want the oversized record alone, as invalid", reported)
	}
	wantDec(t, "a", balance(t, s, "a"), "5")
	wantDec(t, "b", balance(t, s, "b"), "9.5")
}

// TestSettleValidatesEveryField: anything bbolt would refuse, or that is unreasonable, is
// ErrInvalid for that record alone, with a message of bounded size.
func TestSettleValidatesEveryField(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "5")
	long := func(n int) string { return strings.Repeat("é", n/2) }
	bad := map[string]func(*store.UsageRecord){
		"request id over 512 bytes": func(r *store.UsageRecord) { r.RequestID = strings.Repeat("r", store.MaxRequestIDBytes+1) },
		"key id over 128 bytes":     func(r *store.UsageRecord) { r.KeyID = long(130) },
		"account over 128 bytes":    func(r *store.UsageRecord) { r.Account = strings.Repeat("a", 40<<10) },
		"account with a space":      func(r *store.UsageRecord) { r.Account = "a b" },
		"model over 256 bytes":      func(r *store.UsageRecord) { r.Model = long(40 << 10) },
		"provider over 256 bytes":   func(r *store.UsageRecord) { r.Provider = long(258) },
		"route over 256 bytes":      func(r *store.UsageRecord) { r.Route = long(258) },
		"NUL in request id":         func(r *store.UsageRecord) { r.RequestID = "a\x00b" },
		"NUL in route":              func(r *store.UsageRecord) { r.Route = "route:a\x00b" },
		"NUL in key id":             func(r *store.UsageRecord) { r.KeyID = "k\x00" },
		"newline in provider":       func(r *store.UsageRecord) { r.Provider = "open\nai" },
		"DEL in model":              func(r *store.UsageRecord) { r.Model = "gpt\x7f" },
		"invalid UTF-8 in id":       func(r *store.UsageRecord) { r.RequestID = "id-\xff\xfe" },
		"tokens over a billion":     func(r *store.UsageRecord) { r.PromptTokens = store.MaxTokens + 1 },
		"cost over a billion":       func(r *store.UsageRecord) { r.Cost = decimal.New(1, 10) },
		"cost of 100k digits":       func(r *store.UsageRecord) { r.Cost = decimal.New(1, -100000) },
		"time after 2261":           func(r *store.UsageRecord) { r.Time = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	var batch []store.UsageRecord
	var names []string
	for name, mutate := range bad {
		r := rec("bad-"+strings.ReplaceAll(name, " ", "-"), "acct", "1")
		mutate(&r)
		batch, names = append(batch, r), append(names, name)
	}
	batch = append(batch, rec("good", "acct", "1"))
	errs := s.SettleBatch(batch)
	for i, name := range names {
		if !errors.Is(errs[i], store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, errs[i])
		} else if len(errs[i].Error()) > 400 {
			t.Errorf("%s: error of %d bytes: it quotes a whole field", name, len(errs[i].Error()))
		}
	}
	if errs[len(names)] != nil {
		t.Errorf("the valid record failed: %v", errs[len(names)])
	}
	// Right at the bounds, a record is stored.
	edge := rec(strings.Repeat("r", store.MaxRequestIDBytes), "acct", "0.000000000000000000000000000000000001")
	edge.KeyID, edge.Model, edge.Route = strings.Repeat("k", store.MaxKeyIDBytes), strings.Repeat("m", store.MaxNameBytes), strings.Repeat("x", store.MaxNameBytes)
	edge.Provider, edge.PromptTokens, edge.CompletionTokens = "p", store.MaxTokens, store.MaxTokens
	mustSettle(t, s, edge)
	sm := checkLedger(t, s, map[string]string{"acct": "5"})
	if sm.requests != 2 {
		t.Errorf("%d records, want the valid one and the one at the bounds", sm.requests)
	}
}

// TestSettleTxRefusedPutFailsAlone: should a record's own key or value be refused by bbolt all
// the same (validation is bypassed here), it leaves nothing of itself behind and the others in
// the transaction are settled.
func TestSettleTxRefusedPutFailsAlone(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "10")
	mustAccount(t, s, "b", "10")
	recs := []store.UsageRecord{rec("a1", "a", "1"), rec("usage-refused", "b", "2"), rec("index-refused", "b", "3"), rec("b1", "b", "4")}
	errs := make([]error, len(recs))
	todo := prepareSettling(recs, errs)
	todo[1].uKey = append(todo[1].uKey, make([]byte, bolt.MaxKeySize)...) // the record's own Put fails
	todo[2].reqKey = nil                                                  // its index Put fails after the record's
	if err := s.update(func(tx *bolt.Tx) error { return settleTx(tx, todo, errs, nil) }); err != nil {
		t.Fatalf("the transaction failed: %v", err)
	}
	for i, want := range []bool{false, true, true, false} {
		if got := errs[i] != nil; got != want || (got && !errors.Is(errs[i], store.ErrInvalid)) {
			t.Errorf("%s: %v", recs[i].RequestID, errs[i])
		}
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketUsage).Cursor().Seek(todo[2].uKey); k != nil && string(k) == string(todo[2].uKey) {
			return errors.New("the record whose index was refused is still in the usage bucket")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	wantDec(t, "a", balance(t, s, "a"), "9")
	wantDec(t, "b", balance(t, s, "b"), "6")
	sm := checkLedger(t, s, map[string]string{"a": "10", "b": "10"})
	if sm.requests != 2 {
		t.Errorf("%d records, want a1 and b1", sm.requests)
	}
}

// TestSettlerIsolatesAnUnpredictedFailure: a record that fails its whole transaction for a
// reason nobody predicted is found by bisection; the others are stored at once, the writer goes
// on with new records while it waits for its retries, and only it is reported in the end.
func TestSettlerIsolatesAnUnpredictedFailure(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "100")
	mustAccount(t, s, "b", "100")
	setRetries(t, 50*time.Millisecond, time.Hour) // its second retry comes only at Close

	poisonErr := errors.New("something nobody predicted")
	var mu sync.Mutex
	var calls, poisonTries int
	var reported []string
	q := faultySettler(s, 50*time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) {
		if !errors.Is(err, poisonErr) {
			t.Errorf("%s reported with %v", r.RequestID, err)
		}
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, r.RequestID)
	}}, faulty(func(batch []store.UsageRecord) []error {
		mu.Lock()
		calls++
		mu.Unlock()
		for _, r := range batch {
			if r.Provider == "poison" {
				mu.Lock()
				poisonTries++
				mu.Unlock()
				return failAll(batch, poisonErr)
			}
		}
		return s.SettleBatch(batch)
	}), nil)
	for i := range 200 {
		q.Record(rec(fmt.Sprintf("a%d", i), "a", "0.25"))
		if i == 133 {
			p := rec("poisoned", "b", "1")
			p.Provider = "poison"
			q.Record(p)
		}
		q.Record(rec(fmt.Sprintf("b%d", i), "b", "0.125"))
	}
	waitUntil(t, "400 records stored", 5*time.Second, func() bool { return count(t, s) == 400 })
	// The poisoned record is tried in its batch, alone after bisection, alone again after
	// 50 ms; then it waits an hour, and new records pass meanwhile.
	waitUntil(t, "a retry of the poisoned record on its own", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return poisonTries >= 3
	})
	q.Record(rec("after", "a", "1"))
	waitUntil(t, "a record queued meanwhile stored", 5*time.Second, func() bool { return count(t, s) == 401 })
	mu.Lock()
	if len(reported) != 0 {
		t.Errorf("reported %v before its retries ran out", reported)
	}
	// 401 records in a few batches; bisection costs about 2·log2(batch) transactions.
	if calls > 40 {
		t.Errorf("%d transactions: bisection is not bounded", calls)
	}
	mu.Unlock()
	q.Close()
	if len(reported) != 1 || reported[0] != "poisoned" {
		t.Errorf("reported %v, want [poisoned]", reported)
	}
	wantDec(t, "a", balance(t, s, "a"), "49")
	wantDec(t, "b", balance(t, s, "b"), "75")
	checkLedger(t, s, map[string]string{"a": "100", "b": "100"})
}

// waitUntil polls cond for up to timeout.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
	}
}

// faulty makes a settler's settle from a test's fault: its errors per record, and as the
// transaction's error the first that is not a record's own fault.
func faulty(f func([]store.UsageRecord) []error) func([]store.UsageRecord, settle.HoldChanges) ([]error, error) {
	return func(batch []store.UsageRecord, _ settle.HoldChanges) ([]error, error) {
		errs := f(batch)
		for _, err := range errs {
			if err != nil && !store.RecordFault(err) {
				return errs, err
			}
		}
		return errs, nil
	}
}

// failAll is a transaction that failed: err for every record.
func failAll(batch []store.UsageRecord, err error) []error {
	errs := make([]error, len(batch))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// testRetries are the retry pauses faultySettler's writers use (nil: the defaults).
var testRetries []time.Duration

// setRetries sets the settler's retry pauses for one test.
func setRetries(t *testing.T, pauses ...time.Duration) {
	saved := testRetries
	testRetries = pauses
	t.Cleanup(func() { testRetries = saved })
}

// faultySettler starts a writer over s whose transactions are settleFn's (a test's faults in
// front of s.settleWith) and whose probe is probeFn (nil: s's own).
func faultySettler(s *Store, window time.Duration, hooks store.SettlerHooks,
	settleFn func([]store.UsageRecord, settle.HoldChanges) ([]error, error), probeFn func() error) *settle.Settler {
	if probeFn == nil {
		probeFn = s.probe
	}
	return settle.New(settle.Funcs{SettleFn: settleFn, ProbeFn: probeFn, RecoveryFn: s.recovery},
		settle.Options{Window: window, Hooks: hooks, Retries: testRetries})
}

// TestDamagedRowFailsOnlyItsRecords: a shared row that no longer decodes (an account, a daily
// aggregate) fails the records that fold into it, at once and without writing anything of
// them; other accounts' records in the same batch commit.
func TestDamagedRowFailsOnlyItsRecords(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "10")
	mustAccount(t, s, "b", "10")
	bad := rec("b1", "b", "2")
	err := s.update(func(tx *bolt.Tx) error {
		day := bad.Time.UTC().Format(store.DayLayout)
		return tx.Bucket(bucketUsageAgg).Put(aggKey(day, bad.KeyID, bad.Account, bad.Model), []byte("{not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	errs := s.SettleBatch([]store.UsageRecord{rec("a1", "a", "1"), bad, rec("a2", "a", "1")})
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("records of another account failed with the damaged row: %v / %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], store.ErrInvalid) || !strings.Contains(errs[1].Error(), "damaged") {
		t.Fatalf("the record on the damaged row: %v, want ErrInvalid naming the damage", errs[1])
	}
	wantDec(t, "a", balance(t, s, "a"), "8")
	wantDec(t, "b", balance(t, s, "b"), "10") // nothing of b1 was written
	if n, _ := s.UsageRecordCount(); n != 2 {
		t.Fatalf("%d records stored, want 2", n)
	}
}
