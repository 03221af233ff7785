package e2e

import (
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
	"syscall"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// externalEnvoy is an Envoy the test starts itself from `tollway bootstrap`, as an operator
// would: Tollway does not start it.
type externalEnvoy struct {
	name, public string
	cmd          *exec.Cmd
	logs         *harness.SyncBuffer
}

// startExternalEnvoy prints the node's bootstrap with the CLI and starts Envoy with it.
func startExternalEnvoy(t *testing.T, g *gateway, env []string, node, public string) *externalEnvoy {
	t.Helper()
	cmd := exec.Command(tollwayBin, "bootstrap", "--config", g.CfgPath, "--node", node, "--listen", public)
	cmd.Env = append(os.Environ(), env...)
	boot, err := cmd.Output()
	if err != nil {
		t.Fatalf("tollway bootstrap: %v", err)
	}
	path := filepath.Join(t.TempDir(), node+".json")
	if err := os.WriteFile(path, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	e := &externalEnvoy{name: node, public: public, logs: &harness.SyncBuffer{}}
	e.cmd = exec.Command(envoyBin, "-c", path, "--disable-hot-restart", "--log-level", "warning")
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cmd.Process.Kill()
		_, _ = e.cmd.Process.Wait()
		if t.Failed() {
			t.Logf("envoy %s output:\n%s", node, e.logs.String())
		}
	})
	return e
}

// chatVia sends one chat request to an Envoy's public listener: status and body.
func chatVia(t *testing.T, public, key, model string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+public+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// nodes reads the control plane's nodes from GET /admin/v1/status.
func (g *gateway) nodes() map[string]map[string]any {
	g.t.Helper()
	_, st := g.adminJSON("GET", "/admin/v1/status", nil)
	out := map[string]map[string]any{}
	list, _ := st["nodes"].([]any)
	for _, n := range list {
		m := n.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

// TestExternalEnvoys: one Tollway in external mode serving two Envoys it did not start, each
// from `tollway bootstrap` with its own node id and public listener on one host: chat through
// both; a route change reaches both before the admin call returns; each node's ACK is reported;
// a node whose listener cannot bind NACKs without changing the other's configuration; one Envoy
// killed, the other serves on; Tollway killed, both refuse cleanly in the spec's error shape and
// serve again once it is back, without a restart of their own.
func TestExternalEnvoys(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	dir := t.TempDir()
	env := []string{"FAKE_PROVIDER_KEY=" + providerKey, "TOLLWAY_LISTEN_XDS=" + freeAddr(t), "TOLLWAY_LISTEN_EXTPROC=" + freeAddr(t)}
	body := "billing: {enabled: true}\n" + catalog(fake.URL(), `pricing: {request: "0.001"}`)
	start := func() *gateway {
		return startWith(t, harness.Options{Dir: dir, Body: body, Env: env, Args: []string{"--envoy", "external"}})
	}
	g := start()
	if !strings.Contains(g.logs.String(), "tollway ready envoy=external") {
		t.Fatalf("ready line:\n%s", g.logs.String())
	}
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	a := startExternalEnvoy(t, g, env, "edge-a", freeAddr(t))
	// edge-b's public port is taken: its listener cannot bind, so it NACKs the listener.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := startExternalEnvoy(t, g, env, "edge-b", busy.Addr().String())
	waitFor(t, "edge-a to serve", 20*time.Second, func() bool { code, _ := chatVia(t, a.public, key, "gpt-4o-mini"); return code == 200 })
	waitFor(t, "edge-b's NACK", 20*time.Second, func() bool {
		n := g.nodes()["edge-b"]
		return n != nil && n["last_rejection"] != nil
	})
	nodes := g.nodes()
	if ea := nodes["edge-a"]; ea["connected"] != true || ea["last_rejection"] != nil || ea["accepted_version"] != ea["version"] || ea["listen"] != a.public {
		t.Fatalf("edge-a after edge-b's NACK: %v", ea)
	}
	// (A node with no accepted configuration to fall back to is sent away after its NACK and
	// comes back after Envoy's backoff, rather than be answered the same snapshot in a loop.)
	if eb := nodes["edge-b"]; eb["accepted_version"] != float64(0) || !strings.Contains(fmt.Sprint(eb["last_rejection"]), "bind") {
		t.Fatalf("edge-b: %v", eb)
	}
	// The port is freed; the next push (a new route) reaches both, and both serve it as soon
	// as the admin call returns.
	busy.Close()
	if code, out := g.adminJSON("POST", "/admin/v1/routes", map[string]any{"name": "fresh", "rule": "priority_fallback", "models": []string{"gpt-4o-mini"}}); code/100 != 2 {
		t.Fatalf("create route: %d %v", code, out)
	}
	pushed := time.Now()
	for _, e := range []*externalEnvoy{a, b} {
		// edge-b may be in Envoy's reconnect backoff after its NACKs (up to a few seconds).
		waitFor(t, e.name+" to serve the new route", 20*time.Second, func() bool {
			code, _ := chatVia(t, e.public, key, "route:fresh")
			return code == 200
		})
	}
	t.Logf("the new route served by both nodes %s after the admin call returned", time.Since(pushed).Round(time.Millisecond))
	out, err := g.cli("status")
	if err != nil || !strings.Contains(out, "edge-a connected ("+a.public+") version") || !strings.Contains(out, "edge-b connected") || !strings.Contains(out, "started elsewhere") {
		t.Fatalf("status: %v\n%s", err, out)
	}

	// One Envoy killed: the other serves on.
	_ = a.cmd.Process.Kill()
	_, _ = a.cmd.Process.Wait()
	if code, body := chatVia(t, b.public, key, "gpt-4o-mini"); code != 200 {
		t.Fatalf("edge-b after edge-a died: %d %s", code, body)
	}
	waitFor(t, "edge-a to show disconnected", 10*time.Second, func() bool { return g.nodes()["edge-a"]["connected"] == false })

	// edge-a comes back (a new process, the same node id) and is served the current config.
	a = startExternalEnvoy(t, g, env, "edge-a", freeAddr(t))
	waitFor(t, "edge-a to serve again", 20*time.Second, func() bool { code, _ := chatVia(t, a.public, key, "route:fresh"); return code == 200 })

	// Tollway gone: both keep their configuration and refuse cleanly (fail closed).
	g.Gateway.Kill()
	for _, e := range []*externalEnvoy{a, b} {
		code, refused := chatVia(t, e.public, key, "gpt-4o-mini")
		var er struct {
			Error struct{ Code, Message string }
		}
		if code < 500 || json.Unmarshal([]byte(refused), &er) != nil || er.Error.Code == "" {
			t.Fatalf("%s with Tollway down: %d %s", e.name, code, refused)
		}
		t.Logf("%s with Tollway down: %d %s", e.name, code, er.Error.Code)
	}
	// Back: both reconnect by themselves and serve again, without a restart of their own.
	start()
	for _, e := range []*externalEnvoy{a, b} {
		waitFor(t, e.name+" to serve again", 30*time.Second, func() bool { code, _ := chatVia(t, e.public, key, "gpt-4o-mini"); return code == 200 })
	}
}
