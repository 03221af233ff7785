package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tollway/tollway/test/fakeupstream"
)

// adminRaw sends one admin request with exactly the headers given (a "host" entry sets Host)
// and returns the status and the body.
func (g *gateway) adminRaw(method, path, body string, hdr map[string]string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, "http://"+g.Admin+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestAdminRefusesCrossSiteAndRebinding reproduces the attack of a web page on the operator's
// machine: a "simple" cross-site POST (text/plain, no preflight) through a rebound host name
// used to mint a key and credit an account. Each door is tried alone too, reads included.
func TestAdminRefusesCrossSiteAndRebinding(t *testing.T) {
	t.Parallel()
	g, _ := startWithFake(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "0"); err != nil {
		t.Fatal(err)
	}
	own := "http://" + g.Admin
	attack := map[string]string{"content-type": "text/plain", "origin": "http://evil.example", "host": "rebind.evil.example"}
	status, body := g.adminRaw("POST", "/admin/v1/keys", `{"account":"acme"}`, attack)
	if status < 400 || strings.Contains(body, "ale-") {
		t.Fatalf("the cross-site rebinding attack minted a key: %d %s", status, body)
	}
	status, body = g.adminRaw("POST", "/admin/v1/accounts/acme/credit", `{"amount":"1000"}`, attack)
	if status < 400 {
		t.Fatalf("the cross-site rebinding attack credited an account: %d %s", status, body)
	}

	jsonCT := map[string]string{"content-type": "application/json"}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range jsonCT {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		code                     string
	}{
		{"text/plain write", "POST", "/admin/v1/keys", `{"account":"acme"}`, map[string]string{"content-type": "text/plain"}, 415, "unsupported_media_type"},
		{"form write", "POST", "/admin/v1/accounts/acme/credit", `amount=1000`, map[string]string{"content-type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"write without a content type", "POST", "/admin/v1/keys/x/revoke", ``, nil, 415, "unsupported_media_type"},
		{"rebound host", "POST", "/admin/v1/keys", `{"account":"acme"}`, with(map[string]string{"host": "rebind.evil.example"}), 421, "invalid_host"},
		{"rebound host on the right port", "POST", "/admin/v1/keys", `{"account":"acme"}`, with(map[string]string{"host": "rebind.evil.example:" + port(g.Admin)}), 421, "invalid_host"},
		{"read through a rebound host", "GET", "/admin/v1/keys", ``, map[string]string{"host": "rebind.evil.example"}, 421, "invalid_host"},
		{"usage through a rebound host", "GET", "/admin/v1/usage", ``, map[string]string{"host": "rebind.evil.example:" + port(g.Admin)}, 421, "invalid_host"},
		{"foreign origin", "POST", "/admin/v1/keys", `{"account":"acme"}`, with(map[string]string{"origin": "http://evil.example"}), 403, "cross_origin"},
		{"null origin", "POST", "/admin/v1/keys", `{"account":"acme"}`, with(map[string]string{"origin": "null"}), 403, "cross_origin"},
		{"another local port", "POST", "/admin/v1/keys", `{"account":"acme"}`, with(map[string]string{"origin": "http://127.0.0.1:3000"}), 403, "cross_origin"},
		{"cross-site fetch", "POST", "/admin/v1/keys", `{"account":"acme"}`, with(map[string]string{"sec-fetch-site": "cross-site"}), 403, "cross_origin"},
		{"cross-origin read", "GET", "/admin/v1/keys", ``, map[string]string{"origin": "http://evil.example"}, 403, "cross_origin"},
		{"same-site read", "GET", "/admin/v1/accounts", ``, map[string]string{"sec-fetch-site": "same-site"}, 403, "cross_origin"},
	} {
		status, body := g.adminRaw(c.method, c.path, c.body, c.hdr)
		var e apiError
		_ = jsonUnmarshal(body, &e)
		if status != c.status || e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: got %d %s, want %d %s with a message", c.name, status, body, c.status, c.code)
		}
		if strings.Contains(body, "ale-") {
			t.Errorf("%s: a key leaked: %s", c.name, body)
		}
	}

	// Nothing was minted or credited.
	if out, err := g.cli("keys", "list"); err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("keys after the attacks: %q %v (want only the header)", out, err)
	}
	if bal := g.balance("acme"); !bal.IsZero() {
		t.Fatalf("acme's balance after the attacks: %s, want 0", bal)
	}

	// The operator's own calls still work: same origin, localhost names, the CLI.
	for _, hdr := range []map[string]string{
		with(map[string]string{"origin": own}),
		with(map[string]string{"host": "localhost:" + port(g.Admin), "sec-fetch-site": "same-origin"}),
		with(map[string]string{"content-type": "application/json; charset=utf-8"}),
	} {
		if status, body := g.adminRaw("POST", "/admin/v1/accounts/acme/credit", `{"amount":"1"}`, hdr); status != 200 {
			t.Errorf("own request %v: %d %s", hdr, status, body)
		}
	}
	if _, err := g.cli("keys", "create", "--account", "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestAdminToken: with admin.token set, every admin call needs it; the CLI takes it from
// --admin-token, TOLLWAY_ADMIN_TOKEN or the config's own reference, and it never reaches a log.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	const token = "e2e-admin-token-5f0c1d2a9b7e4c3d"
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL())+"admin: {token: \"${E2E_ADMIN_TOKEN}\"}\n",
		"FAKE_PROVIDER_KEY="+providerKey, "E2E_ADMIN_TOKEN="+token)

	cli := func(env []string, args ...string) (string, string, error) {
		cmd := exec.Command(tollwayBin, args...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	// Without the token: refused, and told how to send it. Global flags come first here.
	_, stderr, err := cli([]string{"E2E_ADMIN_TOKEN=", "TOLLWAY_ADMIN_TOKEN="}, "--config", g.CfgPath, "accounts", "list")
	if err == nil || !strings.Contains(stderr, "invalid_admin_token") || !strings.Contains(stderr, "--admin-token") {
		t.Fatalf("CLI without the token: err %v, stderr %q", err, stderr)
	}
	// From --admin-token (before the subcommand), from TOLLWAY_ADMIN_TOKEN, from the config's reference.
	if _, stderr, err := cli(nil, "--admin-token", token, "--config", g.CfgPath, "accounts", "create", "acme", "--credits", "5"); err != nil {
		t.Fatalf("--admin-token: %v %s", err, stderr)
	}
	if _, stderr, err := cli([]string{"TOLLWAY_ADMIN_TOKEN=" + token}, "--admin", "http://"+g.Admin, "accounts", "list"); err != nil {
		t.Fatalf("TOLLWAY_ADMIN_TOKEN: %v %s", err, stderr)
	}
	out, stderr, err := cli([]string{"E2E_ADMIN_TOKEN=" + token}, "keys", "create", "--account", "acme", "--config", g.CfgPath)
	if err != nil || !strings.HasPrefix(out, "ale-") {
		t.Fatalf("config reference: %q %v %s", out, err, stderr)
	}

	for _, auth := range []string{"", "Bearer wrong-token-wrong-token", "Bearer " + token + "x", "Basic " + token, token} {
		hdr := map[string]string{}
		if auth != "" {
			hdr["authorization"] = auth
		}
		status, body := g.adminRaw("GET", "/admin/v1/keys", "", hdr)
		if status != 401 || !strings.Contains(body, "invalid_admin_token") {
			t.Errorf("authorization %q: %d %s", auth, status, body)
		}
	}
	if status, body := g.adminRaw("GET", "/admin/v1/keys", "", map[string]string{"authorization": "Bearer " + token}); status != 200 {
		t.Errorf("right token: %d %s", status, body)
	}
	if strings.Contains(g.logs.String(), token) {
		t.Error("the admin token reached the gateway's output")
	}
}

func port(hostport string) string { return hostport[strings.LastIndex(hostport, ":")+1:] }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestStatusSummary: `tollway status` is one screen: listeners, the running Envoy's version and
// state, the configuration accepted, providers' health, models ready, and today's usage, which
// moves with a request.
func TestStatusSummary(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, "billing: {enabled: true}\n"+catalog(fake.URL(), `pricing: {request: "0.001", prompt: "0.000001", completion: "0.000002"}`), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	g.waitRecords("acme", 1)
	out, err := g.cli("status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"http://" + g.Public + "/v1", "admin http://" + g.Admin, "1.40.0 pid", "LIVE", "accepted (ACK)", "1 of 1 ready", "1 requests"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines > 12 {
		t.Errorf("status takes %d lines, want one screen:\n%s", lines, out)
	}
	raw, err := g.cli("status", "--json")
	var st struct {
		AcceptedVersion uint64 `json:"accepted_version"`
		Envoy           struct {
			PID   int    `json:"pid"`
			State string `json:"state"`
		} `json:"envoy"`
		Today struct {
			Requests int64  `json:"requests"`
			Cost     string `json:"cost"`
		} `json:"today"`
	}
	if err != nil || json.Unmarshal([]byte(raw), &st) != nil || st.AcceptedVersion == 0 || st.Envoy.PID == 0 || st.Envoy.State != "LIVE" || st.Today.Requests != 1 || st.Today.Cost == "0" {
		t.Fatalf("status --json: %v %+v %s", err, st, raw)
	}
}
