package bbolt

// Offline compaction: the file never shrinks by itself (pages freed by pruning are reused, not
// returned), so `tollway store compact` rewrites it with bbolt's Compact, pages packed full.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// CompactResult gives the file's size before and after compaction, in bytes.
type CompactResult struct {
	Before, After int64
}

// compactTxSize bounds each transaction of the copy, so memory stays small on large files.
const compactTxSize = 64 << 20

// Compact rewrites the store file at path: it copies every bucket into a temporary file next to
// it, fsyncs it and renames it over path, so a crash leaves either the old file or the new one.
// The file must not be in use: a running gateway's lock makes Compact fail at once with
// ErrLocked.
func Compact(path string) (CompactResult, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return CompactResult{}, fmt.Errorf("store: compact %s: %w", path, err)
	}
	// The exclusive lock is held until the new file has replaced the old one: no gateway can
	// open either meanwhile.
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 100 * time.Millisecond})
	if errors.Is(err, bolt.ErrTimeout) {
		return CompactResult{}, fmt.Errorf("store %s: %w: stop the gateway using it, then compact", path, store.ErrLocked)
	}
	if err != nil {
		return CompactResult{}, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer src.Close()

	tmp := path + ".compact.tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return CompactResult{}, fmt.Errorf("store: remove a stale %s: %w", tmp, err)
	}
	after, err := compactInto(tmp, src, fi.Mode().Perm())
	if err != nil {
		os.Remove(tmp)
		return CompactResult{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return CompactResult{}, fmt.Errorf("store: replace %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return CompactResult{}, err
	}
	return CompactResult{Before: fi.Size(), After: after}, nil
}

// compactInto copies src into a new file at tmp, made durable, and returns its size.
func compactInto(tmp string, src *bolt.DB, perm os.FileMode) (int64, error) {
	// No fsync per copy transaction: the whole file is synced once at the end.
	dst, err := bolt.Open(tmp, perm, &bolt.Options{NoSync: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		return 0, fmt.Errorf("store: create %s: %w", tmp, err)
	}
	if err := bolt.Compact(dst, src, compactTxSize); err != nil {
		dst.Close()
		return 0, fmt.Errorf("store: compact into %s: %w", tmp, err)
	}
	var used int64
	if err := dst.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil {
		dst.Close()
		return 0, err
	}
	if err := dst.Close(); err != nil {
		return 0, fmt.Errorf("store: close %s: %w", tmp, err)
	}
	// bbolt grows files in steps of up to 16 MiB; the pages past the high-water mark hold
	// nothing, so the file is cut there (a new bbolt file is just its pages, too).
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := f.Truncate(used); err != nil {
		return 0, fmt.Errorf("store: truncate %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("store: sync %s: %w", tmp, err)
	}
	return used, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("store: sync directory %s: %w", dir, err)
	}
	return nil
}
