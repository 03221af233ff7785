package admin

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/tollway/tollway/store"
)

// Fuzz targets for the admin API's request decoders, driven through the whole handler (guard,
// decoder, store, IR, translator) of an in-process gateway. A hostile body never panics and
// never gets a 5xx; it either succeeds with a valid record or gets a 4xx whose message names
// a field. Run one with: go test -run='^$' -fuzz=FuzzAdminKeys -fuzztime=30s ./cmd/tollway/internal/admin

// fuzzAdmin sends body and checks the answer; names are the words one of which a refusal's
// message must contain (its fields, or the record kind IR messages name). It returns the status.
func fuzzAdmin(t *testing.T, a *testAdmin, method, path string, body []byte, names ...string) int {
	status, e, raw := a.do(method, path, string(body), nil)
	switch {
	case status >= 500:
		t.Fatalf("%s %s %q: %d %s", method, path, body, status, raw)
	case status >= 400:
		if e.Error.Message == "" || e.Error.Code == "" || e.Error.RequestID == "" {
			t.Fatalf("%s %s %q: a refusal without message, code or request id: %s", method, path, body, raw)
		}
		for _, n := range append(names, "body") {
			if strings.Contains(e.Error.Message, n) {
				return status
			}
		}
		t.Fatalf("%s %s %q: message %q names none of %v", method, path, body, e.Error.Message, names)
	case status < 200:
		t.Fatalf("%s %s %q: %d", method, path, body, status)
	}
	return status
}

// restoreCatalog undoes a change a fuzz input made, so inputs do not pile up in the catalog.
func restoreCatalog(t *testing.T, a *testAdmin, base store.Catalog) {
	if err := a.store.RestoreCatalog(base); err != nil {
		t.Fatal(err)
	}
	if err := a.gw.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func FuzzAdminKeys(f *testing.F) {
	for _, s := range []string{
		`{"account":"acme"}`, `{"account":"acme","name":"ci","monthly_limit":"12.50","models":["gpt-4o-mini","route:bot"]}`,
		`{"account":"acme","monthly_limit":5}`, `{"account":"acme","monthly_limit":"abc"}`, `{"account":"acme","monthly_limit":1e999999999}`,
		`{"account":"acme","monthly_limt":"5"}`, `{"account":["acme"]}`, `{"account":"ghost"}`, `{"account":"a b"}`,
		`{"account":"acme","models":"x"}`, `{"account":"acme","models":[null,"",1]}`, ``, `[]`, `null`, `{"account":"acme"}{}`,
		`{"account":"acme","name":"\u0000"}`, `{"account":"acme","monthly_limit":"-0.00000000000000000001"}`,
	} {
		f.Add([]byte(s))
	}
	a := newTestAdmin(f, "")
	f.Fuzz(func(t *testing.T, body []byte) {
		if fuzzAdmin(t, a, "POST", "/admin/v1/keys", body, "account", "name", "monthly_limit", "models") == 201 {
			ks, err := a.store.Keys()
			if err != nil || len(ks) == 0 {
				t.Fatalf("201 without a stored key: %v", err)
			}
		}
	})
}

func FuzzAdminAccounts(f *testing.F) {
	for _, s := range []string{
		`{"id":"beta","credits":"25"}`, `{"id":"beta"}`, `{"id":"acme"}`, `{"id":"a b","credits":"1"}`, `{"id":"beta","credits":-1}`,
		`{"id":"beta","credits":"1e5"}`, `{"id":"beta","credits":"99999999999999999999"}`, `{"id":"","credits":"1"}`, `{"ID":"x"}`,
		`{"id":"` + strings.Repeat("x", 200) + `"}`, `{"id":"beta","credits":{"amount":1}}`,
	} {
		f.Add([]byte(s))
	}
	a := newTestAdmin(f, "")
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzAdmin(t, a, "POST", "/admin/v1/accounts", body, "id", "credits", "account")
	})
}

func FuzzAdminCredit(f *testing.F) {
	for _, s := range []string{
		`{"amount":"10"}`, `{"amount":10}`, `{"amount":"0"}`, `{"amount":"-1"}`, `{"amount":"ten"}`, `{}`, `{"amount":null}`,
		`{"amount":"0.000000000000000001"}`, `{"amount":"1.0000000000000000001"}`, `{"amount":1e-7}`, `{"amount":"999999999999999"}`,
	} {
		f.Add([]byte(s))
	}
	a := newTestAdmin(f, "")
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzAdmin(t, a, "POST", "/admin/v1/accounts/acme/credit", body, "amount", "account")
	})
}

func FuzzAdminProviders(f *testing.F) {
	for _, s := range []struct{ name, body string }{
		{"p2", `{"type":"openai","base_url":"http://127.0.0.1:1/v1"}`},
		{"p2", `{"type":"anthropic","base_url":"https://api.anthropic.com/v1","api_key_ref":"${ANTHROPIC_API_KEY}"}`},
		{"p2", `{"type":"gemini","base_url":"https://x.example/v1beta","ca_file":"/nonexistent.pem"}`},
		{"local", `{"type":"openai","base_url":"ftp://x"}`},
		{"p2", `{"type":"openai","base_url":"http://user:pw@h/v1?q#f"}`},
		{"p2", `{"type":"openai","base_url":"http://h:99999/v1"}`},
		{"P 2", `{}`}, {"p2", `{"name":"p3"}`}, {"p2", `{"source":"config"}`}, {"p2", `{"api_key_ref":"sk-live"}`},
	} {
		f.Add(s.name, []byte(s.body))
	}
	a := newTestAdmin(f, "")
	base, err := a.store.Catalog()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		if name == "" || strings.Contains(name, "/") {
			return // another endpoint's path
		}
		if fuzzAdmin(t, a, "PUT", "/admin/v1/providers/"+url.PathEscape(name), body,
			"provider", "name", "type", "base_url", "api_key_ref", "ca_file", "source") == 200 {
			restoreCatalog(t, a, base)
		}
	})
}

func FuzzAdminModels(f *testing.F) {
	for _, s := range []struct{ id, body string }{
		{"m2", `{"providers":[{"provider":"local","model":"x"}]}`},
		{"meta-llama/Llama-3.3-70B-Instruct", `{"name":"Llama","providers":[{"provider":"local","model":"llama3.3","supported_sampling_parameters":["temperature"]}],"pricing":{"prompt":"0.0000006","completion":"0.0000006"},"context_length":128000,"max_output_length":4096,"input_modalities":["text","image"],"supported_features":["tools"]}`},
		{"claude-3-5-sonnet@20240620", `{"providers":[{"provider":"local","model":"c"}],"pricing":[{"range_start":0,"range_end":1000,"prompt":"1","completion":"2"},{"range_start":1000,"range_end":null,"prompt":"2","completion":"3"}]}`},
		{"m2", `{"providers":[{"provider":"nobody","model":"x"}]}`}, {"route:x", `{}`}, {"m2", `{"providers":{}}`},
		{"m2", `{"providers":[{"provider":"local","model":"x y"}]}`}, {"m2", `{"pricing":{"prompt":1e400}}`},
		{"m2", `{"providers":[{"provider":"local","model":"x"}],"context_length":-5}`}, {"gpt-4o-mini", `{"id":"other"}`},
	} {
		f.Add(s.id, []byte(s.body))
	}
	a := newTestAdmin(f, "")
	base, err := a.store.Catalog()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		if id == "" {
			return // the list endpoint
		}
		if fuzzAdmin(t, a, "PUT", "/admin/v1/models/"+escapeSegments(id), body,
			"model", "id", "name", "providers", "pricing", "modalities", "context_length", "max_output_length", "supported", "source", "provider") == 200 {
			restoreCatalog(t, a, base)
		}
	})
}

func FuzzAdminRoutes(f *testing.F) {
	for _, s := range []string{
		`{"name":"bot","rule":"priority_fallback","models":["gpt-4o-mini"]}`,
		`{"name":"tiers","rule":"mode_mapping","modes":{"fast":"gpt-4o-mini","balanced":"gpt-4o-mini","deep":"gpt-4o-mini"}}`,
		`{"name":"bot","rule":"mode_mapping","modes":{"turbo":"gpt-4o-mini"}}`, `{"name":"!!!","rule":"priority_fallback","models":["x"]}`,
		`{"name":"bot","rule":"priority_fallback","models":["gpt-4o-mini"],"modes":{"fast":"x"}}`, `{"name":"bot","status":"off"}`,
		`{"name":"bot","rule":"priority_fallback","models":["gpt-4o-mini"],"status":"paused"}`, `{"name":"Bot\n","rule":"x"}`,
	} {
		f.Add([]byte(s))
	}
	a := newTestAdmin(f, "")
	base, err := a.store.Catalog()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if fuzzAdmin(t, a, "POST", "/admin/v1/routes", body, "route", "name", "rule", "models", "modes", "status") == 200 {
			restoreCatalog(t, a, base)
		}
	})
}

// escapeSegments escapes an id for a path while keeping its '/' as separators, as a client
// putting meta-llama/Llama-3.3-70B-Instruct would.
func escapeSegments(id string) string {
	parts := strings.Split(id, "/")
	for i := range parts {
		parts[i] = url.PathEscape(parts[i])
	}
	return strings.Join(parts, "/")
}

// FuzzAdminDecode drives the request decoders alone, fast, on any bytes: every problem they
// report is a fieldError naming its field, and nothing panics.
func FuzzAdminDecode(f *testing.F) {
	for _, s := range []string{
		`{"account":"acme","monthly_limit":"5","models":["a"]}`, `{"providers":[{"provider":"p","model":"m","supported_sampling_parameters":["t"]}],"pricing":{"prompt":"1"}}`,
		`{"name":"x","rule":"mode_mapping","modes":{"fast":"m"}}`, `{"a":{"b":[1,{"c":null}]}}`, `{"amount":1e-999999}`, `{"id":"\ud800"}`,
		`{"context_length":99999999999999999999}`, `{"models":[` + strings.Repeat(`"m",`, 300) + `"m"]}`,
	} {
		f.Add([]byte(s))
	}
	decoders := []func([]byte) error{
		func(b []byte) error { _, err := decodeKeyRequest(b); return err },
		func(b []byte) error { _, err := decodeAccountRequest(b); return err },
		func(b []byte) error { _, err := decodeCredit(b); return err },
		func(b []byte) error { _, err := decodeRouteRequest(b); return err },
		func(b []byte) error { _, err := decodeProvider("p", b); return err },
		func(b []byte) error { _, err := decodeModel("meta/m", b); return err },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, decode := range decoders {
			checkFaults(t, body, decode(body))
		}
	})
}

// checkFaults asserts every leaf of err is a fieldError with a field and a reason.
func checkFaults(t *testing.T, body []byte, err error) {
	if err == nil {
		return
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			checkFaults(t, body, e)
		}
		return
	}
	fe, ok := err.(*fieldError)
	if !ok || fe.field == "" || fe.why == "" {
		t.Fatalf("%q: %T %v is not a fieldError naming a field", body, err, err)
	}
}
