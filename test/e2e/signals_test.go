package e2e

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// slowStream opens a stream of about words chunks and reads its first event.
func slowStream(t *testing.T, g *gateway, words int) (*http.Response, *bufio.Scanner) {
	t.Helper()
	prompt := strings.TrimSpace(strings.Repeat("w ", words))
	resp := g.chat(t.Context(), g.newKey("acme"), `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`)
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first event")
	}
	return resp, sc
}

// readToEnd reads the rest of a stream; done says whether it ended with [DONE].
func readToEnd(sc *bufio.Scanner) (done bool) {
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			done = true
		}
	}
	return done
}

func waitExit(t *testing.T, g *gateway, within time.Duration) {
	t.Helper()
	select {
	case <-g.Exited():
	case <-time.After(within):
		t.Fatalf("tollway still running %s later", within)
	}
}

// TestInterruptToGroupDrainsStream: Ctrl-C in a terminal signals the whole foreground process
// group (a closed terminal sends SIGHUP the same way). Envoy has a group of its own, so only
// Tollway gets it and drains Envoy: the open stream finishes with [DONE] and Tollway exits 0.
func TestInterruptToGroupDrainsStream(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 100 * time.Millisecond})
			g := startWith(t, harness.Options{Body: catalog(fake.URL()), Env: []string{"FAKE_PROVIDER_KEY=" + providerKey}, OwnGroup: true, Drain: 20 * time.Second})
			if pgid, err := syscall.Getpgid(g.EnvoyPID); err != nil || pgid == g.Pid() {
				t.Fatalf("Envoy's process group %d (err %v) is Tollway's own", pgid, err)
			}
			resp, sc := slowStream(t, g, 20)
			defer resp.Body.Close()
			if err := g.SignalGroup(sig); err != nil {
				t.Fatal(err)
			}
			if !readToEnd(sc) {
				t.Fatalf("the stream was cut by %s: no [DONE]", sig)
			}
			waitExit(t, g, 30*time.Second)
			if g.ExitErr() != nil {
				t.Fatalf("exit after %s: %v", sig, g.ExitErr())
			}
			if !strings.Contains(g.logs.String(), "draining") || !strings.Contains(g.logs.String(), "signal "+sig.String()) {
				t.Fatalf("the drain was not logged with its cause:\n%s", g.logs.String())
			}
		})
	}
}

// TestSecondSignalStopsAtOnce: a second signal during the drain stops at once, cutting what is
// still open, and says so.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 200 * time.Millisecond})
	g := startWith(t, harness.Options{Body: catalog(fake.URL()), Env: []string{"FAKE_PROVIDER_KEY=" + providerKey}, OwnGroup: true, Drain: 60 * time.Second})
	resp, sc := slowStream(t, g, 200) // 40 s of stream, well inside the drain timeout
	defer resp.Body.Close()
	if err := g.SignalGroup(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the drain to start", 10*time.Second, func() bool { return strings.Contains(g.logs.String(), "draining") })
	if err := g.SignalGroup(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitExit(t, g, 15*time.Second)
	if readToEnd(sc) {
		t.Fatal("the stream finished: the second signal did not stop the gateway")
	}
	if !strings.Contains(g.logs.String(), "stopping at once: a second signal arrived during the drain") {
		t.Fatalf("the forced stop was not logged:\n%s", g.logs.String())
	}
}

// runDirs lists the gateways' run directories under tmp.
func runDirs(t *testing.T, tmp string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(tmp, "tollway-run-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestRunDirRemovedOnEveryExit: the run directory (sockets, bootstrap) goes away on a normal
// exit; after kill -9 it stays, and the next start removes it, but never a live gateway's.
func TestRunDirRemovedOnEveryExit(t *testing.T) {
	t.Parallel()
	tmp := shortTempDir(t)
	start := func() *gateway {
		return startWith(t, harness.Options{Env: []string{"TMPDIR=" + tmp}})
	}
	g := start()
	if n := len(runDirs(t, tmp)); n != 1 {
		t.Fatalf("%d run dirs while running", n)
	}
	g.Stop()
	if d := runDirs(t, tmp); len(d) != 0 {
		t.Fatalf("run dir left after a normal exit: %v", d)
	}

	crashed := start()
	envoyPID := crashed.EnvoyPID
	crashed.Kill()
	waitFor(t, "Envoy to follow its parent", 10*time.Second, func() bool {
		return errors.Is(syscall.Kill(envoyPID, 0), syscall.ESRCH)
	})
	stale := runDirs(t, tmp)
	if len(stale) != 1 {
		t.Fatalf("after kill -9: run dirs %v, want the crashed one", stale)
	}

	live := start()
	if _, err := os.Stat(stale[0]); !os.IsNotExist(err) {
		t.Fatalf("the crashed gateway's run dir %s is still there (%v)", stale[0], err)
	}
	if !strings.Contains(live.logs.String(), "removed the run directory of a gateway that is gone") {
		t.Errorf("the removal was not logged:\n%s", live.logs.String())
	}
	mine := runDirs(t, tmp)
	if len(mine) != 1 {
		t.Fatalf("run dirs %v", mine)
	}

	// A second gateway starting next to a live one leaves the live one's directory alone.
	second := start()
	if _, err := os.Stat(mine[0]); err != nil {
		t.Fatalf("a start removed a live gateway's run dir: %v", err)
	}
	resp, err := http.Get(live.BaseURL + "/models")
	if err != nil {
		t.Fatalf("the first gateway stopped serving: %v", err)
	}
	resp.Body.Close()
	live.Stop()
	second.Stop()
	if d := runDirs(t, tmp); len(d) != 0 {
		t.Fatalf("run dirs left: %v", d)
	}
}
