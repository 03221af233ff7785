package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestClusterRoutePatchesKeepEachOther: two replicas on one database PATCH different rates of
// one route at the same moment, 40 rounds: A sets requests_per_minute, B tokens_per_minute.
// Both answer 200 and GET /admin/v1/routes/{id} on either shows both rates: the store merges
// each patch inside its own transaction (a merge in the handler, of the route each replica
// read before the other wrote, lost one).
func TestClusterRoutePatchesKeepEachOther(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	gs := startCluster(t, pgDSN(t), 2, catalog(fake.URL()), "FAKE_PROVIDER_KEY="+providerKey)
	a, b := gs[0], gs[1]
	if code, out := a.adminJSON("POST", "/admin/v1/routes", map[string]any{"name": "night", "rule": "priority_fallback", "models": []string{"gpt-4o-mini"}}); code != 201 && code != 200 {
		t.Fatalf("create route: %d %v", code, out)
	}
	const path = "/admin/v1/routes/route:night"
	lost := 0 // rounds that lost a change
	for round := range 40 {
		if code, out := a.adminJSON("PATCH", path, map[string]any{"rate_limits": nil}); code != 200 {
			t.Fatalf("round %d: PATCH rate_limits null: %d %v", round, code, out)
		}
		rpm, tpm := round+1, round+1000
		patches := []struct {
			g    *gateway
			body string
		}{
			{a, fmt.Sprintf(`{"rate_limits": {"requests_per_minute": %d}}`, rpm)},
			{b, fmt.Sprintf(`{"rate_limits": {"tokens_per_minute": %d}}`, tpm)},
		}
		answers := make([]string, len(patches))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, p := range patches {
			wg.Go(func() {
				<-start
				answers[i] = patchRoute(p.g, path, p.body)
			})
		}
		close(start)
		wg.Wait()
		for i, ans := range answers {
			if !strings.HasPrefix(ans, "200 ") {
				t.Fatalf("round %d: PATCH on replica %d: %s", round, i+1, ans)
			}
		}
		want := map[string]any{"requests_per_minute": float64(rpm), "tokens_per_minute": float64(tpm)}
		for i, g := range gs {
			code, rt := g.adminJSON("GET", path, nil)
			if code != 200 {
				t.Fatalf("round %d: GET on replica %d: %d %v", round, i+1, code, rt)
			}
			if got := fmt.Sprint(rt["rate_limits"]); got != fmt.Sprint(want) {
				lost++
				t.Logf("round %d: replica %d shows rate_limits %s, want %s", round, i+1, got, fmt.Sprint(want))
				break
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of 40 rounds lost one of two concurrent PATCHes that both answered 200", lost)
	}
}

// patchRoute PATCHes body to g's admin API at path and says "status body" (or the error), from
// any goroutine.
func patchRoute(g *gateway, path, body string) string {
	req, err := http.NewRequest("PATCH", "http://"+g.Admin+path, strings.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, raw)
}
