package admin

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
)

// createTestKey creates a key through the admin API with body's settings.
func (a *testAdmin) createTestKey(t *testing.T, body string) adminapi.Key {
	t.Helper()
	_, _, raw := a.do("POST", "/admin/v1/keys", body, nil)
	var k adminapi.Key
	if err := json.Unmarshal([]byte(raw), &k); err != nil || k.ID == "" {
		t.Fatalf("create: %s", raw)
	}
	return k
}

// TestKeyLimitsPatch: PATCH /admin/v1/keys/{id}/limits changes only the settings it names (the
// CLI's keys set-limit and set-models), so one never undoes a change of the other; null removes
// the limit, [] (or null) allows every model; values are checked like PUT's.
func TestKeyLimitsPatch(t *testing.T) {
	a := newTestAdmin(t, "")
	k := a.createTestKey(t, `{"account":"acme","monthly_limit":"5","models":["gpt-4o-mini"]}`)
	path := "/admin/v1/keys/" + k.ID + "/limits"
	steps := []struct {
		body, limit, models string // limit "" = none, models "" = all
	}{
		{`{"monthly_limit":"12.50"}`, "12.5", "gpt-4o-mini"},
		{`{"models":["route:bot","gpt-4o-mini"]}`, "12.5", "route:bot,gpt-4o-mini"},
		{`{"monthly_limit":null}`, "", "route:bot,gpt-4o-mini"},
		{`{"monthly_limit":0.05}`, "0.05", "route:bot,gpt-4o-mini"},
		{`{"models":[]}`, "0.05", ""},
		{`{"models":["gpt-4o-mini"],"monthly_limit":"1"}`, "1", "gpt-4o-mini"},
		{`{"models":null}`, "1", ""},
	}
	for _, s := range steps {
		status, _, body := a.do("PATCH", path, s.body, nil)
		var got adminapi.Key
		if status != 200 || json.Unmarshal([]byte(body), &got) != nil {
			t.Fatalf("PATCH %s: %d %s", s.body, status, body)
		}
		stored, err := a.store.GetKey(k.ID)
		if err != nil {
			t.Fatal(err)
		}
		limit := ""
		if stored.MonthlyLimit != nil {
			limit = stored.MonthlyLimit.String()
		}
		if limit != s.limit || strings.Join(stored.Models, ",") != s.models {
			t.Fatalf("after PATCH %s: limit %q models %v; want %q and %q", s.body, limit, stored.Models, s.limit, s.models)
		}
		if got.ID != k.ID || strings.Join(got.Models, ",") != s.models || got.Secret != "" {
			t.Fatalf("PATCH %s answered %s", s.body, body)
		}
	}
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{}`, 400, "names none of monthly_limit, models and rate_limits"},
		{`{"monthly_limit":"-1"}`, 400, "monthly_limit"},
		{`{"monthly_limit":"abc"}`, 400, `monthly_limit: "abc" is not a decimal amount`},
		{`{"monthly_limit":"12345678901234567890"}`, 400, "too many digits"},
		{`{"models":["bad model"]}`, 400, "models[0]"},
		{`{"models":"gpt-4o-mini"}`, 400, "models: got a string"},
		{`{"monthly_limt":"5"}`, 400, "did you mean monthly_limit?"},
	} {
		status, e, _ := a.do("PATCH", path, c.body, nil)
		if status != c.status || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("PATCH %s: %d %q, want %d saying %q", c.body, status, e.Error.Message, c.status, c.want)
		}
	}
	if stored, _ := a.store.GetKey(k.ID); stored.MonthlyLimit == nil || stored.MonthlyLimit.String() != "1" || len(stored.Models) != 0 {
		t.Fatalf("a refused PATCH changed the key: %+v", stored)
	}
	if status, _, _ := a.do("PATCH", "/admin/v1/keys/key_0000000000000000/limits", `{"models":[]}`, nil); status != 404 {
		t.Errorf("unknown key: %d", status)
	}
	a.do("POST", "/admin/v1/keys/"+k.ID+"/revoke", "", nil)
	if status, e, _ := a.do("PATCH", path, `{"monthly_limit":"2"}`, nil); status != 400 || !strings.Contains(e.Error.Message, "revoked") {
		t.Errorf("revoked key: %d %+v", status, e)
	}
}

// TestKeyListShowsSpentThisMonth: GET /admin/v1/keys gives each key's spend this month (UTC)
// from the gateway's ledger, what its monthly limit counts, settled requests included as soon
// as they settle.
func TestKeyListShowsSpentThisMonth(t *testing.T) {
	a := newTestAdmin(t, "")
	spender := a.createTestKey(t, `{"account":"acme","monthly_limit":"5"}`)
	idle := a.createTestKey(t, `{"account":"acme"}`)
	limit := decimal.RequireFromString("5")
	r, err := a.ledger.Reserve("acme", spender.ID, &limit, decimal.RequireFromString("0.5"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a.ledger.Settle(r, decimal.RequireFromString("0.0102"))
	status, _, body := a.do("GET", "/admin/v1/keys", "", nil)
	var out struct {
		Month string
		Data  []struct {
			ID             string
			SpentThisMonth *string `json:"spent_this_month"` // a string: decoding a number fails
		}
	}
	if status != 200 || json.Unmarshal([]byte(body), &out) != nil || len(out.Data) != 2 {
		t.Fatalf("GET keys: %d %s", status, body)
	}
	if out.Month != time.Now().UTC().Format("2006-01") {
		t.Errorf("month %q", out.Month)
	}
	for _, k := range out.Data {
		want := map[string]string{spender.ID: "0.0102", idle.ID: "0"}[k.ID]
		if k.SpentThisMonth == nil || *k.SpentThisMonth != want {
			t.Errorf("key %s: spent_this_month %v, want %s", k.ID, k.SpentThisMonth, want)
		}
	}
}

// TestKeyRateLimits: POST /admin/v1/keys takes rate_limits; PATCH .../limits changes the rates
// its rate_limits names (null unsets one, "rate_limits": null both) and keeps the others, like
// the other limit fields; PUT replaces them; a rate below 1 or not a whole number is a 400
// naming the field and the fix.
func TestKeyRateLimits(t *testing.T) {
	a := newTestAdmin(t, "")
	k := a.createTestKey(t, `{"account":"acme","rate_limits":{"requests_per_minute":60,"tokens_per_minute":100000}}`)
	rates := func() string {
		stored, err := a.store.GetKey(k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.RateLimits == nil {
			return "none"
		}
		s := func(p *int64) string {
			if p == nil {
				return "-"
			}
			return strconv.FormatInt(*p, 10)
		}
		return s(stored.RateLimits.RequestsPerMinute) + "/" + s(stored.RateLimits.TokensPerMinute)
	}
	if k.RateLimits == nil || rates() != "60/100000" {
		t.Fatalf("created: %+v, stored %s", k.RateLimits, rates())
	}
	path := "/admin/v1/keys/" + k.ID + "/limits"
	for _, s := range []struct{ method, body, want string }{
		{"PATCH", `{"rate_limits":{"requests_per_minute":2}}`, "2/100000"},
		{"PATCH", `{"monthly_limit":"5"}`, "2/100000"},
		{"PATCH", `{"rate_limits":{"tokens_per_minute":null}}`, "2/-"},
		{"PATCH", `{"rate_limits":{"tokens_per_minute":500,"requests_per_minute":null}}`, "-/500"},
		{"PATCH", `{"rate_limits":null}`, "none"},
		{"PATCH", `{"rate_limits":{"requests_per_minute":9}}`, "9/-"},
		{"PUT", `{"monthly_limit":"5"}`, "none"},
		{"PUT", `{"rate_limits":{"tokens_per_minute":10}}`, "-/10"},
	} {
		status, _, body := a.do(s.method, path, s.body, nil)
		if status != 200 {
			t.Fatalf("%s %s: %d %s", s.method, s.body, status, body)
		}
		if got := rates(); got != s.want {
			t.Fatalf("after %s %s: %s, want %s", s.method, s.body, got, s.want)
		}
	}
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/admin/v1/keys", `{"account":"acme","rate_limits":{"requests_per_minute":0}}`, "rate_limits.requests_per_minute: 0 is out of range; send a whole number from 1"},
		{"POST", "/admin/v1/keys", `{"account":"acme","rate_limits":{"tokens_per_minute":-5}}`, "rate_limits.tokens_per_minute: -5 is out of range"},
		{"POST", "/admin/v1/keys", `{"account":"acme","rate_limits":{"requests_per_minute":1.5}}`, "rate_limits.requests_per_minute: got a number, want a whole number"},
		{"POST", "/admin/v1/keys", `{"account":"acme","rate_limits":{"requests_per_minute":"60"}}`, "rate_limits.requests_per_minute: got a string, want a whole number"},
		{"POST", "/admin/v1/keys", `{"account":"acme","rate_limits":{"rpm":60}}`, "rate_limits.rpm: unknown field"},
		{"PATCH", path, `{"rate_limits":{"requests_per_minute":0}}`, "rate_limits.requests_per_minute: 0 is out of range"},
		{"PATCH", path, `{"rate_limits":60}`, "rate_limits: got a number, want an object"},
	} {
		status, e, _ := a.do(c.method, c.path, c.body, nil)
		if status != 400 || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s %s: %d %q, want 400 saying %q", c.method, c.body, status, e.Error.Message, c.want)
		}
	}
	if got := rates(); got != "-/10" {
		t.Fatalf("a refused request changed the key: %s", got)
	}
}
