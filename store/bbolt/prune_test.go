package bbolt

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// requestID is an id as the gateway makes them: a UUID x-request-id plus a random suffix.
func requestID() string {
	var b [22]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32] + "." + h[32:]
}

// settleSpread settles n realistic records with times spread evenly over [from, from+span), in
// batches of batch (the settler's group commits), and returns their ids.
func settleSpread(t testing.TB, s *Store, from time.Time, span time.Duration, n, batch int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i += batch {
		var recs []store.UsageRecord
		for j := i; j < min(i+batch, n); j++ {
			id := requestID()
			ids = append(ids, id)
			recs = append(recs, store.UsageRecord{
				RequestID: id, KeyID: fmt.Sprintf("key_%016x", j%7), Account: "acme", Model: "gpt-4o-mini",
				Provider: "openai", PromptTokens: 812, CompletionTokens: 245, Cost: dec("0.0002688"),
				Time: from.Add(span * time.Duration(j) / time.Duration(n)),
			})
		}
		for _, err := range s.SettleBatch(recs) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

// kept is what pruning must never change.
type kept struct {
	Usage    store.UsageSummary
	Routes   map[string][]store.UsageRow
	Spend    map[string]string
	Accounts []store.Account
}

func keptBooks(t testing.TB, s *Store, months ...string) kept {
	t.Helper()
	var k kept
	var err error
	if k.Usage, err = s.Usage(store.UsageFilter{}); err != nil {
		t.Fatal(err)
	}
	if k.Routes, err = s.RouteUsage(); err != nil {
		t.Fatal(err)
	}
	if k.Accounts, err = s.Accounts(); err != nil {
		t.Fatal(err)
	}
	k.Spend = map[string]string{}
	for _, m := range months {
		ms, err := s.MonthSpend(m)
		if err != nil {
			t.Fatal(err)
		}
		for key, d := range ms {
			k.Spend[m+"/"+key] = d.String()
		}
	}
	return k
}

func TestPruneUsage(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acme", "1000")
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	ids := settleSpread(t, s, day, 10*24*time.Hour, 1000, 40) // 100 a day for 10 days
	routed := rec("routed", "acme", "1")
	routed.Route, routed.Time = "route:fast", day
	mustSettle(t, s, routed)
	before := keptBooks(t, s, "2026-10")

	cutoff := day.Add(4 * 24 * time.Hour)
	var deleted, txs int
	for {
		res, err := s.PruneUsage(cutoff, 64)
		if err != nil {
			t.Fatal(err)
		}
		deleted, txs = deleted+res.Deleted, txs+1
		if res.Held <= 0 {
			t.Errorf("a pruning transaction says it held the lock for %v", res.Held)
		}
		if res.Deleted < 64 {
			break
		}
	}
	if deleted != 401 || txs != 7 {
		t.Errorf("deleted %d records in %d transactions, want 401 (4 days and the routed one) in 7 of at most 64", deleted, txs)
	}
	recs := allRecords(t, s)
	if len(recs) != 600 || count(t, s) != 600 {
		t.Errorf("%d records (count %d) left, want 600", len(recs), count(t, s))
	}
	for _, r := range recs {
		if r.Time.Before(cutoff) {
			t.Errorf("record %s of %v survived pruning before %v", r.RequestID, r.Time, cutoff)
		}
	}
	checkIndex(t, s)
	if after := keptBooks(t, s, "2026-10"); !reflect.DeepEqual(after, before) {
		t.Errorf("pruning changed what is kept for good:\n%+v\nwant\n%+v", after, before)
	}
	// Within the window a repeated id is still caught.
	last := ids[len(ids)-1]
	again := rec(last, "acme", "5")
	mustSettle(t, s, again)
	if count(t, s) != 600 || !reflect.DeepEqual(keptBooks(t, s, "2026-10"), before) {
		t.Error("a repeated id inside the retention window was settled again")
	}
	// Nothing older left: a pass deletes nothing.
	if res, err := s.PruneUsage(cutoff, 64); err != nil || res.Deleted != 0 {
		t.Errorf("second pass: %+v, %v", res, err)
	}
}

func TestPruneLegacyFile(t *testing.T) {
	s, _ := openLegacy(t)
	defer s.Close()
	before := keptBooks(t, s, "2026-09", "2026-10")
	res, err := s.PruneUsage(time.Date(2026, 10, 10, 0, 0, 0, 0, time.UTC), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted == 0 || res.Deleted == 40 {
		t.Fatalf("deleted %d of the fixture's 40 records, want some", res.Deleted)
	}
	if n := count(t, s); n != 40-res.Deleted {
		t.Errorf("%d index entries left, want %d: legacy index entries must go with their records", n, 40-res.Deleted)
	}
	checkIndex(t, s)
	if after := keptBooks(t, s, "2026-09", "2026-10"); !reflect.DeepEqual(after, before) {
		t.Errorf("pruning changed what is kept for good")
	}
}

func TestStartPruning(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acme", "1000")
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	settleSpread(t, s, now.Add(-40*24*time.Hour), 40*24*time.Hour, 400, 50) // 10 a day
	task := newTask("video")
	task.Status, task.CompletedAt = "failed", now.Add(-31*24*time.Hour)
	if err := s.PutTask(task); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer // read only after stop, which waits for the pruner
	stop := s.StartPruning(store.PruneOptions{Retention: 35 * 24 * time.Hour, TaskRetention: 30 * 24 * time.Hour, Chunk: 7, Every: time.Hour,
		Now: func() time.Time { return now }, Log: slogTo(&logs)})
	// The pass prunes usage records, then finished tasks: wait for both before stopping it (a
	// stop between the two left the task, failing the test now and then).
	deadline := time.Now().Add(10 * time.Second)
	for count(t, s) > 350 || taskLeft(s, task.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("%d records left after 10s of pruning, want 350 (finished task still there: %v)", count(t, s), taskLeft(s, task.ID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if n := count(t, s); n != 350 {
		t.Errorf("%d records left, want the last 35 days' 350", n)
	}
	if !strings.Contains(logs.String(), "pruned usage records") || !strings.Contains(logs.String(), "deleted=50") {
		t.Errorf("no log of the pass: %q", logs.String())
	}
	if _, err := s.GetTask(task.ID); !errors.Is(err, store.ErrTaskNotFound) || !strings.Contains(logs.String(), "pruned finished tasks") {
		t.Errorf("finished task past its window: %v; log %q", err, logs.String())
	}
	// Retention 0 keeps everything.
	s.StartPruning(store.PruneOptions{Now: func() time.Time { return now.Add(1000 * 24 * time.Hour) }})()
	if n := count(t, s); n != 350 {
		t.Errorf("retention 0 pruned: %d records left", n)
	}
}

func taskLeft(s *Store, id string) bool {
	_, err := s.GetTask(id)
	return !errors.Is(err, store.ErrTaskNotFound)
}

// TestStoreStopsGrowing: at a steady rate, once the retention window is full and pruning runs,
// the file stops growing: freed pages are reused. Days are simulated with record times.
func TestStoreStopsGrowing(t *testing.T) {
	s, path := openTemp(t)
	defer s.Close()
	s.db.NoSync = true // the layout is the same; fsync only costs time here
	mustAccount(t, s, "acme", "1000000")
	const perDay, window, days = 2000, 3, 12
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var used []int64
	for d := range days {
		day := start.Add(time.Duration(d) * 24 * time.Hour)
		settleSpread(t, s, day, 24*time.Hour, perDay, 20)
		for {
			res, err := s.PruneUsage(day.Add(24*time.Hour-window*24*time.Hour), store.PruneChunk)
			if err != nil {
				t.Fatal(err)
			}
			if res.Deleted < store.PruneChunk {
				break
			}
		}
		used = append(used, dbSize(t, s))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pages in use (high-water mark) at the end of each day: %v; file %d bytes; %d bytes per retained request",
		used, fi.Size(), used[days-1]/(perDay*window))
	if n := count(t, s); n != perDay*window {
		t.Errorf("%d records kept, want %d (the window)", n, perDay*window)
	}
	// After the window filled (day window+1), the high-water mark must stay flat.
	plateau := used[window+1]
	if last := used[days-1]; float64(last) > 1.1*float64(plateau) {
		t.Errorf("the file kept growing with pruning on: %d bytes after %d days, %d on day %d", last, days, plateau, window+2)
	}
}

// dbSize is the file's high-water mark: every page below it is in use or free for reuse.
func dbSize(t testing.TB, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

const pruneCrashEnv = "TOLLWAY_PRUNE_CRASH_DB"

// TestPruneCrashHelper is the child of TestPruneSurvivesKill; run normally it does nothing. It
// prunes a chunk at a time and prints "pruned N" after each transaction.
func TestPruneCrashHelper(t *testing.T) {
	path := os.Getenv(pruneCrashEnv)
	if path == "" {
		return
	}
	s, err := Open(path)
	if err != nil {
		os.Exit(3)
	}
	for {
		res, err := s.PruneUsage(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 10)
		if err != nil {
			os.Exit(4)
		}
		fmt.Printf("pruned %d\n", res.Deleted)
		if res.Deleted == 0 {
			time.Sleep(30 * time.Second) // wait to be killed (or for the parent to give up)
			os.Exit(5)
		}
	}
}

// TestPruneSurvivesKill: a kill -9 in the middle of pruning leaves every record with its index
// entry and the kept books untouched; pruning carries on at the next start.
func TestPruneSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prune.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustAccount(t, s, "acme", "1000")
	settleSpread(t, s, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 24*time.Hour, 3000, 100)
	before := keptBooks(t, s, "2026-01")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var acked int
		s := killDuring(t, "TestPruneCrashHelper", path, []string{pruneCrashEnv + "=" + path}, func(line string) bool {
			if n, ok := strings.CutPrefix(line, "pruned "); ok {
				d, _ := strconv.Atoi(n)
				acked += d
			}
			return acked < 200+130*round
		})
		checkIndex(t, s)
		if after := keptBooks(t, s, "2026-01"); !reflect.DeepEqual(after, before) {
			t.Errorf("round %d: pruning changed the kept books", round)
		}
		t.Logf("round %d: %d records left", round, count(t, s))
		s.Close()
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// BenchmarkPruneChunk measures one pruning transaction (fsync'd) at several chunk sizes: the
// longest is the longest the settler can wait for the writer lock because of pruning. Each
// pruning transaction is paired with an ordinary settlement commit of 40 records on the same
// store, so the figures can be compared on a disk whose fsync time varies.
func BenchmarkPruneChunk(b *testing.B) {
	for _, chunk := range []int{store.PruneChunk, 500, 2000} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "prune.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			mustAccount(b, s, "acme", "1000000")
			// At least 200,000 records, so the index is as scattered as in a real store.
			s.db.NoSync = true
			from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			settleSpread(b, s, from, 24*time.Hour, max(200_000, (b.N+1)*chunk), 400)
			s.db.NoSync = false
			var longest, total, settleLongest, settleTotal time.Duration
			b.ResetTimer()
			for range b.N {
				res, err := s.PruneUsage(from.Add(48*time.Hour), chunk)
				if err != nil || res.Deleted != chunk {
					b.Fatalf("%+v, %v", res, err)
				}
				longest, total = max(longest, res.Held), total+res.Held
				b.StopTimer()
				began := time.Now()
				settleSpread(b, s, from.Add(72*time.Hour), time.Hour, 40, 40)
				d := time.Since(began)
				settleLongest, settleTotal = max(settleLongest, d), settleTotal+d
				b.StartTimer()
			}
			b.ReportMetric(float64(longest.Microseconds())/1000, "max-ms/prune")
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/prune")
			b.ReportMetric(float64(settleLongest.Microseconds())/1000, "max-ms/settle40")
			b.ReportMetric(float64(settleTotal.Microseconds())/1000/float64(b.N), "ms/settle40")
		})
	}
}
