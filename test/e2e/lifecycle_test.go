package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// TestExtProcDownFailsClosed runs Envoy with Tollway's xDS but no ext_proc server behind the
// socket: requests must get a clear 500 in the spec's shape and never reach the provider.
func TestExtProcDownFailsClosed(t *testing.T) {
	fake := fakeupstream.Start(t, fakeupstream.Options{})
	dir := shortTempDir(t)
	gw := envoyWithoutTollway(t, dir, filepath.Join(dir, "no-extproc-here.sock"), fake, ir.Limits{})
	resp := gw.chat(context.Background(), "ale-"+strings.Repeat("k", 43), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	e := wantError(t, resp, 500, "gateway_unavailable")
	t.Log(e.Error.Message)
	if n := fake.RequestCount(); n != 0 {
		t.Fatalf("the provider was reached %d times without ext_proc", n)
	}
}

// shortTempDir is a temp directory with a short path: unix socket paths are limited to 108 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// envoyWithoutTollway runs the real Envoy on Tollway's bootstrap and resources (one model "m"
// on fake), served by an xDS server in the test, with ext_proc expected at extProcSock: the
// test decides what, if anything, answers there.
func envoyWithoutTollway(t *testing.T, dir, extProcSock string, fake *fakeupstream.Server, limits ir.Limits) *gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctrl := xds.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	gs := grpc.NewServer()
	ctrl.Register(ctx, gs)
	ln, err := net.Listen("unix", filepath.Join(dir, "xds.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)

	public := freeAddr(t)
	l, _ := ir.ParseListen(public)
	p := ir.Provider{Name: "fake", Type: ir.ProviderTypeOpenAI}
	if err := ir.ParseProviderURL(&p, fake.URL()); err != nil {
		t.Fatal(err)
	}
	g := &ir.Gateway{Listener: l, Providers: []ir.Provider{p}, Limits: limits,
		Models: []ir.Model{{ID: "m", Targets: []ir.Target{{Provider: "fake", Model: "m"}}}}}
	res, err := translator.Translate(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Push(ctx, res, 0); err != nil {
		t.Fatal(err)
	}
	boot, err := envoy.Bootstrap(envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "unix", Address: filepath.Join(dir, "xds.sock")},
		ExtProc: envoy.Endpoint{Network: "unix", Address: extProcSock},
		Admin:   envoy.Endpoint{Network: "unix", Address: filepath.Join(dir, "admin.sock")},
		Limits:  limits,
	})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := envoy.MarshalBootstrap(boot)
	bootPath := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(bootPath, js, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	proc, err := envoy.Start(slog.Default(), envoy.LaunchConfig{Binary: envoyBin, BootstrapPath: bootPath, AdminSocket: filepath.Join(dir, "admin.sock")}, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Stop)
	if err := proc.WaitReady(ctx, 30*time.Second, func() error { return nil }); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	if err := ctrl.WaitAccepted(ctx, 1, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("envoy output:\n%s", logs.String())
		}
	})
	return &gateway{t: t, Gateway: &harness.Gateway{BaseURL: "http://" + public + "/v1"}}
}

func runTollway(t *testing.T, cfg string, env ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tollway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tollwayBin, "run", "--config", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		case <-done:
		}
	}()
	out, err := cmd.CombinedOutput()
	close(done)
	return string(out), err
}

// TestStartupFailuresAreClear: a taken port, a missing Envoy and a bad config each stop the
// gateway with a non-zero exit and a message that names the problem.
func TestStartupFailuresAreClear(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := func(public string) string {
		return "listen: {public: " + public + ", admin: " + freeAddr(t) + "}\nstore: {path: data/t.db}\n" + catalog("http://127.0.0.1:9/v1")
	}
	cases := []struct {
		name, cfg, want string
		env             []string
	}{
		{"public port taken", base(busy.Addr().String()), "listen.public " + busy.Addr().String(), []string{"ENVOY_BIN=" + envoyBin}},
		{"no envoy", base(freeAddr(t)), "make envoy", []string{"ENVOY_BIN=", "TOLLWAY_ENVOY_BIN=", "PATH=/nonexistent"}},
		{"typo in config", base(freeAddr(t)) + "modles: []\n", "modles", []string{"ENVOY_BIN=" + envoyBin}},
		{"admin off loopback without a token", "listen: {public: " + freeAddr(t) + ", admin: 0.0.0.0:" + port(freeAddr(t)) + "}\nstore: {path: data/t.db}\n" + catalog("http://127.0.0.1:9/v1"),
			"without a token the admin API and console would be open", []string{"ENVOY_BIN=" + envoyBin, "TOLLWAY_ADMIN_TOKEN="}},
		{"model with unknown provider", base(freeAddr(t)) + "  - {id: x, providers: [{provider: ghost, model: y}]}\n", `provider "ghost" is not defined`, []string{"ENVOY_BIN=" + envoyBin}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runTollway(t, c.cfg, c.env...)
			var exit *exec.ExitError
			if !asExit(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("want a non-zero exit, got %v\n%s", err, out)
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("output does not name the problem (%q):\n%s", c.want, out)
			}
		})
	}
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

// TestEnvoyDeathStopsTheGateway: if Envoy dies the gateway exits non-zero and says so, rather
// than running on without a data plane.
func TestEnvoyDeathStopsTheGateway(t *testing.T) {
	g, _ := startWithFake(t, fakeupstream.Options{})
	pid := g.EnvoyPID
	if pid == 0 {
		t.Fatal("ready line has no envoy_pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("gateway kept running without Envoy")
	}
	if g.ExitErr() == nil {
		t.Fatal("gateway exited 0 after Envoy died")
	}
	if !strings.Contains(g.logs.String(), "envoy exited unexpectedly") {
		t.Fatalf("no clear message:\n%s", g.logs.String())
	}
}

// TestGracefulDrain: SIGTERM during a stream lets the stream finish, then the gateway exits 0.
func TestGracefulDrain(t *testing.T) {
	g, _ := startWithFake(t, fakeupstream.Options{ChunkDelay: 100 * time.Millisecond})
	key := g.newKey("acme")
	resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"a b c d e f g h i j"}]}`)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first chunk")
	}
	if err := g.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(d), &chunk) == nil && len(chunk.Choices) > 0 {
			text.WriteString(chunk.Choices[0].Delta.Content)
		}
	}
	if !done {
		t.Fatalf("stream cut by the drain; got %q", text.String())
	}
	select {
	case <-g.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not exit after the drain")
	}
	if g.ExitErr() != nil {
		t.Fatalf("exit after SIGTERM: %v", g.ExitErr())
	}
	if _, err := http.Get(g.BaseURL + "/models"); err == nil {
		t.Fatal("the listener still accepts connections after shutdown")
	}
}
