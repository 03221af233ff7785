package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestConsole drives the web console in a real browser (Debian's chromium, headless, through
// playwright-core) against a real gateway: test/console/console.mjs signs in with the admin
// token, creates a key and a route through the pages, sends a chat request with the OpenAI Node
// SDK, pauses the route, rotates and revokes the key, and checks the key secret reached the
// browser in exactly one response; without an admin token it checks the console opens with no
// sign-in. Screenshots go to test/out/console/.
func TestConsole(t *testing.T) {
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

	t.Run("admin token", func(t *testing.T) {
		const token = "e2e-console-token-8c41f0d7b2a95e36"
		// The CLI (accounts, usage) finds the token the way an operator's shell would.
		t.Setenv("TOLLWAY_ADMIN_TOKEN", token)
		g := startGateway(t, config+"admin: {token: \"${TOLLWAY_ADMIN_TOKEN}\"}\n", "FAKE_PROVIDER_KEY="+providerKey, "TOLLWAY_ADMIN_TOKEN="+token)
		if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
			t.Fatal(err)
		}
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
