package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// fakeAdmin records the calls the CLI makes and answers like the admin API; with token set it
// answers 401 invalid_admin_token to calls without it.
type fakeAdmin struct {
	*httptest.Server
	token string
	mu    sync.Mutex
	calls []string // "METHOD /path authorization"
}

func newFakeAdmin(t *testing.T, token string) *fakeAdmin {
	f := &fakeAdmin{token: token}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization")))
		f.mu.Unlock()
		w.Header().Set("content-type", "application/json")
		if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
			w.WriteHeader(401)
			fmt.Fprint(w, `{"error":{"message":"this gateway requires its admin token","code":"invalid_admin_token"}}`)
			return
		}
		switch {
		case r.Method == "POST" && r.URL.Path == "/admin/v1/keys":
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"key_1","account":"acme","key":"ale-secret"}`)
		case r.Method == "GET" && r.URL.Path != "/admin/v1/status":
			fmt.Fprint(w, `{"data":[]}`)
		default:
			fmt.Fprint(w, `{"version":1}`)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAdmin) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeAdmin) addr() string { return strings.TrimPrefix(f.URL, "http://") }

func runCLI(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := Run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestCLIGlobalFlagsAnywhere: global flags work before the command (they were refused) as well
// as after it and between its words.
func TestCLIGlobalFlagsAnywhere(t *testing.T) {
	configtest.ClearEnv(t)
	f := newFakeAdmin(t, "")
	cfg := configtest.Write(t, "listen: {public: 127.0.0.1:18080, admin: "+f.addr()+"}\n")
	for _, args := range [][]string{
		{"--admin", f.URL, "keys", "list"},
		{"-admin=" + f.URL, "keys", "list"},
		{"keys", "list", "--admin", f.URL},
		{"keys", "--admin", f.URL, "list"},
		{"--config", cfg, "keys", "list"},
		{"keys", "list", "--config", cfg},
		{"--admin", "http://127.0.0.1:1", "keys", "list", "--admin", f.URL}, // the last one counts
	} {
		before := len(f.Calls())
		if out, stderr, err := runCLI(args...); err != nil {
			t.Errorf("tollway %s: %v %s %s", strings.Join(args, " "), err, out, stderr)
			continue
		}
		if calls := f.Calls(); len(calls) != before+1 || calls[before] != "GET /admin/v1/keys" {
			t.Errorf("tollway %s: calls %v", strings.Join(args, " "), calls[before:])
		}
	}
	if _, _, err := runCLI("--admin", f.URL, "--nope", "keys", "list"); !errors.Is(err, ErrUsage) {
		t.Errorf("an unknown global flag: %v", err)
	}
}

// TestCLIChecksAmountsBeforeSending: --monthly-limit abc printed a JSON schema; now the CLI says
// which flag is wrong, with an example, and sends nothing.
func TestCLIChecksAmountsBeforeSending(t *testing.T) {
	configtest.ClearEnv(t)
	f := newFakeAdmin(t, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--account", "acme", "--monthly-limit", "abc"}, `--monthly-limit: "abc" is not a decimal amount in USD; write it like --monthly-limit 5 or --monthly-limit 12.50`},
		{[]string{"keys", "create", "--account", "acme", "--monthly-limit", "1e3"}, "--monthly-limit"},
		{[]string{"keys", "create", "--account", "acme", "--monthly-limit", ""}, ""}, // empty: no limit
		{[]string{"accounts", "create", "acme", "--credits", "ten"}, `--credits: "ten" is not a decimal amount`},
		{[]string{"accounts", "credit", "acme", "10,50"}, `"10,50" is not a decimal amount`},
		{[]string{"keys", "create"}, "--account"},
		{[]string{"keys", "list", "--monthly-limit", "5"}, "keys list does not take --monthly-limit"},
		{[]string{"routes", "create", "bot", "--credits", "5"}, "flag provided but not defined: -credits"},
		{[]string{"keys", "revoke"}, "keys takes create, list, set-limit KEY_ID [AMOUNT|none] [--rpm N|none] [--tpm N|none], set-models KEY_ID MODEL...|all, revoke ID or rotate ID"},
		{[]string{"usage", "--since", "last week"}, `--since "last week" is not a day`},
		{[]string{"status", "now"}, "status takes no arguments"},
	} {
		before := len(f.Calls())
		_, _, err := runCLI(append(c.args, "--admin", f.URL)...)
		if c.want == "" {
			if err != nil {
				t.Errorf("tollway %s: %v", strings.Join(c.args, " "), err)
			}
			continue
		}
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tollway %s: %v, want a usage error saying %q", strings.Join(c.args, " "), err, c.want)
		}
		if calls := f.Calls(); len(calls) != before {
			t.Errorf("tollway %s sent %v", strings.Join(c.args, " "), calls[before:])
		}
	}
}

// TestCLIAdminToken: --admin-token, then TOLLWAY_ADMIN_TOKEN, then the config's admin.token.
func TestCLIAdminToken(t *testing.T) {
	configtest.ClearEnv(t)
	const tok = "cli-admin-token-0123456789abcdef0123"
	f := newFakeAdmin(t, tok)
	listen := "listen: {public: 127.0.0.1:18080, admin: " + f.addr() + "}\n"
	refCfg := configtest.Write(t, listen+`admin: {token: "${CLI_TEST_ADMIN_TOKEN}"}`+"\n")
	literalCfg := configtest.Write(t, listen+"admin: {token: "+tok+"}\n")

	ok := func(name string, args ...string) {
		t.Helper()
		if _, stderr, err := runCLI(args...); err != nil {
			t.Errorf("%s: %v %s", name, err, stderr)
		}
	}
	ok("flag", "--admin-token", tok, "--admin", f.URL, "status")
	t.Setenv("TOLLWAY_ADMIN_TOKEN", "wrong-token-from-the-environment")
	ok("flag over environment", "status", "--admin", f.URL, "--admin-token", tok)
	t.Setenv("TOLLWAY_ADMIN_TOKEN", tok)
	ok("environment", "status", "--admin", f.URL)
	configtest.Unsetenv(t, "TOLLWAY_ADMIN_TOKEN")
	t.Setenv("CLI_TEST_ADMIN_TOKEN", tok)
	ok("config reference", "--config", refCfg, "status")
	ok("config literal", "--config", literalCfg, "status")
	configtest.Unsetenv(t, "CLI_TEST_ADMIN_TOKEN")
	_, _, err := runCLI("--config", refCfg, "status")
	if err == nil || !strings.Contains(err.Error(), "invalid_admin_token") || !strings.Contains(err.Error(), "CLI_TEST_ADMIN_TOKEN") {
		t.Errorf("an unresolved config reference: %v, want the 401 and the variable named", err)
	}
	for _, c := range f.Calls() {
		if strings.Contains(c, "wrong-token") {
			t.Errorf("the environment's token was sent although --admin-token was given: %s", c)
		}
	}
}

func TestHelpIsComplete(t *testing.T) {
	out, _, err := runCLI("help")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range commands {
		if !strings.Contains(out, "tollway "+cmd.name) {
			t.Errorf("tollway help does not list %s", cmd.name)
		}
		for _, line := range strings.Split(strings.TrimRight(cmd.help, "\n"), "\n") {
			if l := strings.TrimSpace(line); !strings.HasPrefix(l, "tollway "+cmd.name) && strings.HasPrefix(l, "tollway") {
				t.Errorf("%s's help has a line of another command: %q", cmd.name, line)
			}
		}
	}
	for _, flag := range []string{"--config FILE", "--admin URL", "--admin-token TOKEN", "TOLLWAY_ADMIN_TOKEN"} {
		if !strings.Contains(out, flag) {
			t.Errorf("tollway help does not explain %s", flag)
		}
	}
	for _, args := range [][]string{{}, {"-h"}, {"--help"}} {
		if o, _, err := runCLI(args...); err != nil || o != out {
			t.Errorf("tollway %v: %v, want the help", args, err)
		}
	}
	keys, _, err := runCLI("help", "keys")
	if err != nil || !strings.Contains(keys, "tollway keys rotate ID") || strings.Contains(keys, "tollway accounts") {
		t.Errorf("tollway help keys: %v\n%s", err, keys)
	}
	if o, _, err := runCLI("keys", "--help"); err != nil || o != keys {
		t.Errorf("tollway keys --help: %v\n%s", err, o)
	}
	if _, _, err := runCLI("help", "nope"); !errors.Is(err, ErrUsage) {
		t.Errorf("tollway help nope: %v", err)
	}
}

// TestCLIBootstrap: tollway bootstrap prints a bootstrap for the named node that dials the
// config's listen.xds and listen.extproc (a wildcard host as loopback, or --control), carries
// --listen in the node's metadata, and refuses bad flags by name.
func TestCLIBootstrap(t *testing.T) {
	configtest.ClearEnv(t)
	cfg := configtest.Write(t, "listen: {public: 127.0.0.1:18080, admin: 127.0.0.1:19090, xds: 0.0.0.0:28000, extproc: 127.0.0.1:28001}\n")
	out, _, err := runCLI("bootstrap", "--config", cfg, "--node", "edge-1", "--listen", "127.0.0.1:8081")
	var b struct {
		Node struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"node"`
	}
	if err != nil || json.Unmarshal([]byte(out), &b) != nil || b.Node.ID != "edge-1" || b.Node.Metadata["tollway_listen"] != "127.0.0.1:8081" {
		t.Fatalf("bootstrap: %v %+v\n%s", err, b, out)
	}
	// protojson varies its spacing on purpose: compare without it.
	flat := func(s string) string { return strings.Join(strings.Fields(s), "") }
	for _, want := range []string{`"address":"127.0.0.1",`, `"portValue":28000`, `"portValue":28001`, `"type":"STATIC"`} {
		if !strings.Contains(flat(out), want) {
			t.Errorf("bootstrap lacks %s", want)
		}
	}
	out, _, err = runCLI("bootstrap", "--config", cfg, "--node", "edge-2", "--control", "tollway.internal")
	if err != nil || !strings.Contains(flat(out), `"address":"tollway.internal"`) || !strings.Contains(flat(out), `"type":"STRICT_DNS"`) || strings.Contains(out, "tollway_listen") {
		t.Fatalf("--control: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "a b"}, "--node"},
		{[]string{}, "--node"},
		{[]string{"--node", "n", "--listen", "8080"}, "--listen"},
		{[]string{"--node", "n", "--envoy-admin", "x"}, "--envoy-admin"},
	} {
		_, _, err := runCLI(append([]string{"bootstrap", "--config", cfg}, c.args...)...)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error naming %s", c.args, err, c.want)
		}
	}
}
