// Package e2e drives the real thing: the tollway binary, the real Envoy it launches, fake
// providers on loopback, and the official SDKs as clients.
//
// Every test starts its own gateway, Envoy and fakes on free ports, so the tests run side by
// side (t.Parallel; make test runs -parallel 6): most of their time is waiting on processes
// and sockets, not CPU. The few that measure the machine (memory, CPUs, latency bounds) or set
// the process environment run alone first, and say why.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/harness"
)

var (
	tollwayBin string
	envoyBin   string
	repoRoot   string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		flag.Parse()
		if testing.Short() {
			// make test-unit: these tests need the real Envoy and binary; make test runs them.
			fmt.Fprintln(os.Stderr, "e2e: not run with -short (make test runs them)")
			return 0
		}
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
		defer stopPostgres()
		return m.Run()
	}())
}

// freeAddr returns a loopback host:port that was free a moment ago.
// deadAddr is where a provider that is down lives: nothing listens on port 1 and no test can
// be given it, unlike a free port, which another test's server may take before the gateway
// connects (and answer with its own key's 401).
const deadAddr = "127.0.0.1:1"

func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// syncBuffer collects a process's output for assertions while it runs.
type syncBuffer = harness.SyncBuffer

// gateway is a running `tollway run` bound to a test.
type gateway struct {
	*harness.Gateway
	t    testing.TB
	logs *syncBuffer
}

// startGateway starts tollway with a config file whose providers and models are body.
func startGateway(t testing.TB, body string, env ...string) *gateway {
	t.Helper()
	return startWith(t, harness.Options{Body: body, Env: env})
}

// startGatewayIn is startGateway in dir, whose tollway.db a restart finds again.
func startGatewayIn(t testing.TB, dir, body string, env ...string) *gateway {
	t.Helper()
	return startWith(t, harness.Options{Dir: dir, Body: body, Env: env})
}

// startWith starts tollway as o says (binary and Envoy filled in, a temporary directory unless
// o.Dir is set) and stops it when the test ends, printing its output if the test failed.
func startWith(t testing.TB, o harness.Options) *gateway {
	t.Helper()
	o.Bin, o.EnvoyBin = tollwayBin, envoyBin
	return startOptions(t, o)
}

// startOptions is startWith with the binary and Envoy as o says.
func startOptions(t testing.TB, o harness.Options) *gateway {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	hg, err := harness.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{Gateway: hg, t: t, logs: hg.Logs}
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("gateway output:\n%s", g.logs.String())
		}
	})
	return g
}

// cli runs a tollway subcommand against this gateway and returns its stdout.
func (g *gateway) cli(args ...string) (string, error) { return g.CLI(context.Background(), args...) }

// newKey creates an API key through the CLI.
func (g *gateway) newKey(account string, flags ...string) string {
	g.t.Helper()
	key, err := g.NewKey(context.Background(), account, flags...)
	if err != nil {
		g.t.Fatal(err)
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
	req.Header.Set("content-type", "application/json") // the admin API refuses writes without it
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
