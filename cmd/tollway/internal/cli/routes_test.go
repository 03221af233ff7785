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

// TestCLIRouteRates: routes create takes --rpm/--tpm as the route's rate_limits, routes
// set-limit PATCHes only the rates given (none: null), routes list shows them (none when a
// rate is not limited); a bad rate is refused before anything is sent.
func TestCLIRouteRates(t *testing.T) {
	configtest.ClearEnv(t)
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
		mu.Unlock()
		w.Header().Set("content-type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "GET /admin/v1/routes":
			fmt.Fprint(w, `{"data":[{"id":"route:bot","name":"bot","rule":"priority_fallback","models":["m"],"status":"active","rate_limits":{"requests_per_minute":600},"health":"healthy","usage":[]},`+
				`{"id":"route:free","name":"free","rule":"priority_fallback","models":["m"],"status":"active","health":"healthy","usage":[]}]}`)
		case "POST /admin/v1/routes":
			fmt.Fprint(w, `{}`)
		case "PATCH /admin/v1/routes/route:bot":
			fmt.Fprint(w, `{"id":"route:bot","name":"bot","rule":"priority_fallback","status":"active","rate_limits":{"tokens_per_minute":1000},"health":"healthy","usage":[]}`)
		default:
			w.WriteHeader(404)
			fmt.Fprint(w, `{"error":{"message":"no such path","code":"not_found"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(calls) == 0 {
			return ""
		}
		return calls[len(calls)-1]
	}

	if _, _, err := runCLI("routes", "create", "bot", "--rule", "priority_fallback", "--models", "m", "--rpm", "600", "--tpm", "100000", "--admin", srv.URL); err != nil {
		t.Fatal(err)
	}
	if got := last(); !strings.Contains(got, `"rate_limits":{"requests_per_minute":600,"tokens_per_minute":100000}`) {
		t.Fatalf("create sent %s", got)
	}
	out, _, err := runCLI("routes", "set-limit", "route:bot", "--rpm", "none", "--tpm", "1000", "--admin", srv.URL)
	if err != nil || !strings.Contains(out, "route:bot: rates none/1000 per minute") {
		t.Fatalf("set-limit: %v %s", err, out)
	}
	if got := last(); got != `PATCH /admin/v1/routes/route:bot {"rate_limits":{"requests_per_minute":null,"tokens_per_minute":1000}}` {
		t.Fatalf("set-limit sent %s", got)
	}
	out, _, err = runCLI("routes", "list", "--admin", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "RPM/TPM") || strings.Fields(lines[1])[5] != "600/none" || strings.Fields(lines[2])[5] != "none/none" {
		t.Fatalf("routes list:\n%s", out)
	}
	n := len(calls)
	for _, bad := range [][]string{
		{"routes", "set-limit", "route:bot", "--rpm", "0"},
		{"routes", "set-limit", "route:bot", "--tpm", "1.5"},
		{"routes", "set-limit", "route:bot"},
		{"routes", "create", "x", "--rule", "priority_fallback", "--models", "m", "--rpm", "lots"},
	} {
		if _, _, err := runCLI(append(bad, "--admin", srv.URL)...); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	if len(calls) != n {
		t.Fatalf("a refused command called the admin API: %v", calls[n:])
	}
}
