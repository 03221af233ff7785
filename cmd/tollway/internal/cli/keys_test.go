package cli

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// keysAdmin answers the key calls of the CLI like the admin API and records each call with its
// body ("PATCH /admin/v1/keys/key_1/limits {...}").
type keysAdmin struct {
	*httptest.Server
	mu    sync.Mutex
	calls []string
}

const keysListAnswer = `{"month":"2026-11","data":[` +
	`{"id":"key_1","prefix":"ale-AbCdEf...","account":"acme","name":"ci","monthly_limit":"5","spent_this_month":"0.0102","models":["gpt-4o-mini","route:bot"],"rate_limits":{"requests_per_minute":60},"created_at":"2026-11-02T10:00:00Z"},` +
	`{"id":"key_2","prefix":"ale-GhIjKl...","account":"beta","spent_this_month":"0","created_at":"2026-11-03T10:00:00Z","revoked_at":"2026-11-04T10:00:00Z"}]}`

func newKeysAdmin(t *testing.T) *keysAdmin {
	f := &keysAdmin{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
		f.mu.Unlock()
		w.Header().Set("content-type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/admin/v1/keys":
			fmt.Fprint(w, keysListAnswer)
		case r.Method == "PATCH" && strings.HasSuffix(r.URL.Path, "/limits"):
			fmt.Fprint(w, `{"id":"key_1","account":"acme","monthly_limit":"5","spent_this_month":"0.0102","models":["gpt-4o-mini"],"rate_limits":{"requests_per_minute":60,"tokens_per_minute":1000}}`)
		case r.Method == "POST" && r.URL.Path == "/admin/v1/keys":
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"key_3","account":"acme","key":"ale-secret"}`)
		default:
			w.WriteHeader(404)
			fmt.Fprint(w, `{"error":{"message":"no such path","code":"not_found"}}`)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *keysAdmin) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// TestCLIKeysListShowsLimits: keys list shows each key's monthly limit, spend this month and
// allowed models (none: "none" and "all"); --json prints the admin API's answer.
func TestCLIKeysListShowsLimits(t *testing.T) {
	configtest.ClearEnv(t)
	f := newKeysAdmin(t)
	out, _, err := runCLI("keys", "list", "--admin", f.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := [][]string{
		{"ID", "PREFIX", "ACCOUNT", "NAME", "LIMIT", "SPENT", "MODELS", "RPM/TPM", "CREATED", "STATUS"},
		{"key_1", "ale-AbCdEf...", "acme", "ci", "5", "0.0102", "gpt-4o-mini,route:bot", "60/default", "2026-11-02T10:00:00Z", "active"},
		{"key_2", "ale-GhIjKl...", "beta", "", "none", "0", "all", "default/default", "2026-11-03T10:00:00Z", "revoked", "2026-11-04T10:00:00Z"},
	}
	if len(lines) != len(want) {
		t.Fatalf("keys list:\n%s", out)
	}
	for i, w := range want {
		got := strings.Fields(lines[i])
		if w[3] == "" { // an empty name leaves a gap, not a field
			w = append(w[:3:3], w[4:]...)
		}
		if strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q, want %q", i, got, w)
		}
	}
	// Columns line up: SPENT starts at the same offset on every line.
	col := strings.Index(lines[0], "SPENT")
	if col < 0 || strings.Index(lines[1], "0.0102") != col || len(lines[2]) < col+2 || lines[2][col:col+2] != "0 " {
		t.Errorf("columns do not line up:\n%s", out)
	}
	out, _, err = runCLI("keys", "list", "--json", "--admin", f.URL)
	if err != nil || strings.TrimSpace(out) != keysListAnswer {
		t.Fatalf("keys list --json: %v\n%s", err, out)
	}
}

// TestCLIKeysSetLimitAndModels: set-limit and set-models each send only their own setting
// (PATCH), "none" and "all" remove it, and a bad amount, model or word count is a usage error
// that sends nothing.
func TestCLIKeysSetLimitAndModels(t *testing.T) {
	configtest.ClearEnv(t)
	f := newKeysAdmin(t)
	for _, c := range []struct {
		args     []string
		call     string
		printed  string
		usageErr string
	}{
		{args: []string{"set-limit", "key_1", "5"}, call: `PATCH /admin/v1/keys/key_1/limits {"monthly_limit":"5"}`, printed: "key key_1: monthly limit 5 USD, spent 0.0102 this month"},
		{args: []string{"set-limit", "key_1", "12.50"}, call: `PATCH /admin/v1/keys/key_1/limits {"monthly_limit":"12.50"}`},
		{args: []string{"set-limit", "key_1", "0"}, call: `PATCH /admin/v1/keys/key_1/limits {"monthly_limit":"0"}`},
		{args: []string{"set-limit", "key_1", "none"}, call: `PATCH /admin/v1/keys/key_1/limits {"monthly_limit":null}`},
		{args: []string{"set-models", "key_1", "gpt-4o-mini", "route:bot"}, call: `PATCH /admin/v1/keys/key_1/limits {"models":["gpt-4o-mini","route:bot"]}`, printed: "key key_1: models gpt-4o-mini"},
		{args: []string{"set-models", "key_1", "gpt-4o-mini,route:bot"}, call: `PATCH /admin/v1/keys/key_1/limits {"models":["gpt-4o-mini","route:bot"]}`},
		{args: []string{"set-models", "key_1", "all"}, call: `PATCH /admin/v1/keys/key_1/limits {"models":[]}`},
		{args: []string{"set-limit", "key_1", "abc"}, usageErr: `"abc" is not a decimal amount in USD; write it like 5 or 12.50, or none for no limit`},
		{args: []string{"set-limit", "key_1", "-1"}, usageErr: "negative"},
		{args: []string{"set-limit", "key_1", "1e3"}, usageErr: "not a decimal amount"},
		{args: []string{"set-limit", "key_1"}, usageErr: "keys set-limit KEY_ID AMOUNT|none"},
		{args: []string{"set-limit", "key_1", "5", "6"}, usageErr: "keys set-limit KEY_ID AMOUNT|none"},
		{args: []string{"set-models", "key_1"}, usageErr: "keys set-models KEY_ID MODEL...|all"},
		{args: []string{"set-models", "key_1", "all", "gpt-4o-mini"}, usageErr: "all alone"},
		{args: []string{"set-models", "key_1", "bad model"}, usageErr: `"bad model"`},
		{args: []string{"set-models", "key_1", "gpt-4o-mini,"}, usageErr: "empty model"},
		{args: []string{"set-limit", "key_1", "5", "--models", "x"}, usageErr: "keys set-limit does not take --models"},
		{args: []string{"set-limit", "key_1", "--rpm", "60"}, call: `PATCH /admin/v1/keys/key_1/limits {"rate_limits":{"requests_per_minute":60}}`, printed: "rates 60/1000 per minute"},
		{args: []string{"set-limit", "key_1", "--tpm", "none", "--rpm", "2"}, call: `PATCH /admin/v1/keys/key_1/limits {"rate_limits":{"requests_per_minute":2,"tokens_per_minute":null}}`},
		{args: []string{"set-limit", "key_1", "5", "--tpm", "100000"}, call: `PATCH /admin/v1/keys/key_1/limits {"monthly_limit":"5","rate_limits":{"tokens_per_minute":100000}}`, printed: "monthly limit 5 USD"},
		{args: []string{"set-limit", "key_1", "--rpm", "0"}, usageErr: `--rpm "0": write a whole number from 1`},
		{args: []string{"set-limit", "key_1", "--tpm", "1.5"}, usageErr: `--tpm "1.5": write a whole number from 1`},
		{args: []string{"create", "--account", "acme", "--rpm", "60", "--tpm", "100000"}, call: `POST /admin/v1/keys {"account":"acme","name":"","rate_limits":{"requests_per_minute":60,"tokens_per_minute":100000}}`, printed: "ale-secret"},
		{args: []string{"create", "--account", "acme", "--rpm", "-1"}, usageErr: `--rpm "-1"`},
		{args: []string{"list", "--rpm", "5"}, usageErr: "keys list does not take --rpm"},
	} {
		before := len(f.Calls())
		out, _, err := runCLI(append(append([]string{"keys"}, c.args...), "--admin", f.URL)...)
		calls := f.Calls()[before:]
		if c.usageErr != "" {
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.usageErr) {
				t.Errorf("keys %s: %v, want a usage error saying %q", strings.Join(c.args, " "), err, c.usageErr)
			}
			if len(calls) != 0 {
				t.Errorf("keys %s sent %v", strings.Join(c.args, " "), calls)
			}
			continue
		}
		if err != nil || len(calls) != 1 || calls[0] != c.call {
			t.Errorf("keys %s: %v, calls %q; want %q", strings.Join(c.args, " "), err, calls, c.call)
		}
		if !strings.Contains(out, c.printed) {
			t.Errorf("keys %s printed %q, want %q", strings.Join(c.args, " "), out, c.printed)
		}
	}
}
