package bbolt

import (
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

func TestCompact(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "acme", "1000")
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	s.db.NoSync = true // setting up: durability is not the point
	settleSpread(t, s, day, 10*24*time.Hour, 5000, 40)
	s.db.NoSync = false
	if _, err := s.PruneUsage(day.Add(8*24*time.Hour), 1<<20); err != nil {
		t.Fatal(err)
	}
	books, recs := keptBooks(t, s, "2026-10"), allRecords(t, s)

	// In use: refused at once, the file untouched.
	start := time.Now()
	if _, err := Compact(path); !errors.Is(err, store.ErrLocked) {
		t.Errorf("Compact of an open store: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Compact of an open store took %v to fail", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	res, err := Compact(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if res.After != fi.Size() || res.After >= res.Before/2 {
		t.Errorf("compacted %d -> %d bytes (file now %d): pruning 80%% of the records should free over half", res.Before, res.After, fi.Size())
	}
	if _, err := os.Stat(path + ".compact.tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
	t.Logf("compacted %d -> %d bytes", res.Before, res.After)

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(keptBooks(t, s, "2026-10"), books) || !reflect.DeepEqual(allRecords(t, s), recs) {
		t.Error("compaction changed what the store holds")
	}
	checkIndex(t, s)
	// The compacted file takes new records and still catches repeated ids.
	mustSettle(t, s, recs[0])
	mustSettle(t, s, rec("after-compaction", "acme", "1"))
	if n := count(t, s); n != len(recs)+1 {
		t.Errorf("%d records, want %d", n, len(recs)+1)
	}
}

func TestCompactMissingFile(t *testing.T) {
	path := t.TempDir() + "/none.db"
	if _, err := Compact(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Compact of a missing file: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Error("Compact created the file it was asked to compact")
	}
}

// TestBytesPerRequest measures what a served request costs on disk with realistic ids, at the
// settler's batch sizes for a quiet and a busy gateway, before and after compaction (store.md
// has the figures for the old format: 1,035-1,070 bytes in use, 507 compacted).
func TestBytesPerRequest(t *testing.T) {
	for _, batch := range []int{4, 400} {
		s, path := openTemp(t)
		s.db.NoSync = true // the layout is the same; fsync only costs time here
		mustAccount(t, s, "acme", "1000000")
		const n = 6000
		settleSpread(t, s, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), n*5*time.Millisecond, n, batch) // 200 req/s
		used := dbSize(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		res, err := Compact(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("batches of %d: %d bytes in use = %d bytes/request (file %d); compacted %d = %d bytes/request",
			batch, used, used/n, res.Before, res.After, res.After/n)
		if used/n > 400 || res.After/n > 250 {
			t.Errorf("batches of %d: %d bytes per request in use, %d compacted: over 400 / 250", batch, used/n, res.After/n)
		}
	}
}
