package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
)

// cliKey is a key as `tollway keys list --json` prints it.
type cliKey struct {
	ID             string           `json:"id"`
	Account        string           `json:"account"`
	MonthlyLimit   *decimal.Decimal `json:"monthly_limit"`
	SpentThisMonth *decimal.Decimal `json:"spent_this_month"`
	Models         []string         `json:"models"`
}

// listKey is account's one key from `tollway keys list --json`.
func (g *gateway) listKey(account string) cliKey {
	g.t.Helper()
	out, err := g.cli("keys", "list", "--json")
	var list struct{ Data []cliKey }
	if err != nil || json.Unmarshal([]byte(out), &list) != nil {
		g.t.Fatalf("keys list --json: %v\n%s", err, out)
	}
	for _, k := range list.Data {
		if k.Account == account {
			return k
		}
	}
	g.t.Fatalf("no key of %s in\n%s", account, out)
	return cliKey{}
}

// TestCLIKeyLimits: the operator sees a key's monthly limit, spend this month and allowed models
// with `tollway keys list`, and changes them with `keys set-limit` and `keys set-models` (only
// the admin API and console could): a limit under what the key spent refuses its next request
// with 403 spend_limit_exceeded, none lifts it; an allow-list without the model refuses it with
// 403 model_not_allowed, all lifts it; each command leaves the other setting as it was.
func TestCLIKeyLimits(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, "billing: {enabled: true}\n"+catalog(fake.URL(), `pricing: {request: "0.001", prompt: "0.000001", completion: "0.000002"}`), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	const hi = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	ok := func(what string) {
		t.Helper()
		resp := g.chat(ctx, key, hi)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", what, resp.StatusCode)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := g.cli(args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ok("first request")
	k := g.listKey("acme")
	_, recorded := g.recordsByRequest("acme")
	if k.MonthlyLimit != nil || len(k.Models) != 0 || k.SpentThisMonth == nil || !k.SpentThisMonth.Equal(recorded) || recorded.IsZero() {
		t.Fatalf("after one request: %+v, recorded %s", k, recorded)
	}
	table := run("keys", "list")
	if !strings.Contains(table, "LIMIT") || !strings.Contains(table, " none ") || !strings.Contains(table, " "+recorded.String()+" ") || !strings.Contains(table, " all ") {
		t.Fatalf("keys list does not show limit none, spent %s and models all:\n%s", recorded, table)
	}

	// A limit under what was spent: the next request is refused.
	if out := run("keys", "set-limit", k.ID, "0.001"); !strings.Contains(out, "monthly limit 0.001 USD, spent "+recorded.String()+" this month") {
		t.Fatalf("set-limit printed %q", out)
	}
	wantError(t, g.chat(ctx, key, hi), 403, "spend_limit_exceeded")
	if k = g.listKey("acme"); k.MonthlyLimit == nil || k.MonthlyLimit.String() != "0.001" || len(k.Models) != 0 {
		t.Fatalf("after set-limit: %+v", k)
	}
	run("keys", "set-limit", k.ID, "none")
	ok("after set-limit none")

	// An allow-list without the model: refused; the limit set meanwhile stays.
	run("keys", "set-models", k.ID, "other-model", "route:other")
	wantError(t, g.chat(ctx, key, hi), 403, "model_not_allowed")
	run("keys", "set-limit", k.ID, "5")
	if k = g.listKey("acme"); k.MonthlyLimit == nil || k.MonthlyLimit.String() != "5" || strings.Join(k.Models, ",") != "other-model,route:other" {
		t.Fatalf("set-limit changed the models or set-models the limit: %+v", k)
	}
	run("keys", "set-models", k.ID, "all")
	ok("after set-models all")
	if k = g.listKey("acme"); k.MonthlyLimit == nil || k.MonthlyLimit.String() != "5" || len(k.Models) != 0 {
		t.Fatalf("after set-models all: %+v", k)
	}
	_, recorded = g.recordsByRequest("acme")
	if !k.SpentThisMonth.Equal(recorded) {
		t.Fatalf("spent_this_month %s, records %s", k.SpentThisMonth, recorded)
	}
	// A bad amount is refused before anything is sent; the gateway names an unknown key.
	if _, err := g.cli("keys", "set-limit", k.ID, "five"); err == nil || !strings.Contains(err.Error(), `"five" is not a decimal amount`) {
		t.Errorf("set-limit five: %v", err)
	}
	if _, err := g.cli("keys", "set-limit", "key_0000000000000000", "5"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("set-limit of an unknown key: %v", err)
	}
}
