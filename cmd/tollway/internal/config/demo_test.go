package config

import (
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/xds/ir"
)

func TestLoadDemoConfig(t *testing.T) {
	configtest.ClearEnv(t)
	c, err := LoadDemo()
	if err != nil {
		t.Fatalf("LoadDemoConfig: %v", err)
	}
	if !c.demo || c.path != "" || c.Store.Path != "data/demo.db" || !c.Billing.Enabled {
		t.Errorf("demo config: demo %v path %q store %q billing %v; want its own store, billing on", c.demo, c.path, c.Store.Path, c.Billing.Enabled)
	}
	def, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Path == def.Store.Path || c.Listen != def.Listen {
		t.Errorf("demo store %q must differ from the default's %q, and the listeners %+v match it %+v (the CLI finds the admin API without flags)",
			c.Store.Path, def.Store.Path, c.Listen, def.Listen)
	}
	g, err := c.catalogIR()
	if err != nil {
		t.Fatalf("the demo config does not compile: %v", err)
	}
	if p := irProvider(t, g, "demo"); p.Type != ir.ProviderTypeDemo || !p.Ready() {
		t.Errorf("demo provider %+v", p)
	}
	if len(g.Routes) != 1 || g.Routes[0].Rule != ir.RulePriorityFallback || g.Routes[0].Models[len(g.Routes[0].Models)-1] != "demo-chat" {
		t.Errorf("routes %+v: want one fallback route ending at demo-chat", g.Routes)
	}
	for _, m := range g.Models {
		if m.Pricing.IsFree() {
			t.Errorf("model %s is free: the spend-limit example needs prices", m.ID)
		}
	}

	// A reload reads the demo config again, environment overrides included.
	t.Setenv("TOLLWAY_STORE_PATH", "/tmp/elsewhere.db")
	again, err := c.Reread()
	if err != nil || !again.demo || again.Store.Path != "/tmp/elsewhere.db" {
		t.Fatalf("reread: %+v, %v", again, err)
	}
}

// A production configuration never serves demo answers: only a config that names type demo has
// a demo provider.
func TestDefaultConfigHasNoDemoProvider(t *testing.T) {
	configtest.ClearEnv(t)
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Providers {
		if p.Type == ir.ProviderTypeDemo {
			t.Errorf("the embedded default config has a demo provider %q", p.Name)
		}
	}
	again, err := c.Reread()
	if err != nil || again.demo {
		t.Errorf("reread of the default: demo %v, %v", again.demo, err)
	}
}
