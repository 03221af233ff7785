package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// newModel is a model the edited config file adds (the file's models section is its last).
const newModel = "  - id: gpt-4o-new\n    providers: [{provider: fake, model: fake-new}]\n"

// TestClusterConfigReload: three replicas started from the same config file. Replica A's file
// gains a model and A reloads (POST /admin/v1/reload): the model answers on B and C within
// 1 s. Then B reloads its own, older file: the catalog is shared, so the last reload wins for
// every replica: the model is gone on A and C too within 1 s (docs/deployment.md#many-replicas).
func TestClusterConfigReload(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	gs := startCluster(t, pgDSN(t), 3, catalog(fake.URL()), "FAKE_PROVIDER_KEY="+providerKey)
	a, b, c := gs[0], gs[1], gs[2]
	if err := a.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := a.newKey("acme")
	knowsKey(t, gs, key)
	for i, g := range gs {
		if answers(g, key, "gpt-4o-new", 200) {
			t.Fatalf("replica %d serves gpt-4o-new before any file names it", i+1)
		}
	}

	cfg, err := os.ReadFile(a.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	applied := func() int { return strings.Count(a.logs.String(), `msg="configuration applied"`) }
	appliedBefore := applied()
	if err := os.WriteFile(a.CfgPath, append(cfg, newModel...), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if code, out := a.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload A: %d %v", code, out)
	}
	if !answers(a, key, "gpt-4o-new", 200) {
		t.Fatal("A does not serve the model its reloaded file adds")
	}
	inForce(t, "a model added by A's reloaded file", t0, []*gateway{b, c}, func(g *gateway) bool { return answers(g, key, "gpt-4o-new", 200) })
	// A's config watch reloads the written file too (200 ms after the write, later on a loaded
	// machine): B's reload must come after it, or A's would be the last and rightly win.
	waitFor(t, "A's config watch to reload its written file", 10*time.Second, func() bool { return applied() >= appliedBefore+2 })

	t0 = time.Now()
	if code, out := b.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload B: %d %v", code, out)
	}
	inForce(t, "B's older file reloaded (the last reload wins)", t0, []*gateway{a, c}, func(g *gateway) bool {
		return !answers(g, key, "gpt-4o-new", 200)
	})
	if answers(b, key, "gpt-4o-new", 200) {
		t.Fatal("B serves a model its reloaded file does not name")
	}
}
