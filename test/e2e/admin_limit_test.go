package e2e

import (
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// fromSource is an HTTP client whose connections leave from the loopback address src, so one
// test can be several sources of the same admin listener.
func fromSource(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

// adminFrom sends one admin request from client with the Authorization header auth (none when
// empty) and body (JSON when not empty).
func (g *gateway) adminFrom(client *http.Client, method, path, auth, body string) *http.Response {
	g.t.Helper()
	req, _ := http.NewRequest(method, "http://"+g.Admin+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestAdminTokenGuessingIsLimited: after 10 wrong admin tokens (bearer or console sign-in) from
// one source address within a minute, that address gets 429 with Retry-After, even with the
// right token, while another address is unaffected; each failure is a WARN line naming the
// source and never the token tried.
func TestAdminTokenGuessingIsLimited(t *testing.T) {
	t.Parallel()
	const token = "guess-limit-admin-token-3f9a1c7e5b2d4f60"
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL())+"admin: {token: \"${E2E_ADMIN_TOKEN}\"}\n",
		"FAKE_PROVIDER_KEY="+providerKey, "E2E_ADMIN_TOKEN="+token)
	attacker, operator, signer := fromSource("127.0.0.2"), fromSource("127.0.0.1"), fromSource("127.0.0.3")

	for i := 1; i <= 10; i++ {
		if resp := g.adminFrom(attacker, "GET", "/admin/v1/keys", "Bearer wrong-guess-"+strconv.Itoa(i), ""); resp.StatusCode != 401 {
			t.Fatalf("wrong token %d: %d, want 401", i, resp.StatusCode)
		}
	}
	resp := g.adminFrom(attacker, "GET", "/admin/v1/keys", "Bearer wrong-guess-11", "")
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || retry < 1 || retry > 60 {
		t.Fatalf("11th wrong token: %d Retry-After %q, want 429 with 1-60 s", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := g.adminFrom(attacker, "GET", "/admin/v1/keys", "Bearer "+token, ""); resp.StatusCode != 429 {
		t.Fatalf("the right token from the locked address: %d, want 429 (else guessing goes on)", resp.StatusCode)
	}
	// Another address: the right token passes, a wrong one is a plain 401.
	if resp := g.adminFrom(operator, "GET", "/admin/v1/keys", "Bearer "+token, ""); resp.StatusCode != 200 {
		t.Fatalf("the operator's right token from another address: %d", resp.StatusCode)
	}
	if resp := g.adminFrom(operator, "GET", "/admin/v1/keys", "Bearer still-wrong", ""); resp.StatusCode != 401 {
		t.Fatalf("a wrong token from another address: %d, want 401", resp.StatusCode)
	}
	// Console sign-ins count the same way.
	for i := 1; i <= 10; i++ {
		if resp := g.adminFrom(signer, "POST", "/console/api/session", "", `{"token":"wrong-sign-in-`+strconv.Itoa(i)+`"}`); resp.StatusCode != 401 {
			t.Fatalf("wrong sign-in %d: %d, want 401", i, resp.StatusCode)
		}
	}
	if resp := g.adminFrom(signer, "POST", "/console/api/session", "", `{"token":"`+token+`"}`); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("11th sign-in: %d Retry-After %q, want 429", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	logs := g.logs.String()
	var warns int
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "admin") && strings.Contains(line, "source=127.0.0.2") {
			warns++
		}
	}
	if warns < 10 {
		t.Errorf("%d WARN lines name source 127.0.0.2; want one per failure (10):\n%s", warns, logs)
	}
	if strings.Contains(logs, "wrong-guess") || strings.Contains(logs, "wrong-sign-in") || strings.Contains(logs, token) {
		t.Errorf("a token reached the log:\n%s", logs)
	}
}

// TestShortAdminTokenRefusedAtStart: an admin token under 32 characters stops the start with a
// message saying how to make one.
func TestShortAdminTokenRefusedAtStart(t *testing.T) {
	t.Parallel()
	cfg := "listen: {public: " + freeAddr(t) + ", admin: " + freeAddr(t) + "}\nstore: {path: data/t.db}\n" + catalog("http://127.0.0.1:9/v1")
	for _, env := range [][]string{
		{"TOLLWAY_ADMIN_TOKEN=aaaaaaaaaaaaaaaa"},
		{"TOLLWAY_ADMIN_TOKEN=0123456789abcdef0123456789abcde"}, // 31
	} {
		out, err := runTollway(t, cfg, append(env, "ENVOY_BIN="+envoyBin)...)
		var exit *exec.ExitError
		if !asExit(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("%v: want a non-zero exit, got %v\n%s", env, err, out)
		}
		if !strings.Contains(out, "32") || !strings.Contains(out, "openssl rand -hex 32") || strings.Contains(out, strings.TrimPrefix(env[0], "TOLLWAY_ADMIN_TOKEN=")) {
			t.Fatalf("%v: the message should ask for 32 characters, say how to make one and not repeat the token:\n%s", env, out)
		}
	}
}
