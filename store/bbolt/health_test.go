package bbolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
	"github.com/tollway/tollway/test/harness"
)

// watched opens a store in dir, watched with opts.
func watched(t *testing.T, dir string, opts HealthOptions) *Store {
	t.Helper()
	s, err := Open(filepath.Join(dir, "tollway.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.Watch(opts)
	return s
}

// TestFullDiskOutageAndReserve, on a real filesystem that fills up: the records of requests
// answered before the outage was known are written (the reserve makes room), the outage is
// known at once and says why, and the store counts as writable again, reserve remade, once
// space is freed.
func TestFullDiskOutageAndReserve(t *testing.T) {
	dir := harness.SmallDisk(t, 32<<20)
	var mu sync.Mutex
	var changes []string
	s := watched(t, dir, HealthOptions{Reserve: 8 << 20, MinFree: 1 << 20, Every: 20 * time.Millisecond, Changed: func(now, was *store.Outage) {
		mu.Lock()
		defer mu.Unlock()
		if now != nil {
			changes = append(changes, "down: "+now.Cause)
		} else {
			changes = append(changes, "up after "+was.Cause)
		}
	}})
	defer s.Close()
	if err := s.Unavailable(); err != nil || !s.ReserveHeld() {
		t.Fatalf("a fresh store on an empty disk: %v, reserve held %v", err, s.ReserveHeld())
	}
	mustAccount(t, s, "acct", "100")
	q := NewSettler(s, time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) { t.Errorf("%s not stored: %v", r.RequestID, err) }})
	defer q.Close()

	free := harness.FillDisk(t, dir)
	for i := range 2000 { // answered before anyone knew: about 500 KiB of records
		q.Record(rec(fmt.Sprintf("answered-%d", i), "acct", "0.01"))
	}
	waitUntil(t, "the 2000 records written", 10*time.Second, func() bool { return count(t, s) == 2000 })
	o := s.Outage()
	if o == nil || o.Cause != store.CauseDiskFull || !errors.Is(o.Err, syscall.ENOSPC) || s.ReserveHeld() {
		t.Fatalf("outage %+v, reserve held %v: want disk full (ENOSPC) with the reserve spent", o, s.ReserveHeld())
	}
	if err := s.Unavailable(); err == nil || err.Error() == "" {
		t.Fatal("Unavailable is nil during the outage")
	}
	wantDec(t, "balance", balance(t, s, "acct"), "80")

	free()
	waitUntil(t, "the store writable again", 5*time.Second, func() bool { return s.Unavailable() == nil })
	if !s.ReserveHeld() {
		t.Fatal("the outage ended without the reserve")
	}
	// The watcher tells Changed after it has cleared the outage (outside its lock): wait for it.
	heard := func() int { mu.Lock(); defer mu.Unlock(); return len(changes) }
	waitUntil(t, "the end of the outage heard", 5*time.Second, func() bool { return heard() >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0] != "down: disk full" || changes[1] != "up after disk full" {
		t.Fatalf("changes heard %v", changes)
	}
}

// TestNearlyFullDiskIsAnOutage: the watcher counts a filesystem with less than MinFree
// available as full before any commit fails, so what is answered meanwhile still fits.
func TestNearlyFullDiskIsAnOutage(t *testing.T) {
	dir := harness.SmallDisk(t, 24<<20)
	s := watched(t, dir, HealthOptions{Reserve: 4 << 20, MinFree: 8 << 20, Every: 20 * time.Millisecond})
	defer s.Close()
	if err := s.Unavailable(); err != nil {
		t.Fatal(err)
	}
	mustAccount(t, s, "acct", "1")
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 12<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the outage", time.Second, func() bool { return s.Unavailable() != nil })
	if o := s.Outage(); o.Cause != store.CauseDiskFull || !s.ReserveHeld() {
		t.Fatalf("outage %+v, reserve held %v: want disk full, the reserve kept", o, s.ReserveHeld())
	}
	if err := s.Settle(rec("meanwhile", "acct", "0.5")); err != nil {
		t.Fatalf("a record on a nearly full disk: %v", err)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the store writable again", 2*time.Second, func() bool { return s.Unavailable() == nil })
}

// TestOutageCauses: what a failed commit says names the outage's cause.
func TestOutageCauses(t *testing.T) {
	for err, want := range map[error]string{
		&fs.PathError{Op: "write", Path: "/x/tollway.db", Err: syscall.ENOSPC}: store.CauseDiskFull,
		&fs.PathError{Op: "write", Path: "/x/tollway.db", Err: syscall.EDQUOT}: store.CauseDiskFull,
		errors.New("file resize error: no space left on device"):               store.CauseDiskFull,
		&fs.PathError{Op: "write", Path: "/x/tollway.db", Err: syscall.EROFS}:  store.CauseReadOnly,
		&fs.PathError{Op: "sync", Path: "/x/tollway.db", Err: syscall.EIO}:     store.CauseIO,
		errors.New("something else"):                                           store.CauseWriteFailed,
	} {
		if got := store.CauseOf(err); got != want {
			t.Errorf("CauseOf(%v) = %q, want %q", err, got, want)
		}
	}
	o := &store.Outage{Cause: store.CauseReadOnly, Err: syscall.EROFS, Since: time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)}
	if got := o.Error(); got != "the gateway cannot record usage durably: its store's filesystem is read-only (since 2026-11-28T06:00:00Z)" {
		t.Errorf("outage message %q", got)
	}
}

// TestSettlerWaitsOutAnOutage: while the store cannot commit (a read-only or failing disk,
// injected here: no real filesystem turns read-only under an open file), the writer holds
// its whole batch without splitting it, counts it as queued, reports nothing, and writes it
// the moment the outage ends, not at its next pause.
func TestSettlerWaitsOutAnOutage(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "acct", "10")
	setRetries(t, time.Millisecond, 10*time.Millisecond, time.Hour)
	var down atomic.Bool
	var tries atomic.Int64
	down.Store(true)
	readOnly := &fs.PathError{Op: "write", Path: "tollway.db", Err: syscall.EROFS}
	s.failed(readOnly)
	q := faultySettler(s, time.Millisecond, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) { t.Errorf("%s reported: %v", r.RequestID, err) }}, func(recs []store.UsageRecord, hc settle.HoldChanges) ([]error, error) {
		tries.Add(1)
		if down.Load() {
			err := fmt.Errorf("%w: %w", store.ErrUnavailable, readOnly)
			return failAll(recs, err), err
		}
		return s.settleWith(recs, hc)
	}, nil)
	for i := range 100 {
		q.Record(rec(fmt.Sprintf("held-%d", i), "acct", "0.01"))
	}
	waitUntil(t, "the batch held", 2*time.Second, func() bool { return q.Queued() == 100 })
	time.Sleep(50 * time.Millisecond) // into the hour-long pause
	if n := tries.Load(); n > 4 {
		t.Fatalf("%d transactions for a batch the store cannot take: split instead of held", n)
	}
	down.Store(false)
	start := time.Now()
	s.tryRecover()
	waitUntil(t, "the held records written once the outage ended", 2*time.Second, func() bool { return count(t, s) == 100 })
	t.Logf("written %v after the outage ended", time.Since(start).Round(time.Millisecond))
	waitUntil(t, "nothing queued", time.Second, func() bool { return q.Queued() == 0 })
}
