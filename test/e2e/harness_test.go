// Package e2e drives the real thing: the tollway binary, the real Envoy it launches, fake
// providers on loopback, and the official SDKs as clients.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollway/tollway/envoy"
)

var (
	tollwayBin string
	envoyBin   string
	repoRoot   string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		wd, _ := os.Getwd()
		repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
		var err error
		if envoyBin, err = envoy.FindBinary(os.Getenv("TOLLWAY_ENVOY_BIN")); err != nil {
			// Never a silent skip: without Envoy these tests cannot prove anything.
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		tollwayBin = os.Getenv("TOLLWAY_BIN")
		if tollwayBin == "" {
			dir, err := os.MkdirTemp("", "tollway-e2e-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			tollwayBin = filepath.Join(dir, "tollway")
			build := exec.Command("go", "build", "-race", "-o", tollwayBin, "./cmd/tollway")
			build.Dir, build.Stdout, build.Stderr = repoRoot, os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: build tollway: %v\n", err)
				return 1
			}
		}
		return m.Run()
	}())
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer collects a process's output for assertions while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateway is a running `tollway run`.
type gateway struct {
	t       testing.TB
	cfgPath string
	Public  string
	Admin   string
	BaseURL string
	cmd     *exec.Cmd
	logs    *syncBuffer
	exited  chan struct{}
	exitErr error
}

// configYAML renders a config whose listen addresses are filled in by startGateway.
type gwConfig struct {
	Public, Admin, Store string
	Body                 string // providers: and models: sections
}

func (c gwConfig) render() string {
	return fmt.Sprintf("listen: {public: %s, admin: %s}\nstore: {path: %s}\nenvoy: {drain_timeout: 5s}\n%s",
		c.Public, c.Admin, c.Store, c.Body)
}

// startGateway writes body (providers and models) into a config file, starts tollway with it
// and waits for its ready line.
func startGateway(t testing.TB, body string, env ...string) *gateway {
	t.Helper()
	dir := t.TempDir()
	cfg := gwConfig{Public: freeAddr(t), Admin: freeAddr(t), Store: filepath.Join(dir, "tollway.db"), Body: body}
	g := &gateway{t: t, cfgPath: filepath.Join(dir, "tollway.yaml"), Public: cfg.Public, Admin: cfg.Admin,
		BaseURL: "http://" + cfg.Public + "/v1", logs: &syncBuffer{}, exited: make(chan struct{})}
	if err := os.WriteFile(g.cfgPath, []byte(cfg.render()), 0o600); err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command(tollwayBin, "run", "--config", g.cfgPath)
	g.cmd.Env = append(append(os.Environ(), "ENVOY_BIN="+envoyBin), env...)
	g.cmd.Dir = dir
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.cmd.Stderr = g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(g.logs, "stdout: "+line)
			if strings.HasPrefix(line, "tollway ready") {
				ready <- line
			}
		}
	}()
	go func() {
		g.exitErr = g.cmd.Wait()
		close(g.exited)
	}()
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("gateway output:\n%s", g.logs.String())
		}
	})
	select {
	case <-ready:
	case <-g.exited:
		t.Fatalf("tollway exited before ready: %v\n%s", g.exitErr, g.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("tollway not ready after 60s:\n%s", g.logs.String())
	}
	return g
}

// stop sends SIGTERM and waits for a clean exit.
func (g *gateway) stop() {
	select {
	case <-g.exited:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

// cli runs a tollway subcommand against this gateway and returns its stdout.
func (g *gateway) cli(args ...string) (string, error) {
	cmd := exec.Command(tollwayBin, append(args, "--config", g.cfgPath)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("tollway %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// newKey creates an API key through the CLI.
func (g *gateway) newKey(account string) string {
	g.t.Helper()
	out, err := g.cli("keys", "create", "--account", account)
	if err != nil {
		g.t.Fatal(err)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "ale-") {
		g.t.Fatalf("keys create printed %q, want an ale- key", out)
	}
	return key
}

// adminJSON calls the admin API.
func (g *gateway) adminJSON(method, path string, in any) (int, map[string]any) {
	g.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+g.Admin+path, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// chat posts a raw body to /v1/chat/completions.
func (g *gateway) chat(ctx context.Context, key, body string) *http.Response {
	g.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.BaseURL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	if key != "" {
		req.Header.Set("authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

type apiError struct {
	Error struct {
		Message   string `json:"message"`
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// wantError asserts the spec's error shape, status, code and the x-request-id match.
func wantError(t testing.TB, resp *http.Response, status int, code string) apiError {
	t.Helper()
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e apiError
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("error body is not JSON: %q", raw)
	}
	if resp.StatusCode != status || e.Error.Code != code {
		t.Fatalf("got %d %q, want %d %q; body %s", resp.StatusCode, e.Error.Code, status, code, raw)
	}
	if e.Error.Message == "" {
		t.Fatalf("error without message: %s", raw)
	}
	if rid := resp.Header.Get("x-request-id"); rid == "" || rid != e.Error.RequestID {
		t.Fatalf("x-request-id header %q != body request_id %q", rid, e.Error.RequestID)
	}
	return e
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
