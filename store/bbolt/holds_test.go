package bbolt

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// holdRows lists the request ids with a hold row on disk.
func holdRows(t *testing.T, s *Store) map[string]store.UsageRecord {
	t.Helper()
	out := map[string]store.UsageRecord{}
	if err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(k, v []byte) error {
			var r store.UsageRecord
			if err := decodeHold(k, v, &r); err != nil {
				return err
			}
			out[string(k)] = r
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSettlerHoldsOnlyWhatOutlivesItsBatch: a request settled (or released) before its hold's
// batch is written leaves no hold row and costs no transaction of its own; a request still
// open when the batch commits has its row, overwritten by each checkpoint and deleted with its
// record or its release.
func TestSettlerHoldsOnlyWhatOutlivesItsBatch(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "10")
	q := NewSettler(s, 20*time.Millisecond, store.SettlerHooks{})
	defer q.Close()

	// Quick requests: hold and settle (or end) in the same window.
	for i := range 50 {
		r := rec(fmt.Sprintf("quick-%d", i), "acct", "0.01")
		q.Hold(r, nil)
		if i%5 == 0 {
			q.End(r.RequestID)
			continue
		}
		q.Record(r)
	}
	// The counters move just after each commit is visible: wait for them too.
	waitUntil(t, "40 records", 5*time.Second, func() bool { return count(t, s) == 40 && q.Stats().Records == 40 })
	if rows := holdRows(t, s); len(rows) != 0 {
		t.Fatalf("hold rows %v for requests that settled before their batch", rows)
	}
	commits := q.Stats().Commits

	// Long requests: their holds outlive the window.
	long := rec("long", "acct", "0.2")
	long.PromptTokens, long.CompletionTokens = 40, 0
	released := rec("released", "acct", "0.3")
	q.Hold(long, nil)
	q.Hold(released, nil)
	waitUntil(t, "two hold rows", 5*time.Second, func() bool { return len(holdRows(t, s)) == 2 && q.Stats().Commits > commits })
	if c := q.Stats().Commits; c != commits+1 {
		t.Errorf("%d commits for two holds, want 1", c-commits)
	}
	long.CompletionTokens, long.Cost = 17, dec("0.25") // a checkpoint
	q.Hold(long, nil)
	waitUntil(t, "the checkpoint", 5*time.Second, func() bool { return holdRows(t, s)["long"].CompletionTokens == 17 })
	if r := holdRows(t, s)["long"]; !r.Cost.Equal(dec("0.25")) || r.PromptTokens != 40 || r.Account != "acct" {
		t.Fatalf("checkpointed hold %+v", r)
	}
	long.CompletionTokens, long.Cost = 30, dec("0.4")
	q.Record(long)
	q.End("released")
	waitUntil(t, "no hold rows", 5*time.Second, func() bool { return len(holdRows(t, s)) == 0 })
	wantDec(t, "balance", balance(t, s, "acct"), "9.2") // 10 - 40 x 0.01 - 0.4
	checkLedger(t, s, map[string]string{"acct": "10"})
}

// TestSettleHoldsBillsWhatACrashLeft: hold rows left by a gateway that stopped are settled at
// the next start as estimated records (reason gateway_restart), debited against the balance
// and the key's month spend; a hold whose account is gone is dropped and reported; a record
// that was settled after all is not billed twice.
func TestSettleHoldsBillsWhatACrashLeft(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "acct", "5")
	q := NewSettler(s, time.Millisecond, store.SettlerHooks{})
	cut := rec("cut", "acct", "0.5")
	cut.CompletionTokens = 12
	ghost := rec("ghost", "nobody", "1")
	both := rec("both", "acct", "0.25")
	for _, r := range []store.UsageRecord{cut, ghost, both} {
		q.Hold(r, nil)
	}
	waitUntil(t, "three hold rows", 5*time.Second, func() bool { return len(holdRows(t, s)) == 3 })
	q.Close()
	// The crash: "both" was settled but its row is still there (as a file from a gateway
	// that wrote the record and not the delete would have it).
	if errs := s.SettleBatch([]store.UsageRecord{both}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	s.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, failed, err := s.SettleHolds(store.EstimateGatewayRestart)
	if err != nil || n != 2 || len(failed) != 1 {
		t.Fatalf("SettleHolds: %d settled, failed %v, %v; want 2 settled (one of them before) and the ghost's failure", n, failed, err)
	}
	if rows := holdRows(t, s); len(rows) != 0 {
		t.Fatalf("hold rows left: %v", rows)
	}
	var got store.UsageRecord
	for _, r := range allRecords(t, s) {
		if r.RequestID == "cut" {
			got = r
		}
	}
	if !got.Estimated || got.EstimateReason != store.EstimateGatewayRestart || got.CompletionTokens != 12 || !got.Cost.Equal(dec("0.5")) {
		t.Fatalf("record of the cut request %+v", got)
	}
	wantDec(t, "balance", balance(t, s, "acct"), "4.25")
	spend, err := s.MonthSpend(t0.Format(store.MonthLayout))
	if err != nil {
		t.Fatal(err)
	}
	wantDec(t, "month spend", spend["key_1"], "0.75")
	checkLedger(t, s, map[string]string{"acct": "5"})
	if n, _, err := s.SettleHolds(store.EstimateGatewayRestart); n != 0 || err != nil {
		t.Fatalf("a second SettleHolds settled %d (%v)", n, err)
	}
}

// TestEstimateReasonRoundTrips: the new field is stored and read back; a record without it
// encodes exactly as before.
func TestEstimateReasonRoundTrips(t *testing.T) {
	r := rec("x", "acct", "1")
	plain := encodeUsage(&r)
	r.Estimated, r.EstimateReason = true, store.EstimateGatewayRestart
	var back store.UsageRecord
	if err := decodeUsage(usageKey(r.Time, r.RequestID), encodeUsage(&r), &back); err != nil {
		t.Fatal(err)
	}
	if back.EstimateReason != store.EstimateGatewayRestart || !back.Estimated {
		t.Fatalf("decoded %+v", back)
	}
	r.Estimated, r.EstimateReason = false, ""
	if string(encodeUsage(&r)) != string(plain) {
		t.Fatal("a record without an estimate reason encodes differently")
	}
}
