package bbolt

// The store's health: whether what the gateway writes can be made durable now. A commit the
// filesystem refuses (full, read-only, failing), or a filesystem found read-only or nearly full
// by the watcher, starts an outage; the gateway refuses new billable work while one lasts
// (fail closed) and serves again once the watcher finds the store writable. Reading the state
// is one atomic load: request paths check it on every request, with no store round trip.
//
// A reserve file beside the store keeps room for what was answered before an outage was
// known: a disk that fills at once (faster than the watcher looks) fails a commit, the reserve
// is deleted and the commit tried again, so the records of requests already answered are
// written rather than held in memory, where a crash would lose them.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/tollway/tollway/store"
)

// HealthOptions tune the watcher (Watch).
type HealthOptions struct {
	// Reserve is the size of the reserve file kept beside the store (0: none).
	Reserve int64
	// MinFree: a filesystem with less space available than this (the reserve aside) counts
	// as full; it counts as writable again with twice as much.
	MinFree int64
	// Every is how often the watcher looks (statfs; a probe write while an outage lasts).
	Every time.Duration
	// Changed hears of each change: an outage starting (now set) or ending (now nil, was set).
	Changed func(now, was *store.Outage)
}

// Defaults of HealthOptions: a reserve of 16 MiB holds tens of thousands of records; an outage
// is known within a quarter second of the filesystem changing, a refused commit at once.
const (
	DefaultReserve = 16 << 20
	DefaultMinFree = 4 << 20
	defaultEvery   = 250 * time.Millisecond
)

// health is the store's state; the zero value is healthy, with no watcher and no reserve.
type health struct {
	outage atomic.Pointer[store.Outage]

	mu        sync.Mutex
	recovered chan struct{} // closed when the current outage ends; nil while healthy
	opts      HealthOptions
	reserve   string // the reserve file's path ("" none)
	held      bool   // the reserve file is in place
	stop      chan struct{}
	done      chan struct{}
}

// Unavailable is the current outage as an error, nil while records can be made durable: one
// atomic load.
func (s *Store) Unavailable() error {
	if o := s.health.outage.Load(); o != nil {
		return o
	}
	return nil
}

// Outage is the current outage, nil while healthy.
func (s *Store) Outage() *store.Outage { return s.health.outage.Load() }

// ReserveHeld reports whether the reserve file is in place (false when none is kept).
func (s *Store) ReserveHeld() bool {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.held
}

// ReserveState is "held", "released" (spent writing what was answered when the disk filled,
// made again when space comes back) or "none" (no reserve is kept).
func (s *Store) ReserveState() string {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	switch {
	case s.health.reserve == "":
		return "none"
	case s.health.held:
		return "held"
	}
	return "released"
}

// recovery is closed when the current outage ends; nil while there is none.
func (s *Store) recovery() <-chan struct{} {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.recovered
}

// update runs fn in a write transaction. A commit the filesystem refuses starts an outage and
// wraps ErrUnavailable; when it was a full disk and the reserve was still in place, the reserve
// is deleted and fn tried once more, so what was already answered is written. fn's own errors
// come back as they are.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	for try := 0; ; try++ {
		var own error
		err := s.db.Update(func(tx *bolt.Tx) error { own = fn(tx); return own })
		if err == nil || own != nil {
			return err
		}
		if released := s.failed(err); !released || try > 0 {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
}

// failed starts an outage (or keeps the one going) for a commit that failed with err, and
// reports whether it deleted the reserve to make room.
func (s *Store) failed(err error) (released bool) {
	cause := store.CauseOf(err)
	h := &s.health
	h.mu.Lock()
	if cause == store.CauseDiskFull && h.held {
		if rerr := os.Remove(h.reserve); rerr == nil || errors.Is(rerr, os.ErrNotExist) {
			h.held, released = false, true
		}
	}
	now, was := h.start(&store.Outage{Cause: cause, Err: err, Since: time.Now()})
	h.mu.Unlock()
	h.changed(now, was)
	return released
}

// start sets o as the outage unless one is going on; it returns what to report (nil, nil:
// nothing changed). h.mu is held.
func (h *health) start(o *store.Outage) (now, was *store.Outage) {
	if h.outage.Load() != nil {
		return nil, nil
	}
	h.outage.Store(o)
	h.recovered = make(chan struct{})
	return o, nil
}

// end clears the outage; h.mu is held.
func (h *health) end() (now, was *store.Outage) {
	was = h.outage.Swap(nil)
	if was != nil {
		close(h.recovered)
		h.recovered = nil
	}
	return nil, was
}

func (h *health) changed(now, was *store.Outage) {
	if (now != nil || was != nil) && h.opts.Changed != nil {
		h.opts.Changed(now, was)
	}
}

// Watch keeps the reserve file and looks at the store's filesystem every opts.Every until
// Close: read-only or nearly full starts an outage; during one, the reserve is made again and
// a probe write tried, and the outage ends when both succeed. It returns once the first look
// is done (an outage found at start is already reported).
func (s *Store) Watch(opts HealthOptions) {
	if opts.Every <= 0 {
		opts.Every = defaultEvery
	}
	h := &s.health
	h.mu.Lock()
	h.opts = opts
	if opts.Reserve > 0 {
		h.reserve = s.db.Path() + ".reserve"
		h.held = reserveHeld(h.reserve, opts.Reserve)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	h.stop, h.done = stop, done
	h.mu.Unlock()
	s.look()
	go func() {
		defer close(done)
		t := time.NewTicker(opts.Every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.look()
			}
		}
	}()
}

// stopWatching ends the watcher (Close).
func (s *Store) stopWatching() {
	h := &s.health
	h.mu.Lock()
	stop, done := h.stop, h.done
	h.stop = nil
	h.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// look is one round of the watcher.
func (s *Store) look() {
	h := &s.health
	free, readOnly, err := filesystemOf(filepath.Dir(s.db.Path()))
	h.mu.Lock()
	var now, was *store.Outage
	switch {
	case err != nil:
		// statfs failing says nothing about commits: the probe below decides.
	case readOnly:
		now, was = h.start(&store.Outage{Cause: store.CauseReadOnly, Err: fmt.Errorf("the filesystem holding %s is mounted read-only: %w", s.db.Path(), syscall.EROFS), Since: time.Now()})
	case free < h.opts.MinFree:
		now, was = h.start(&store.Outage{Cause: store.CauseDiskFull, Err: fmt.Errorf("%d bytes available on the filesystem holding %s, under the %d the gateway keeps free: %w", free, s.db.Path(), h.opts.MinFree, syscall.ENOSPC), Since: time.Now()})
	}
	down := h.outage.Load() != nil
	h.mu.Unlock()
	h.changed(now, was)
	if !down || readOnly || (err == nil && free < 2*h.opts.MinFree+h.missingReserve()) {
		return
	}
	s.tryRecover()
}

// missingReserve is the room the reserve needs before the store counts as writable again.
func (h *health) missingReserve() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reserve == "" || h.held {
		return 0
	}
	return h.opts.Reserve
}

// tryRecover makes the reserve again if it was deleted, then probes; the outage ends when
// both succeed.
func (s *Store) tryRecover() {
	h := &s.health
	h.mu.Lock()
	if h.reserve != "" && !h.held {
		if err := makeReserve(h.reserve, h.opts.Reserve); err != nil {
			h.mu.Unlock()
			return
		}
		h.held = true
	}
	h.mu.Unlock()
	if err := s.probeOnce(); err != nil {
		return
	}
	h.mu.Lock()
	now, was := h.end()
	h.mu.Unlock()
	h.changed(now, was)
}

// probeOnce is a probe write that does not start an outage or touch the reserve (the watcher
// decides what its failure means).
func (s *Store) probeOnce() error {
	return s.db.Update(func(tx *bolt.Tx) error { return putProbe(tx, s.db.Info().PageSize) })
}

// filesystemOf reports the space available to the gateway on dir's filesystem (as df shows
// it: without the blocks kept for root) and whether it is mounted read-only.
func filesystemOf(dir string) (free int64, readOnly bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Bavail) * st.Bsize, st.Flags&unix.ST_RDONLY != 0, nil
}

// reserveHeld reports whether a reserve file of at least size bytes, allocated (not sparse),
// is at path; if not, it tries to make one.
func reserveHeld(path string, size int64) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err == nil && st.Blocks*512 >= size {
		return true
	}
	return makeReserve(path, size) == nil
}

// makeReserve allocates size bytes at path, durably. A filesystem that cannot allocate
// without writing gets zeros.
func makeReserve(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = writeZeros(f, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path) // a partial reserve would be taken for a whole one
		return fmt.Errorf("store: reserve %s: %w", path, err)
	}
	return nil
}

func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return err
		}
	}
	return nil
}
