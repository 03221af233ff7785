package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestConfigWatchIgnoresTheStore: a store file beside the config, written and synced page by
// page as bbolt does, never wakes the watch (fsnotify's directory watch read an event for each
// write); writing the config in place, and replacing it by rename as editors do, each reload once.
func TestConfigWatchIgnoresTheStore(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tollway.yaml")
	if err := os.WriteFile(cfg, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The store is open before the watch starts, as in run.
	db, err := os.OpenFile(filepath.Join(dir, "tollway.db"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var reloads atomic.Int64
	w, err := newFileWatch(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { reloads.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()

	page := make([]byte, 4096)
	for i := range 200 {
		if _, err := db.WriteAt(page, int64(i%16)*4096); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			db.Sync()
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n, r := w.seen.Load(), reloads.Load(); n != 0 || r != 0 {
		t.Fatalf("writes to the store beside the config: %d events read, %d reloads; want none", n, r)
	}

	wantReloads := func(n int64, what string) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for reloads.Load() < n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // and no second reload for the same change
		if got := reloads.Load(); got != n {
			t.Fatalf("%s: %d reloads, want %d", what, got, n)
		}
	}
	if err := os.WriteFile(cfg, []byte("a: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantReloads(1, "the config written in place")
	tmp := filepath.Join(dir, ".tollway.yaml.swp")
	if err := os.WriteFile(tmp, []byte("a: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	wantReloads(2, "the config replaced by rename")
}

// TestConfigWatchFollowsAConfigMapSwap: Kubernetes updates a mounted ConfigMap by writing a new
// timestamped directory and renaming a symlink (..data) over the old one; the config's own name
// never changes (tollway.yaml -> ..data/tollway.yaml). The swap reloads once.
func TestConfigWatchFollowsAConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	write := func(version, body string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, version, "tollway.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("..2026_11_26_05_00_00.1", "a: 1\n")
	if err := os.Symlink("..2026_11_26_05_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "tollway.yaml")
	if err := os.Symlink(filepath.Join("..data", "tollway.yaml"), cfg); err != nil {
		t.Fatal(err)
	}
	var reloads atomic.Int64
	w, err := newFileWatch(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { reloads.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()

	// The kubelet's atomic writer: new directory, a temporary link to it, renamed over ..data.
	write("..2026_11_26_05_01_00.2", "a: 2\n")
	if err := os.Symlink("..2026_11_26_05_01_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_26_05_00_00.1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for reloads.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if got := reloads.Load(); got != 1 {
		t.Fatalf("a ConfigMap swap: %d reloads, want 1", got)
	}
}
