package admin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
)

// TestRouteRateLimits: POST /admin/v1/routes takes rate_limits; GET /admin/v1/routes/{id} and
// the list show them; PATCH changes only the rates it names (null removes one, "rate_limits":
// null both) and reaches the IR ext_proc enforces; bad values are 400 naming the field; a
// config route is 409 config_route.
func TestRouteRateLimits(t *testing.T) {
	a := newTestAdmin(t, "")
	if status, _, body := a.do("POST", "/admin/v1/routes", `{"name":"bot","rule":"priority_fallback","models":["gpt-4o-mini"],"rate_limits":{"requests_per_minute":2}}`, nil); status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	get := func() adminapi.RouteView { return getRoute(t, a, "route:bot") }
	rates := func(v adminapi.RouteView) string {
		raw, _ := json.Marshal(v.RateLimits)
		return string(raw)
	}
	if got := rates(get()); got != `{"requests_per_minute":2}` {
		t.Fatalf("created: %s", got)
	}
	var list adminapi.List[adminapi.RouteView]
	if _, _, body := a.do("GET", "/admin/v1/routes", "", nil); json.Unmarshal([]byte(body), &list) != nil || len(list.Data) != 1 || rates(list.Data[0]) != `{"requests_per_minute":2}` {
		t.Fatalf("list: %s", body)
	}
	for _, step := range []struct{ body, want, ir string }{
		{`{"rate_limits":{"tokens_per_minute":5000}}`, `{"requests_per_minute":2,"tokens_per_minute":5000}`, "2/5000"},
		{`{"rate_limits":{"requests_per_minute":null}}`, `{"tokens_per_minute":5000}`, "0/5000"},
		{`{"rate_limits":{"requests_per_minute":60,"tokens_per_minute":100000}}`, `{"requests_per_minute":60,"tokens_per_minute":100000}`, "60/100000"},
		{`{"rate_limits":null}`, `null`, "0/0"},
	} {
		status, _, body := a.do("PATCH", "/admin/v1/routes/route:bot", step.body, nil)
		var v adminapi.RouteView
		if status != 200 || json.Unmarshal([]byte(body), &v) != nil || rates(v) != step.want || rates(get()) != step.want {
			t.Fatalf("PATCH %s: %d %s; want rate_limits %s", step.body, status, body, step.want)
		}
		r := a.ext.TaskCatalog().(*core.Runtime).Routes["route:bot"]
		if irRates := fmt.Sprintf("%d/%d", r.RateLimits.RequestsPerMinute, r.RateLimits.TokensPerMinute); irRates != step.ir {
			t.Fatalf("PATCH %s: the IR has %s, want %s", step.body, irRates, step.ir)
		}
	}
	for _, bad := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"PATCH", "/admin/v1/routes/route:bot", `{"rate_limits":{"requests_per_minute":0}}`, 400, "rate_limits.requests_per_minute: 0 is out of range"},
		{"PATCH", "/admin/v1/routes/route:bot", `{"rate_limits":{"tokens_per_minute":-3}}`, 400, "rate_limits.tokens_per_minute: -3 is out of range"},
		{"PATCH", "/admin/v1/routes/route:bot", `{"rate_limits":{"requests_per_minute":1.5}}`, 400, "requests_per_minute"},
		{"PATCH", "/admin/v1/routes/route:bot", `{"rate_limits":{"requests_per_minute":"ten"}}`, 400, "requests_per_minute"},
		{"PATCH", "/admin/v1/routes/route:bot", `{"rate_limits":{"rpm":10}}`, 400, "rpm"},
		{"PATCH", "/admin/v1/routes/route:bot", `{}`, 400, "names no rate_limits"},
		{"PATCH", "/admin/v1/routes/route:nope", `{"rate_limits":null}`, 404, "route:nope"},
		{"GET", "/admin/v1/routes/route:nope", ``, 404, "route:nope"},
		{"POST", "/admin/v1/routes", `{"name":"b2","rule":"priority_fallback","models":["gpt-4o-mini"],"rate_limits":{"requests_per_minute":0}}`, 400, "rate_limits.requests_per_minute: 0 is out of range"},
	} {
		status, e, body := a.do(bad.method, bad.path, bad.body, nil)
		if status != bad.status || !strings.Contains(e.Error.Message, bad.want) {
			t.Errorf("%s %s %s: %d %s; want %d saying %q", bad.method, bad.path, bad.body, status, body, bad.status, bad.want)
		}
	}
	cfg := a.gw.Config()
	cfg.Routes = []adminapi.Route{{Name: "filed", Rule: "priority_fallback", Models: []string{"gpt-4o-mini"}, RateLimits: &store.RateLimits{RequestsPerMinute: &two}}}
	if err := a.gw.ApplyConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if status, e, _ := a.do("PATCH", "/admin/v1/routes/route:filed", `{"rate_limits":null}`, nil); status != 409 || e.Error.Code != "config_route" || !strings.Contains(e.Error.Message, "rate_limits") {
		t.Errorf("config route: %d %+v", status, e)
	}
	if v := getRoute(t, a, "route:filed"); v.RateLimits == nil || *v.RateLimits.RequestsPerMinute != 2 {
		t.Errorf("config route's rates: %+v", v.RateLimits)
	}
}

var two = int64(2)

// getRoute is GET /admin/v1/routes/{id}.
func getRoute(t *testing.T, a *testAdmin, id string) adminapi.RouteView {
	t.Helper()
	status, _, body := a.do("GET", "/admin/v1/routes/"+id, "", nil)
	var v adminapi.RouteView
	if status != 200 || json.Unmarshal([]byte(body), &v) != nil || v.ID != id {
		t.Fatalf("GET %s: %d %s", id, status, body)
	}
	return v
}
