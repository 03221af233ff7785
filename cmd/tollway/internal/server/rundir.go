package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A gateway's sockets and Envoy bootstrap live in a private directory under $TMPDIR, removed on
// every exit. A gateway killed outright (kill -9, a crash, power loss on a tmpfs-less /tmp)
// cannot remove it, so each start removes the directories of gateways that are gone. Ownership
// is an flock on the directory, held for the gateway's life: the kernel releases it however the
// process ends, so a live gateway's directory is never taken for a dead one's (a pid could be
// reused). The owner's pid file is written only once the lock is held; a directory without it
// is still being set up.
const (
	runDirPrefix = "tollway-run-"
	runDirOwner  = "owner.pid"
)

// makeRunDir creates and locks this gateway's directory; release removes it.
func makeRunDir(log *slog.Logger) (dir string, release func(), err error) {
	removeStaleRunDirs(log, os.TempDir())
	dir, err = os.MkdirTemp("", runDirPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("runtime dir: %w", err)
	}
	lock, err := os.Open(dir)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, runDirOwner), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	}
	release = func() {
		os.RemoveAll(dir)
		if lock != nil {
			lock.Close()
		}
	}
	if err != nil {
		release()
		return "", nil, fmt.Errorf("runtime dir %s: %w", dir, err)
	}
	return dir, release, nil
}

// removeStaleRunDirs removes the run directories under tmp whose owner is gone.
func removeStaleRunDirs(log *slog.Logger, tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, runDirPrefix+"*"))
	for _, dir := range dirs {
		if owner, stale := staleRunDir(dir); stale {
			if err := os.RemoveAll(dir); err != nil {
				log.Warn("could not remove the run directory of a gateway that is gone", "dir", dir, "error", err)
				continue
			}
			log.Info("removed the run directory of a gateway that is gone", "dir", dir, "owner_pid", owner)
		}
	}
}

// staleRunDir reports whether dir's owner is gone: its lock is free and it had written its pid
// (or it never got that far, a minute ago or more).
func staleRunDir(dir string) (owner string, stale bool) {
	f, err := os.Open(dir)
	if err != nil {
		return "", false
	}
	defer f.Close() // releases our lock, if we got it
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return "", false // a live gateway holds it
	}
	pid, err := os.ReadFile(filepath.Join(dir, runDirOwner))
	if err == nil && len(pid) > 0 {
		return strings.TrimSpace(string(pid)), true
	}
	st, err := f.Stat()
	return "", err == nil && time.Since(st.ModTime()) > time.Minute
}
