package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/test/fakeupstream"
)

// TestConsole drives the web console in a real browser (Debian's chromium, headless, through
// playwright-core) against a real gateway: test/console/console.mjs signs in with the admin
// token, creates a key and a route through the pages, sends a chat request with the OpenAI Node
// SDK, pauses the route, rotates and revokes the key, and checks the key secret reached the
// browser in exactly one response; without an admin token it checks the console opens with no
// sign-in. With the admin token the store is seeded first (seedConsoleStore: long labels, many
// models, long route names, 51 usage records over 16 days, x402 payments) and console.mjs
// opens every page at 1280x800 and 390x844, asserting that no page scrolls sideways, no table
// cell leaves its table at 1280 and no date wraps past two lines, that route addresses open
// the route and unknown ones say so, and that the catalog's unit note names every unit it
// prices; screenshots go to test/out/console/.
func TestConsole(t *testing.T) {
	// Runs alone (no t.Parallel): it sets TOLLWAY_ADMIN_TOKEN in the process environment, which parallel tests would inherit.
	dir := filepath.Join(repoRoot, "test", "console")
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("chromium is not installed (%v): `make deps` installs it (apt-get install chromium)", err)
	}
	for _, mod := range []string{"playwright-core", "openai"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", mod)); err != nil {
			t.Fatalf("test/console's %s is not installed (%v): `make deps` installs it (npm ci in test/console)", mod, err)
		}
	}
	// drive runs console.mjs against g and returns its output.
	drive := func(t *testing.T, g *gateway, token string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "console.mjs")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			"TOLLWAY_CONSOLE_URL=http://"+g.Admin+"/console/",
			"TOLLWAY_ADMIN_TOKEN="+token,
			"TOLLWAY_BASE_URL="+g.BaseURL,
			"TOLLWAY_CONSOLE_ACCOUNT=acme",
			"TOLLWAY_CONSOLE_OUT="+filepath.Join(repoRoot, "test", "out", "console"),
			"CHROMIUM="+chromium,
		)
		out, err := cmd.CombinedOutput()
		t.Logf("node console.mjs:\n%s", out)
		if err != nil {
			t.Fatalf("the console test in chromium failed: %v", err)
		}
		if !strings.Contains(string(out), "console.mjs: PASS") {
			t.Fatal("console.mjs ended without PASS")
		}
		return string(out)
	}
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	config := catalog(fake.URL(), sdkPricing) + `routes:
  - name: file route
    rule: priority_fallback
    models: [gpt-4o-mini]
`
	// The admin-token run has what a busy gateway shows: media models priced per image and per
	// second, tiers, long ids and route names.
	busyConfig := fmt.Sprintf(`providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: minimax-hailuo-video-international, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: dashscope-intl-singapore, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: gemini-image, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: gpt-4o-mini
    name: GPT-4o mini
    providers: [{provider: fake, model: fake-llama-3}]
    %s
`, fake.URL(), fake.MiniMaxURL(), fake.DashScopeURL(), fake.GeminiURL(), sdkPricing)
	for _, m := range consoleChatModels {
		busyConfig += fmt.Sprintf("  - {id: %s, name: %q, providers: [{provider: fake, model: fake-llama-3}], pricing: %s}\n", m.id, m.name, m.pricing)
	}
	busyConfig += `  - id: hailuo-02-video-1080p-extended-duration
    name: MiniMax Hailuo 02 (1080p, 6 or 10 seconds)
    family: V1
    providers: [{provider: minimax-hailuo-video-international, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
  - {id: qwen-image-plus, name: Qwen Image Plus, family: I2, variant: standard, providers: [{provider: dashscope-intl-singapore, model: qwen-image-plus}], pricing: {request: "0.002", image: "0.03"}}
  - {id: gemini-2.5-flash-image-preview, name: Gemini 2.5 Flash Image, family: I3, variant: flash-2.5, providers: [{provider: gemini-image, model: gemini-2.5-flash-image}], pricing: {request: "0.001", image: "0.039", prompt: "0.0000003", completion: "0.0000025"}}
routes:
  - name: file route
    rule: priority_fallback
    models: [gpt-4o-mini]
  - name: Customer support escalations (EU west, premium tier)
    rule: priority_fallback
    models: [claude-3-5-sonnet-20241022-long-context-preview, gpt-4o-mini, mistral-large-2411-instruct, deepseek-r1-distill-qwen-32b]
`

	t.Run("admin token", func(t *testing.T) {
		const token = "e2e-console-token-8c41f0d7b2a95e36"
		// The CLI (accounts, usage) finds the token the way an operator's shell would.
		t.Setenv("TOLLWAY_ADMIN_TOKEN", token)
		dir := t.TempDir()
		seedConsoleStore(t, dir)
		g := startGatewayIn(t, dir, busyConfig+"admin: {token: \"${TOLLWAY_ADMIN_TOKEN}\"}\n", "FAKE_PROVIDER_KEY="+providerKey, "TOLLWAY_ADMIN_TOKEN="+token)
		out := drive(t, g, token)

		// The console's usage total is `tollway usage`'s, to the digit.
		m := regexp.MustCompile(`CONSOLE_USAGE_TOTAL_COST=(\S+) since=(\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatal("console.mjs did not report the usage total it saw")
		}
		cliOut, err := g.cli("usage", "--since", m[2])
		if err != nil {
			t.Fatal(err)
		}
		var total []string
		for _, line := range strings.Split(cliOut, "\n") {
			if strings.HasPrefix(line, "TOTAL") {
				total = strings.Fields(line)
			}
		}
		if len(total) < 6 || total[5] != m[1] {
			t.Fatalf("tollway usage TOTAL %v, want the console's cost %s\n%s", total, m[1], cliOut)
		}
	})

	t.Run("no admin token", func(t *testing.T) {
		// An empty TOLLWAY_ADMIN_TOKEN is no token, whatever the test's own environment holds.
		t.Setenv("TOLLWAY_ADMIN_TOKEN", "")
		g := startGateway(t, config, "FAKE_PROVIDER_KEY="+providerKey)
		if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
			t.Fatal(err)
		}
		drive(t, g, "")
	})
}

// consoleChatModels are the busy catalog's chat models beyond gpt-4o-mini: long ids, tiers, a
// free one, one priced per request.
var consoleChatModels = []struct{ id, name, pricing string }{
	{"claude-3-5-sonnet-20241022-long-context-preview", "Claude 3.5 Sonnet (long context preview)",
		`[{range_start: 0, range_end: 200000, prompt: "0.000003", completion: "0.000015", input_cache_read: "0.0000003"}, {range_start: 200000, range_end: null, prompt: "0.000006", completion: "0.0000225", input_cache_read: "0.0000006"}]`},
	{"mistral-large-2411-instruct", "Mistral Large 24.11", `{prompt: "0.000002", completion: "0.000006"}`},
	{"deepseek-r1-distill-qwen-32b", "DeepSeek R1 Distill Qwen 32B", `{prompt: "0.00000012", completion: "0.00000018", request: "0.0005"}`},
	{"llama-3.3-70b-instruct-free-tier-community", "Llama 3.3 70B Instruct (free)", `{prompt: "0", completion: "0"}`},
	{"o3-mini-2025-01-31-high-reasoning-effort", "o3-mini (high)", `{prompt: "0.0000011", completion: "0.0000044", input_cache_read: "0.00000055"}`},
	{"text-embedding-3-large", "Embeddings, large", `{prompt: "0.00000013", completion: "0"}`},
}

// seedConsoleStore writes what a gateway in use holds into dir's store before it starts: the
// account acme the test uses, accounts with long ids, keys with long labels and
// allow-lists, and usage over the last 16 days by several keys, models and a route, plus x402
// payments settled, pending and unpaid (so the usage page has all its columns).
func seedConsoleStore(t *testing.T, dir string) {
	t.Helper()
	st, err := bbolt.Open(filepath.Join(dir, "tollway.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	longAccount := "research-and-development.emea@bigcorp-international.example"
	// Enough credits that the seeded usage leaves acme able to pay for the test's requests.
	for _, a := range []string{"acme", longAccount} {
		if _, err := st.CreateAccount(a, decimal.NewFromInt(1000)); err != nil {
			t.Fatal(err)
		}
	}
	limit := decimal.RequireFromString("250.5")
	allModels := []string{"gpt-4o-mini", "route:customer-support-escalations-eu-west-premium-tier"}
	for _, m := range consoleChatModels {
		allModels = append(allModels, m.id)
	}
	var keys []store.Key
	for _, k := range []struct {
		account string
		opts    store.KeyOptions
	}{
		{"acme", store.KeyOptions{Name: "Customer support bot, production, EU west region (shared with the escalations team)", MonthlyLimit: &limit, Models: allModels}},
		{"acme", store.KeyOptions{Name: "nightly-batch-summarisation-pipeline-for-the-data-warehouse-ingest"}},
		{"acme", store.KeyOptions{Name: "ci"}},
		{longAccount, store.KeyOptions{Name: "Notebook experiments", Models: allModels[:3]}},
	} {
		key, _, err := st.CreateKey(k.account, k.opts)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	models := []string{"gpt-4o-mini", consoleChatModels[0].id, consoleChatModels[1].id, consoleChatModels[2].id, consoleChatModels[4].id}
	now := time.Now().UTC()
	var recs []store.UsageRecord
	for i := range 48 {
		k := keys[i%len(keys)]
		rec := store.UsageRecord{
			RequestID: fmt.Sprintf("seed-%02d", i), KeyID: k.ID, Account: k.Account, Model: models[i%len(models)], Provider: "fake",
			PromptTokens: int64(1234567 + 1000*i), CompletionTokens: int64(98765 + 10*i), CachedTokens: int64(450000 + i),
			Cost: decimal.RequireFromString(fmt.Sprintf("1.23456789%02d", i)), Time: now.Add(-time.Duration(i%16) * 24 * time.Hour),
		}
		if i%3 == 0 {
			rec.Route = "route:customer-support-escalations-eu-west-premium-tier"
		}
		recs = append(recs, rec)
	}
	paid := store.PaidAccountPrefix + "video-generation-pay-per-request" // the endpoint's own account: no row
	for i, status := range []string{store.PaymentSettled, store.PaymentPending, store.PaymentUnpaid} {
		recs = append(recs, store.UsageRecord{
			RequestID: fmt.Sprintf("seed-paid-%d", i), KeyID: paid, Account: paid, Model: "hailuo-02-video-1080p-extended-duration", Provider: "minimax-hailuo-video-international",
			Cost: decimal.RequireFromString("0.5"), Time: now.Add(-time.Duration(i) * time.Hour),
			Payment: &store.Payment{Endpoint: "video-generation-pay-per-request", Scheme: "exact", Network: "eip155:8453",
				Asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", Payer: "0x52908400098527886E0F7030069857D2E4169EE7",
				Amount: "500000", AmountUSD: decimal.RequireFromString("0.5"), Status: status},
		})
	}
	for i, err := range st.SettleBatch(recs) {
		if err != nil {
			t.Fatalf("seed record %d: %v", i, err)
		}
	}
}
