package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
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

	"github.com/shopspring/decimal"
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
	t.Parallel()
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

// TestStartupFailuresAreClear: a taken port and a bad config each stop the gateway with a
// non-zero exit and a message that names the problem (a missing Envoy: TestNoEnvoyGivesInstallCommand).
func TestStartupFailuresAreClear(t *testing.T) {
	t.Parallel()
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

// envoyState reads the running Envoy's pid and restart count from `tollway status --json`.
func (g *gateway) envoyState() (pid, restarts int) {
	g.t.Helper()
	_, st := g.adminJSON("GET", "/admin/v1/status", nil)
	e, _ := st["envoy"].(map[string]any)
	p, _ := e["pid"].(float64)
	r, _ := e["restarts"].(float64)
	return int(p), int(r)
}

// available reads an account's available credits (balance less open holds).
func (g *gateway) available(account string) (balance, available decimal.Decimal) {
	g.t.Helper()
	_, out := g.adminJSON("GET", "/admin/v1/accounts", nil)
	for _, a := range out["data"].([]any) {
		if m := a.(map[string]any); m["id"] == account {
			return decimal.RequireFromString(m["balance"].(string)), decimal.RequireFromString(m["available"].(string))
		}
	}
	g.t.Fatalf("no account %s", account)
	return
}

// TestEnvoyRestartsAfterKill: kill -9 of the child Envoy under load: the supervisor restarts
// it, the gateway serves again within seconds, requests in between fail at the connection
// (never with a wrong answer), status counts the restart, and every hold of a cut request is
// settled or released (available credits equal the balance, and balance plus records equal
// the credits given).
func TestEnvoyRestartsAfterKill(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 20 * time.Millisecond})
	g := startGateway(t, "billing: {enabled: true}\n"+catalog(fake.URL(), `pricing: {request: "0.001", prompt: "0.000001", completion: "0.000002"}`), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	oldPID, _ := g.envoyState()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	transport := 0
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", g.BaseURL+"/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"a b c d e f"}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err == nil {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					// A 200 that ends cleanly is a whole answer; one cut by the kill is a
					// transport error, not a different answer.
					if rerr == nil && resp.StatusCode == 200 && !strings.Contains(string(body), "[DONE]") {
						err = errors.New("a 200 stream without [DONE]")
					} else if rerr != nil {
						err = rerr
					}
					if err == nil {
						mu.Lock()
						statuses[resp.StatusCode]++
						mu.Unlock()
						continue
					}
				}
				mu.Lock()
				transport++
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second)
	killed := time.Now()
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var back time.Duration
	waitFor(t, "the gateway to serve again", 20*time.Second, func() bool {
		resp, err := client.Post(g.BaseURL+"/models", "", nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		back = time.Since(killed)
		return resp.StatusCode < 500
	})
	t.Logf("served again %s after kill -9", back.Round(time.Millisecond))
	time.Sleep(time.Second) // load on the new Envoy
	close(stop)
	wg.Wait()
	mu.Lock()
	t.Logf("answers %v, transport errors %d", statuses, transport)
	if len(statuses) != 1 || statuses[200] == 0 {
		t.Errorf("answers other than whole 200s: %v", statuses)
	}
	mu.Unlock()
	if pid, restarts := g.envoyState(); restarts != 1 || pid == oldPID || pid == 0 {
		t.Fatalf("after the kill: pid %d (was %d), restarts %d", pid, oldPID, restarts)
	}
	// No hold leaks: once every stream has ended, nothing is held.
	waitFor(t, "every hold to be settled or released", 15*time.Second, func() bool {
		bal, avail := g.available("acme")
		return bal.Equal(avail)
	})
	recs := g.records("account=acme")
	spent := decimal.Zero
	for _, r := range recs {
		spent = spent.Add(r.Cost)
	}
	if bal, _ := g.available("acme"); !bal.Add(spent).Equal(decimal.RequireFromString("10")) {
		t.Fatalf("balance %s + records %s (%d) != 10", bal, spent, len(recs))
	}
	out, err := g.cli("status")
	if err != nil || !strings.Contains(out, "restarted 1 times") {
		t.Fatalf("status: %v\n%s", err, out)
	}
}

// TestEnvoyThatKeepsDyingStopsTheGateway: an Envoy killed again right after every restart is
// given up on: the gateway exits non-zero and says why, rather than flap for ever.
func TestEnvoyThatKeepsDyingStopsTheGateway(t *testing.T) {
	t.Parallel()
	g, _ := startWithFake(t, fakeupstream.Options{})
	deadline := time.Now().Add(60 * time.Second)
	last := 0
	for time.Now().Before(deadline) {
		select {
		case <-g.Exited():
			if g.ExitErr() == nil {
				t.Fatal("gateway exited 0 after giving up on Envoy")
			}
			if !strings.Contains(g.logs.String(), "could not be kept running") || !strings.Contains(g.logs.String(), "ENVOY EXITED") {
				t.Fatalf("no clear message:\n%s", g.logs.String())
			}
			return
		default:
		}
		if pid, _ := g.envoyStateQuiet(); pid != 0 && pid != last {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			last = pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the gateway kept restarting an Envoy that kept dying")
}

// envoyStateQuiet is envoyState for a gateway that may be gone: 0 when it does not answer.
func (g *gateway) envoyStateQuiet() (pid, restarts int) {
	resp, err := http.Get("http://" + g.Admin + "/admin/v1/status")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	var st struct {
		Envoy struct {
			PID      int    `json:"pid"`
			State    string `json:"state"`
			Restarts int    `json:"restarts"`
		} `json:"envoy"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil || st.Envoy.State == "exited" {
		return 0, 0
	}
	return st.Envoy.PID, st.Envoy.Restarts
}

// TestGracefulDrain: SIGTERM during a stream lets the stream finish, then the gateway exits 0.
func TestGracefulDrain(t *testing.T) {
	t.Parallel()
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
