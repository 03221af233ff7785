package server

// The config file watch. It uses inotify directly because the mask is the point: fsnotify
// (v1.10) always asks for IN_MODIFY on a watched directory, so a store file kept beside the
// config woke the watcher on every page bbolt wrote (several per settled batch), only for the
// event to be dropped by name: 1-2.5% of Tollway's CPU in the bench's profiles.

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// configWatchMask: a file written and closed, or moved or created under the name. Editors that
// replace the file by rename and writers that write in place both end in one of these, and
// none fires while a file is still being written.
const configWatchMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE

// fileWatch calls onChange 200 ms after the last change to one file, so a change made in
// several steps reloads once. The directory is watched because editors replace files.
type fileWatch struct {
	f    *os.File
	seen atomic.Int64 // events read, for tests: writes to other files must not wake the watch
	done chan struct{}
}

// configWatch is the runner that reloads the configuration when its file changes. A file that
// cannot be watched is no error: POST /admin/v1/reload still reloads it.
func (p *process) configWatch() runner {
	var w *fileWatch
	path := p.cfg.Path()
	return runner{name: "config watch", start: func(context.Context) error {
		var err error
		w, err = newFileWatch(path, p.log, func() {
			if err := p.reload(); err != nil {
				p.log.Error("config reload failed; keeping the running configuration", "file", path, "error", err)
			}
		})
		if err != nil {
			p.log.Warn("config file is not watched; use POST /admin/v1/reload", "error", err)
		}
		return nil
	}, stop: func() {
		if w != nil {
			w.close()
		}
	}}
}

func newFileWatch(path string, log *slog.Logger, onChange func()) (*fileWatch, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(abs), configWatchMask); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "inotify_add_watch", Path: filepath.Dir(abs), Err: err}
	}
	// A non-blocking descriptor goes to Go's poller: Close then ends a pending Read.
	w := &fileWatch{f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{})}
	target, _ := filepath.EvalSymlinks(abs) // before any event can be read
	go w.read(abs, target, log, onChange)
	return w, nil
}

// read follows the directory's events. Besides the config's own name, a link created or moved
// in the directory may have changed what the config resolves to: Kubernetes updates a mounted
// ConfigMap by renaming a new ..data symlink over the old one (tollway.yaml -> ..data/tollway.yaml),
// and the config's own name sees no event.
func (w *fileWatch) read(abs, target string, log *slog.Logger, onChange func()) {
	defer close(w.done)
	var debounce *time.Timer
	defer func() {
		if debounce != nil {
			debounce.Stop() // a reload still pending when the watch stops is dropped
		}
	}()
	name := filepath.Base(abs)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				log.Warn("config watch stopped; use POST /admin/v1/reload", "error", err)
			}
			return
		}
		changed := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := off + unix.SizeofInotifyEvent + int(ev.Len)
			if end > n {
				break
			}
			w.seen.Add(1)
			evName := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00")
			// An overflowed queue may have dropped the config's own event: reload to be sure.
			own := evName == name || ev.Mask&unix.IN_Q_OVERFLOW != 0
			if own || ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				now, _ := filepath.EvalSymlinks(abs)
				changed = changed || own || now != target
				target = now
			}
			off = end
		}
		if changed {
			if debounce != nil {
				debounce.Stop()
			}
			debounce = time.AfterFunc(200*time.Millisecond, onChange)
		}
	}
}

func (w *fileWatch) close() {
	w.f.Close()
	<-w.done
}
