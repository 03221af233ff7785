package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/cmd/tollway/internal/leaktest"
	"go.uber.org/goleak"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestFailedRunLeavesNoListener: a run that fails after opening listeners closes them, however
// far it got: past all of them (a bad callback allow-list, which Validate would have refused),
// or at a later one (a taken address).
func TestFailedRunLeavesNoListener(t *testing.T) {
	configtest.ClearEnv(t)
	for _, tc := range []struct {
		name string
		mode string
		take string // the listen key whose address another process holds
		fail func(*config.Config)
		want string
	}{
		{name: "after the listeners", mode: "external", want: "allow_private",
			fail: func(c *config.Config) { c.Callbacks.AllowPrivate = []string{"not-an-address"} }},
		{name: "at the ext_proc listener", mode: "external", take: "extproc", want: "listen.extproc"},
		{name: "at the public port", mode: "child", take: "public", want: "listen.public"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := map[string]string{"public": freeAddr(t), "admin": freeAddr(t), "xds": freeAddr(t), "extproc": freeAddr(t)}
			if tc.take != "" {
				ln, err := net.Listen("tcp", addrs[tc.take])
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
			}
			// Tracing on: its exporter is stopped too (goleak).
			cfg, err := config.Load(configtest.Write(t, fmt.Sprintf("listen: {public: %s, admin: %s, xds: %s, extproc: %s}\nenvoy: {mode: %s}\nstore: {path: %s}\ntracing: {otlp_endpoint: \"http://127.0.0.1:9\"}\n",
				addrs["public"], addrs["admin"], addrs["xds"], addrs["extproc"], tc.mode, filepath.Join(t.TempDir(), "t.db"))))
			if err != nil {
				t.Fatal(err)
			}
			if tc.fail != nil {
				tc.fail(cfg)
			}
			before := goleak.IgnoreCurrent()
			if err := Run(t.Context(), cfg, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v, want an error naming %s", err, tc.want)
			}
			for name, addr := range addrs {
				if name == tc.take || (name == "public" || tc.mode == "child") && name != "admin" {
					continue // not ours: taken, or never opened (the public port is Envoy's; the child's xDS and ext_proc are unix sockets)
				}
				if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
					c.Close()
					t.Errorf("the %s listener %s is still open after the run failed", name, addr)
				}
			}
			goleak.VerifyNone(t, before)
		})
	}
}

// signalWriter is a log writer that closes seen at the first line matching want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want *regexp.Regexp
	seen chan string
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := w.want.FindString(w.buf.String()); m != "" && !w.done {
		w.done = true
		w.seen <- m
	}
	return len(p), nil
}

// TestRunReturnsWithNothingRunning: when run returns, every goroutine it started has ended
// and no Envoy it started is left, even when ctx ends while the supervisor restarts Envoy.
func TestRunReturnsWithNothingRunning(t *testing.T) {
	configtest.ClearEnv(t)
	cfg, err := config.Load(configtest.Write(t, fmt.Sprintf("listen: {public: %s, admin: %s}\nstore: {path: %s}\nenvoy: {drain_timeout: 1s}\n",
		freeAddr(t), freeAddr(t), filepath.Join(t.TempDir(), "t.db"))))
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	ready := &signalWriter{want: regexp.MustCompile(`envoy_pid=\d+`), seen: make(chan string, 1)}
	exited := &signalWriter{want: regexp.MustCompile(`ENVOY EXITED`), seen: make(chan string, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, ready, exited) }()
	var pid int
	select {
	case m := <-ready.seen:
		pid, _ = strconv.Atoi(strings.TrimPrefix(m, "envoy_pid="))
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, exited.buf.String())
	case <-time.After(60 * time.Second):
		t.Fatal("not ready within a minute")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited.seen // the supervisor starts another Envoy now
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if left := leaktest.Running("(*Supervisor).Run", "pollHealth("); len(left) > 0 {
		t.Fatalf("run returned with %d of its goroutines running:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	goleak.VerifyNone(t, before)
}

// TestRunRefusesAnUnresolvedAdminToken: the gateway refuses to start rather than open the API
// without its token (the cases of config's TestAdminTokenConfig that load but do not resolve).
func TestRunRefusesAnUnresolvedAdminToken(t *testing.T) {
	configtest.ClearEnv(t)
	const listen = "listen: {public: 127.0.0.1:18080, admin: 127.0.0.1:19090}\n"
	for _, env := range []string{"", "short", strings.Repeat("a", 31)} { // unset, short, 31 characters
		if env == "" {
			configtest.Unsetenv(t, "T_ADMIN_RUN")
		} else {
			t.Setenv("T_ADMIN_RUN", env)
		}
		cfg, err := config.Load(configtest.Write(t, listen+`admin: {token: "${T_ADMIN_RUN}"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if err := Run(context.Background(), cfg, &out, &errb); err == nil || !strings.Contains(err.Error(), "admin.token") {
			t.Fatalf("Run with an unresolved token (%q): %v", env, err)
		}
	}
}
