package admin

import (
	encsv "encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
)

// TestKeyLimitsInPlace: PUT /admin/v1/keys/{id}/limits replaces a key's monthly limit and
// allow-list together; bad values name the field; a revoked or unknown key is refused.
func TestKeyLimitsInPlace(t *testing.T) {
	a := newTestAdmin(t, "")
	_, _, body := a.do("POST", "/admin/v1/keys", `{"account":"acme","monthly_limit":"5"}`, nil)
	var k adminapi.Key
	if err := json.Unmarshal([]byte(body), &k); err != nil || k.ID == "" {
		t.Fatalf("create: %s", body)
	}
	status, _, body := a.do("PUT", "/admin/v1/keys/"+k.ID+"/limits", `{"monthly_limit":"12.50","models":["gpt-4o-mini"]}`, nil)
	var got adminapi.Key
	if status != 200 || json.Unmarshal([]byte(body), &got) != nil || got.MonthlyLimit == nil || got.MonthlyLimit.String() != "12.5" || len(got.Models) != 1 || got.Secret != "" {
		t.Fatalf("set: %d %s", status, body)
	}
	keys, _ := a.store.Keys()
	if keys[0].MonthlyLimit == nil || !keys[0].MonthlyLimit.Equal(decimal.RequireFromString("12.50")) || keys[0].Models[0] != "gpt-4o-mini" {
		t.Fatalf("stored %+v", keys[0])
	}
	// Both settings are replaced: nothing sent means no limit and every model.
	if status, _, body := a.do("PUT", "/admin/v1/keys/"+k.ID+"/limits", `{}`, nil); status != 200 {
		t.Fatalf("clear: %d %s", status, body)
	}
	if keys, _ = a.store.Keys(); keys[0].MonthlyLimit != nil || len(keys[0].Models) != 0 {
		t.Fatalf("cleared %+v", keys[0])
	}
	for _, c := range []struct{ body, field string }{
		{`{"monthly_limit":"-1"}`, "monthly_limit"},
		{`{"models":["bad model"]}`, "models[0]"},
		{`{"monthly_limit":"5","extra":1}`, "extra"},
	} {
		if status, e, _ := a.do("PUT", "/admin/v1/keys/"+k.ID+"/limits", c.body, nil); status != 400 || !strings.Contains(e.Error.Message, c.field) {
			t.Errorf("%s: %d %+v, want 400 naming %s", c.body, status, e, c.field)
		}
	}
	if status, _, _ := a.do("PUT", "/admin/v1/keys/nope/limits", `{}`, nil); status != 404 {
		t.Errorf("unknown key: %d", status)
	}
	a.do("POST", "/admin/v1/keys/"+k.ID+"/revoke", "", nil)
	if status, e, _ := a.do("PUT", "/admin/v1/keys/"+k.ID+"/limits", `{}`, nil); status != 400 || !strings.Contains(e.Error.Message, "revoked") {
		t.Errorf("revoked key: %d %+v", status, e)
	}
}

// TestRouteStatusRefusesConfigRoutes: the console's pause and resume change a route created
// through the API, and refuse a config route with the reason (the next apply would undo it).
func TestRouteStatusRefusesConfigRoutes(t *testing.T) {
	a := newTestAdmin(t, "")
	if status, _, body := a.do("POST", "/admin/v1/routes", `{"name":"bot","rule":"priority_fallback","models":["gpt-4o-mini"]}`, nil); status >= 300 {
		t.Fatalf("create: %d %s", status, body)
	}
	if status, _, body := a.do("PUT", "/admin/v1/routes/route:bot/status", `{"status":"paused"}`, nil); status != 200 {
		t.Fatalf("pause: %d %s", status, body)
	}
	if r, _ := a.store.Routes(); r[0].Status != "paused" {
		t.Fatalf("stored %+v", r)
	}
	if status, e, _ := a.do("PUT", "/admin/v1/routes/route:bot/status", `{"status":"stopped"}`, nil); status != 400 || !strings.Contains(e.Error.Message, "status") {
		t.Errorf("bad status: %d %+v", status, e)
	}
	if status, _, _ := a.do("PUT", "/admin/v1/routes/route:nope/status", `{"status":"active"}`, nil); status != 404 {
		t.Errorf("unknown route: %d", status)
	}
	cfg := a.gw.Config()
	cfg.Routes = []adminapi.Route{{Name: "filed", Rule: "priority_fallback", Models: []string{"gpt-4o-mini"}}}
	if err := a.gw.ApplyConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if status, e, _ := a.do("PUT", "/admin/v1/routes/route:filed/status", `{"status":"paused"}`, nil); status != 409 || e.Error.Code != "config_route" || !strings.Contains(e.Error.Message, "tollway reload") {
		t.Errorf("config route: %d %+v", status, e)
	}
}

// TestUsageGrouped: usage grouped any way from the aggregates matches GET /admin/v1/usage to
// the cent; grouped by route it comes from the records; CSV carries the same rows and a TOTAL
// row, with formula-looking cells defused.
func TestUsageGrouped(t *testing.T) {
	a := newTestAdmin(t, "")
	now := time.Now().UTC()
	for i, r := range []store.UsageRecord{
		{RequestID: "r1", KeyID: "k1", Account: "acme", Model: "gpt-4o-mini", Route: "route:bot", PromptTokens: 10, CompletionTokens: 5, Cost: decimal.RequireFromString("0.001234")},
		{RequestID: "r2", KeyID: "k1", Account: "acme", Model: "gpt-4o-mini", PromptTokens: 3, CompletionTokens: 1, Cost: decimal.RequireFromString("0.000001")},
		{RequestID: "r3", KeyID: "=HYPERLINK(1)", Account: "acme", Model: "gpt-4o-mini", Route: "route:bot", PromptTokens: 1, Cost: decimal.RequireFromString("0.1")},
	} {
		r.Time = now.Add(time.Duration(i) * time.Millisecond)
		if err := a.store.SettleBatch([]store.UsageRecord{r})[0]; err != nil {
			t.Fatal(err)
		}
	}
	var plain store.UsageSummary
	_, _, body := a.do("GET", "/admin/v1/usage", "", nil)
	if err := json.Unmarshal([]byte(body), &plain); err != nil {
		t.Fatal(err)
	}
	var byModel adminapi.GroupedUsage
	status, _, body := a.do("GET", "/admin/v1/usage/grouped?by=model", "", nil)
	if status != 200 || json.Unmarshal([]byte(body), &byModel) != nil || byModel.Source != "aggregates" || len(byModel.Rows) != 1 ||
		!byModel.Totals.Cost.Equal(plain.Cost) || byModel.Totals.Cost.String() != "0.101235" || byModel.Totals.Requests != 3 {
		t.Fatalf("by model: %d %s (usage %s)", status, body, plain.Cost)
	}
	var byRoute adminapi.GroupedUsage
	_, _, body = a.do("GET", "/admin/v1/usage/grouped?by=route,day&route=route:bot", "", nil)
	if json.Unmarshal([]byte(body), &byRoute) != nil || byRoute.Source != "records" || len(byRoute.Rows) != 1 ||
		byRoute.Rows[0].Group["route"] != "route:bot" || byRoute.Totals.Cost.String() != "0.101234" || byRoute.Totals.Requests != 2 {
		t.Fatalf("by route: %s", body)
	}
	req := "/admin/v1/usage/grouped?by=key&format=csv"
	status, _, body = a.do("GET", req, "", nil)
	rows, err := encsv.NewReader(strings.NewReader(body)).ReadAll()
	if status != 200 || err != nil || len(rows) != 4 || rows[len(rows)-1][0] != "TOTAL" {
		t.Fatalf("csv: %d %v %q", status, err, body)
	}
	if !strings.Contains(body, "'=HYPERLINK(1)") {
		t.Errorf("a formula-looking cell was not defused: %q", body)
	}
	for _, bad := range []string{"?by=colour", "?format=xml", "?since=yesterday", "?bogus=1"} {
		if status, _, _ := a.do("GET", "/admin/v1/usage/grouped"+bad, "", nil); status != 400 {
			t.Errorf("%s: %d", bad, status)
		}
	}
}

// TestHealthReport: providers with their credential and health, models with readiness.
func TestHealthReport(t *testing.T) {
	a := newTestAdmin(t, "")
	status, _, body := a.do("GET", "/admin/v1/health", "", nil)
	var h struct {
		Providers []adminapi.ProviderHealth `json:"providers"`
		Models    []adminapi.ModelHealth    `json:"models"`
	}
	if status != 200 || json.Unmarshal([]byte(body), &h) != nil || len(h.Providers) != 1 || h.Providers[0].Name != "local" ||
		!h.Providers[0].Credential || h.Providers[0].Health != "unknown" || len(h.Models) != 1 || h.Models[0].Providers[0] != "local" {
		t.Fatalf("health: %d %s", status, body)
	}
	a.gw.SetHealth(map[string]bool{"local": false})
	_, _, body = a.do("GET", "/admin/v1/health", "", nil)
	if !strings.Contains(body, `"health": "unhealthy"`) {
		t.Fatalf("after a health reading: %s", body)
	}
}
