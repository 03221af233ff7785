package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/gateway"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

const testAdminAddr = "127.0.0.1:19090"

// testAdmin is the admin API of an in-process gateway: a real store, control plane and ext_proc
// runtime; no Envoy is connected, so changes apply without waiting for an ACK.
type testAdmin struct {
	gw     *gateway.Gateway
	store  store.Store
	ledger *billing.Ledger
	ext    *extproc.Server
	h      http.Handler
}

func newTestAdmin(tb testing.TB, token string) *testAdmin {
	tb.Helper()
	st, err := bbolt.Open(filepath.Join(tb.TempDir(), "t.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	ledger := billing.NewLedger(map[string]decimal.Decimal{}, map[string]decimal.Decimal{}, time.Now().UTC().Format("2006-01")) // the store is empty
	ctrl, ext := xds.New(log), extproc.NewServer(log, extproc.Compile(&ir.Gateway{}, nil), nil)
	g := gateway.New(gateway.Options{Log: log, Store: st, XDS: ctrl, Ext: ext})
	tb.Cleanup(g.Close)
	cfg := &config.Config{}
	cfg.Listen.Public, cfg.Listen.Admin = "127.0.0.1:18080", testAdminAddr
	cfg.Providers = []config.ProviderConfig{{Name: "local", Type: "openai", BaseURL: "http://127.0.0.1:11434/v1"}}
	cfg.Models = []adminapi.Model{{ID: "gpt-4o-mini", Providers: []store.ModelProvider{{Provider: "local", Model: "llama3.2"}},
		Pricing: map[string]any{"prompt": "0.000001", "completion": "0.000002"}}}
	if err := g.ApplyConfig(context.Background(), cfg); err != nil {
		tb.Fatal(err)
	}
	if _, err := st.CreateAccount("acme", decimal.RequireFromString("10")); err != nil {
		tb.Fatal(err)
	}
	ledger.SetAccount("acme", decimal.RequireFromString("10"))
	h := Handler(Options{Listen: testAdminAddr, Token: token, Log: log, Store: st, Apply: g, Runtime: g, XDS: ctrl, Ext: ext, Ledger: ledger,
		Reload: func() error { return nil }})
	return &testAdmin{gw: g, store: st, ledger: ledger, ext: ext, h: h}
}

// do sends one request as the CLI would (own Host, JSON) unless hdr says otherwise; a "host"
// entry sets Host, an empty value removes a header.
func (a *testAdmin) do(method, path, body string, hdr map[string]string) (int, apiErr, string) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = testAdminAddr
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		switch {
		case strings.EqualFold(k, "host"):
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	var e apiErr
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return rec.Code, e, rec.Body.String()
}

type apiErr struct {
	Error struct {
		Message   string `json:"message"`
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

func TestAdminGuard(t *testing.T) {
	const token = "0123456789abcdef-admin-token-0123"
	open, locked := newTestAdmin(t, ""), newTestAdmin(t, token)
	bearer := map[string]string{"Authorization": "Bearer " + token}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name         string
		a            *testAdmin
		method, path string
		hdr          map[string]string
		status       int
		code         string
	}{
		// refused
		{"the reproduced attack", open, "POST", "/admin/v1/keys", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "host": "rebind.evil.example"}, 421, "invalid_host"},
		{"rebound host", open, "POST", "/admin/v1/keys", map[string]string{"host": "rebind.evil.example:19090"}, 421, "invalid_host"},
		{"rebound host, read", open, "GET", "/admin/v1/usage", map[string]string{"host": "rebind.evil.example"}, 421, "invalid_host"},
		{"loopback name on another port", open, "GET", "/admin/v1/keys", map[string]string{"host": "localhost:3000"}, 421, "invalid_host"},
		{"no port", open, "GET", "/admin/v1/keys", map[string]string{"host": "127.0.0.1"}, 421, "invalid_host"},
		{"foreign origin", open, "POST", "/admin/v1/keys", map[string]string{"Origin": "http://evil.example"}, 403, "cross_origin"},
		{"origin of another local port", open, "GET", "/admin/v1/keys", map[string]string{"Origin": "http://127.0.0.1:3000"}, 403, "cross_origin"},
		{"https origin", open, "GET", "/admin/v1/keys", map[string]string{"Origin": "https://127.0.0.1:19090"}, 403, "cross_origin"},
		{"null origin", open, "POST", "/admin/v1/keys", map[string]string{"Origin": "null"}, 403, "cross_origin"},
		{"origin of another listener name", open, "GET", "/admin/v1/keys", map[string]string{"Origin": "http://localhost:19090"}, 403, "cross_origin"},
		{"cross-site fetch", open, "POST", "/admin/v1/keys", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "cross_origin"},
		{"same-site fetch", open, "GET", "/admin/v1/keys", map[string]string{"Sec-Fetch-Site": "same-site"}, 403, "cross_origin"},
		{"text/plain write", open, "POST", "/admin/v1/keys", map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"form write", open, "POST", "/admin/v1/accounts/acme/credit", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"multipart write", open, "PUT", "/admin/v1/models/x", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"},
		{"write without a type", open, "DELETE", "/admin/v1/models/x", map[string]string{"Content-Type": ""}, 415, "unsupported_media_type"},
		{"empty write without a type", open, "POST", "/admin/v1/reload", map[string]string{"Content-Type": ""}, 415, "unsupported_media_type"},
		{"json lookalike", open, "POST", "/admin/v1/reload", map[string]string{"Content-Type": "application/jsonx"}, 415, "unsupported_media_type"},
		{"no token", locked, "GET", "/admin/v1/keys", nil, 401, "invalid_admin_token"},
		{"wrong token", locked, "GET", "/admin/v1/keys", map[string]string{"Authorization": "Bearer " + token[:len(token)-1] + "X"}, 401, "invalid_admin_token"},
		{"token prefix", locked, "GET", "/admin/v1/keys", map[string]string{"Authorization": "Bearer " + token[:10]}, 401, "invalid_admin_token"},
		{"token without scheme", locked, "GET", "/admin/v1/keys", map[string]string{"Authorization": token}, 401, "invalid_admin_token"},
		{"basic scheme", locked, "GET", "/admin/v1/keys", map[string]string{"Authorization": "Basic " + token}, 401, "invalid_admin_token"},
		{"token does not excuse a rebound host", locked, "GET", "/admin/v1/keys", with(bearer, "host", "rebind.evil.example"), 421, "invalid_host"},
		{"token does not excuse a foreign origin", locked, "GET", "/admin/v1/keys", with(bearer, "Origin", "http://evil.example"), 403, "cross_origin"},
		{"token does not excuse text/plain", locked, "POST", "/admin/v1/reload", with(bearer, "Content-Type", "text/plain"), 415, "unsupported_media_type"},
		// allowed
		{"own host", open, "GET", "/admin/v1/keys", nil, 200, ""},
		{"localhost", open, "GET", "/admin/v1/keys", map[string]string{"host": "localhost:19090"}, 200, ""},
		{"LOCALHOST", open, "GET", "/admin/v1/keys", map[string]string{"host": "LOCALHOST:19090"}, 200, ""},
		{"ipv6 loopback", open, "GET", "/admin/v1/keys", map[string]string{"host": "[::1]:19090"}, 200, ""},
		{"same origin", open, "POST", "/admin/v1/reload", map[string]string{"Origin": "http://127.0.0.1:19090"}, 200, ""},
		{"same-origin fetch", open, "POST", "/admin/v1/reload", map[string]string{"Sec-Fetch-Site": "same-origin"}, 200, ""},
		{"typed in the address bar", open, "GET", "/admin/v1/keys", map[string]string{"Sec-Fetch-Site": "none"}, 200, ""},
		{"json with charset", open, "POST", "/admin/v1/reload", map[string]string{"Content-Type": "Application/JSON; charset=utf-8"}, 200, ""},
		{"read without a type", open, "GET", "/admin/v1/status", map[string]string{"Content-Type": ""}, 200, ""},
		{"token", locked, "GET", "/admin/v1/keys", bearer, 200, ""},
		{"token, lowercase scheme", locked, "POST", "/admin/v1/reload", map[string]string{"Authorization": "bearer " + token}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, e, body := tt.a.do(tt.method, tt.path, "", tt.hdr)
			if status != tt.status || e.Error.Code != tt.code {
				t.Fatalf("got %d %s, want %d %q", status, body, tt.status, tt.code)
			}
			if tt.code != "" && (e.Error.Message == "" || e.Error.RequestID == "") {
				t.Fatalf("refusal without a message or request id: %s", body)
			}
			if strings.Contains(body, token) {
				t.Fatalf("the token was echoed: %s", body)
			}
		})
	}
	// Nothing the refused requests asked for happened.
	if ks, _ := open.store.Keys(); len(ks) != 0 {
		t.Fatalf("refused requests created %d keys", len(ks))
	}
}

func TestAdminGuardBodyCap(t *testing.T) {
	a := newTestAdmin(t, "")
	big := `{"account": "acme", "name": "` + strings.Repeat("x", maxAdminBody) + `"}`
	status, e, body := a.do("POST", "/admin/v1/keys", big, nil)
	if status != 413 || e.Error.Code != "request_too_large" {
		t.Fatalf("a body over 1 MiB: %d %.300s", status, body)
	}
}

func TestAdminGuardHostsOfListenAddress(t *testing.T) {
	for addr, ok := range map[string][]string{
		"127.0.0.1:9090": {"127.0.0.1:9090", "localhost:9090", "[::1]:9090"},
		"[::1]:9191":     {"[::1]:9191", "127.0.0.1:9191", "localhost:9191"},
		"localhost:80":   {"localhost:80", "localhost", "127.0.0.1", "[::1]"},
		"127.0.0.2:9090": {"127.0.0.2:9090", "127.0.0.1:9090"},
	} {
		g := newAdminGuard(addr, "", slog.New(slog.DiscardHandler), http.NotFoundHandler())
		for _, h := range ok {
			if !g.hosts[h] {
				t.Errorf("listen.admin %s: Host %s refused; allowed are %v", addr, h, g.hosts)
			}
		}
		if g.hosts["evil.example"] || g.hosts["evil.example:9090"] || len(g.hosts) > 8 {
			t.Errorf("listen.admin %s: too many hosts %v", addr, g.hosts)
		}
	}
}

// TestAdminErrorsNameTheField: every endpoint's bad input is a 4xx that says which field is
// wrong and why; never a schema dump, never a 5xx.
func TestAdminErrorsNameTheField(t *testing.T) {
	a := newTestAdmin(t, "")
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		want                     []string
	}{
		{"limit not a number", "POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":"abc"}`, 400, "invalid_request",
			[]string{`monthly_limit: "abc" is not a decimal amount in USD; send a string like "5" or "12.50"`}},
		{"limit an object", "POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":{}}`, 400, "invalid_request", []string{"monthly_limit: got an object"}},
		{"limit negative", "POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":"-1"}`, 400, "invalid_request", []string{"monthly_limit", "negative"}},
		{"limit as exponent", "POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":1e999999999}`, 400, "invalid_request", []string{"monthly_limit", "not a decimal amount"}},
		{"limit too many digits", "POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":"12345678901234567890"}`, 400, "invalid_request", []string{"monthly_limit", "too many digits"}},
		{"typo", "POST", "/admin/v1/keys", `{"account":"acme","monthly_limt":"5"}`, 400, "invalid_request", []string{"monthly_limt: unknown field (did you mean monthly_limit?)", "account, models, monthly_limit, name"}},
		{"case matters", "POST", "/admin/v1/keys", `{"Account":"acme"}`, 400, "invalid_request", []string{"Account: unknown field (did you mean account?)"}},
		{"no account", "POST", "/admin/v1/keys", `{"name":"ci"}`, 400, "invalid_request", []string{"account: is required"}},
		{"models a string", "POST", "/admin/v1/keys", `{"account":"acme","models":"gpt-4o-mini"}`, 400, "invalid_request", []string{"models: got a string, want a list of strings"}},
		{"models entry", "POST", "/admin/v1/keys", `{"account":"acme","models":["gpt 4"]}`, 400, "invalid_request", []string{`models[0]: "gpt 4"`}},
		{"several at once", "POST", "/admin/v1/keys", `{"account":5,"name":"a\u0000b","models":[1]}`, 400, "invalid_request", []string{"account: got a number, want a string", "models[0]: got a number"}},
		{"long name", "POST", "/admin/v1/keys", `{"account":"acme","name":"` + strings.Repeat("n", 200) + `"}`, 400, "invalid_request", []string{`name: "nnnn`, "longer than 128"}},
		{"unknown account", "POST", "/admin/v1/keys", `{"account":"ghost"}`, 404, "not_found", []string{`account "ghost" does not exist`}},
		{"empty body", "POST", "/admin/v1/keys", ``, 400, "invalid_json", []string{"body: is empty; send a JSON object like {"}},
		{"not JSON", "POST", "/admin/v1/keys", `account=acme`, 400, "invalid_json", []string{"body: is not valid JSON", "at byte"}},
		{"a list", "POST", "/admin/v1/keys", `[{"account":"acme"}]`, 400, "invalid_json", []string{"body: is a list, not an object"}},
		{"trailing data", "POST", "/admin/v1/keys", `{"account":"acme"} {}`, 400, "invalid_json", []string{"body: is not valid JSON"}},
		{"account id", "POST", "/admin/v1/accounts", `{"id":"a b"}`, 400, "invalid_request", []string{"account id"}},
		{"credits", "POST", "/admin/v1/accounts", `{"id":"beta","credits":"lots"}`, 400, "invalid_request", []string{`credits: "lots" is not a decimal amount`}},
		{"credits negative", "POST", "/admin/v1/accounts", `{"id":"beta","credits":"-5"}`, 400, "invalid_request", []string{"credits", "negative"}},
		{"account exists", "POST", "/admin/v1/accounts", `{"id":"acme"}`, 409, "already_exists", []string{"acme"}},
		{"credit missing", "POST", "/admin/v1/accounts/acme/credit", `{}`, 400, "invalid_request", []string{"amount: is required"}},
		{"credit zero", "POST", "/admin/v1/accounts/acme/credit", `{"amount":"0"}`, 400, "invalid_request", []string{"amount", "more than 0"}},
		{"credit bool", "POST", "/admin/v1/accounts/acme/credit", `{"amount":true}`, 400, "invalid_request", []string{"amount: got a boolean"}},
		{"credit unknown account", "POST", "/admin/v1/accounts/ghost/credit", `{"amount":"1"}`, 404, "not_found", []string{"ghost"}},
		{"provider type", "PUT", "/admin/v1/providers/p2", `{"type":"cohere","base_url":"http://127.0.0.1:1/v1"}`, 400, "invalid_request", []string{`unknown type "cohere"`}},
		{"provider literal key", "PUT", "/admin/v1/providers/p2", `{"type":"openai","base_url":"http://127.0.0.1:1/v1","api_key_ref":"sk-123"}`, 400, "invalid_request", []string{"api_key_ref: must name an environment variable"}},
		{"provider name", "PUT", "/admin/v1/providers/P%20X", `{"type":"openai","base_url":"http://127.0.0.1:1/v1"}`, 400, "invalid_request", []string{`name: "P X" in the path`}},
		{"provider name differs", "PUT", "/admin/v1/providers/p2", `{"name":"p3","type":"openai","base_url":"http://127.0.0.1:1/v1"}`, 400, "invalid_request", []string{`name: "p3" differs`}},
		{"provider source", "PUT", "/admin/v1/providers/p2", `{"source":"config","type":"openai","base_url":"http://127.0.0.1:1/v1"}`, 400, "invalid_request", []string{"source:"}},
		{"provider typo", "PUT", "/admin/v1/providers/p2", `{"type":"openai","baseurl":"http://127.0.0.1:1/v1"}`, 400, "invalid_request", []string{"baseurl: unknown field (did you mean base_url?)"}},
		{"model providers", "PUT", "/admin/v1/models/m2", `{"providers":{"provider":"local"}}`, 400, "invalid_request", []string{"providers: got an object, want a list of objects"}},
		{"model nested typo", "PUT", "/admin/v1/models/m2", `{"providers":[{"provider":"local","modle":"x"}]}`, 400, "invalid_request", []string{"providers[0].modle: unknown field (did you mean model?)"}},
		{"model context length", "PUT", "/admin/v1/models/m2", `{"providers":[{"provider":"local","model":"x"}],"context_length":1.5}`, 400, "invalid_request", []string{"context_length: got a number, want a whole number"}},
		{"model pricing", "PUT", "/admin/v1/models/m2", `{"providers":[{"provider":"local","model":"x"}],"pricing":{"prompt":"cheap"}}`, 400, "invalid_request", []string{"pricing:", "cheap"}},
		{"model pricing typo", "PUT", "/admin/v1/models/m2", `{"providers":[{"provider":"local","model":"x"}],"pricing":{"promt":"0.1"}}`, 400, "invalid_request", []string{"pricing:", "promt"}},
		{"model price of a million digits", "PUT", "/admin/v1/models/m2", `{"providers":[{"provider":"local","model":"x"}],"pricing":{"prompt":"` + strings.Repeat("9", 1_000_000) + `"}}`, 400, "invalid_request", []string{"pricing:", "at most 15 digits"}},
		{"model unknown provider", "PUT", "/admin/v1/models/m2", `{"providers":[{"provider":"nobody","model":"x"}]}`, 400, "invalid_request", []string{`provider "nobody" is not defined`}},
		{"model id", "PUT", "/admin/v1/models/route:x", `{"providers":[{"provider":"local","model":"x"}]}`, 400, "invalid_request", []string{`id: "route:x" in the path`, "route:"}},
		{"model id too long", "PUT", "/admin/v1/models/" + strings.Repeat("m", 40000), `{}`, 400, "invalid_request", []string{"id:", "longer than 256"}},
		{"delete unknown model", "DELETE", "/admin/v1/models/nope", ``, 404, "not_found", []string{"nope"}},
		{"route rule", "POST", "/admin/v1/routes", `{"name":"bot","rule":"round_robin","models":["gpt-4o-mini"]}`, 400, "invalid_request", []string{`rule "round_robin"`}},
		{"route name", "POST", "/admin/v1/routes", `{"name":"!!!","rule":"priority_fallback","models":["gpt-4o-mini"]}`, 400, "invalid_request", []string{"name:"}},
		{"route modes type", "POST", "/admin/v1/routes", `{"name":"t","rule":"mode_mapping","modes":["fast"]}`, 400, "invalid_request", []string{"modes: got a list, want an object"}},
		{"route mode value", "POST", "/admin/v1/routes", `{"name":"t","rule":"mode_mapping","modes":{"balanced":5}}`, 400, "invalid_request", []string{"modes.balanced: got a number, want a string"}},
		{"pause unknown route", "POST", "/admin/v1/routes/route:nope/pause", ``, 404, "not_found", []string{"route:nope"}},
		{"usage filter typo", "GET", "/admin/v1/usage?acount=acme", ``, 400, "invalid_request", []string{`query parameter "acount": unknown`}},
		{"usage date", "GET", "/admin/v1/usage?since=yesterday", ``, 400, "invalid_request", []string{`since: "yesterday" is not a date`}},
		{"records filter typo", "GET", "/admin/v1/usage/records?modle=x", ``, 400, "invalid_request", []string{`"modle"`}},
		{"revoke unknown key", "POST", "/admin/v1/keys/key_0000000000000000/revoke", ``, 404, "not_found", []string{"key_0000000000000000"}},
		{"unknown path", "GET", "/admin/v1/nothing", ``, 404, "not_found", []string{"/admin/v1/nothing"}},
		{"wrong method", "DELETE", "/admin/v1/keys", ``, 405, "method_not_allowed", []string{"DELETE", "GET"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, e, body := a.do(tt.method, tt.path, tt.body, nil)
			t.Logf("%d %s: %s", status, e.Error.Code, e.Error.Message)
			if status != tt.status || e.Error.Code != tt.code {
				t.Fatalf("got %d %.500s, want %d %s", status, body, tt.status, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(e.Error.Message, w) {
					t.Errorf("message %q does not say %q", e.Error.Message, w)
				}
			}
			if strings.Contains(e.Error.Message, "json:") || strings.Contains(e.Error.Message, "Go struct") || len(e.Error.Message) > 2000 {
				t.Errorf("message leaks decoder internals or is too long: %.300q", e.Error.Message)
			}
		})
	}
}

func TestAdminRequestsThatWork(t *testing.T) {
	a := newTestAdmin(t, "")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/admin/v1/keys", `{"account":"acme","name":"ci","monthly_limit":"12.50","models":["gpt-4o-mini","route:bot"]}`},
		{"POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":5}`},
		{"POST", "/admin/v1/keys", `{"account":"acme","models":null,"name":null}`},
		{"POST", "/admin/v1/accounts", `{"id":"beta","credits":"25"}`},
		{"POST", "/admin/v1/accounts", `{"id":"gamma"}`},
		{"POST", "/admin/v1/accounts/acme/credit", `{"amount":"0.000001"}`},
		{"PUT", "/admin/v1/providers/p2", `{"type":"openai","base_url":"http://127.0.0.1:1/v1","api_key_ref":"${P2_KEY}"}`},
		{"PUT", "/admin/v1/models/meta-llama/Llama-3.3-70B-Instruct", `{"name":"Llama 3.3 70B","providers":[{"provider":"p2","model":"llama-3.3-70b"}],"pricing":{"prompt":"0.0000006","completion":"0.0000006"}}`},
		{"PUT", "/admin/v1/models/claude-3-5-sonnet@20240620", `{"id":"claude-3-5-sonnet@20240620","source":"admin","providers":[{"provider":"p2","model":"claude"}]}`},
		{"POST", "/admin/v1/routes", `{"name":"Support Bot","rule":"priority_fallback","models":["meta-llama/Llama-3.3-70B-Instruct","gpt-4o-mini"]}`},
		{"POST", "/admin/v1/routes/route:support-bot/pause", ``},
		{"DELETE", "/admin/v1/models/claude-3-5-sonnet@20240620", ``},
		{"GET", "/admin/v1/usage?account=acme&since=2026-11-01", ``},
	} {
		if status, _, body := a.do(c.method, c.path, c.body, nil); status >= 300 {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, status, body)
		}
	}
	cat, _ := a.store.Catalog()
	if len(cat.Models) != 2 || cat.Models[1].ID != "meta-llama/Llama-3.3-70B-Instruct" || cat.Routes[0].Status != ir.RoutePaused {
		t.Fatalf("catalog after the requests: %+v", cat)
	}
}

// TestRotatingARevokedKeyIsAClientError: it was a 500.
func TestRotatingARevokedKeyIsAClientError(t *testing.T) {
	a := newTestAdmin(t, "")
	_, _, body := a.do("POST", "/admin/v1/keys", `{"account":"acme"}`, nil)
	var k adminapi.Key
	if err := json.Unmarshal([]byte(body), &k); err != nil || k.ID == "" {
		t.Fatalf("create: %s", body)
	}
	if status, _, body := a.do("POST", "/admin/v1/keys/"+k.ID+"/revoke", "", nil); status != 200 {
		t.Fatalf("revoke: %d %s", status, body)
	}
	status, e, body := a.do("POST", "/admin/v1/keys/"+k.ID+"/rotate", "", nil)
	if status != 400 || !strings.Contains(e.Error.Message, "revoked") {
		t.Fatalf("rotate a revoked key: %d %s", status, body)
	}
}
