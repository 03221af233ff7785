package gateway

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// TestFastLaneChangesOnRestartOnly: a reload that turns routing.fast_lane over keeps the running
// value (Envoy takes the listener and routes in two pushes; a request between them would be
// answered through a filter its route does not run and go unbilled).
func TestFastLaneChangesOnRestartOnly(t *testing.T) {
	configtest.ClearEnv(t)
	load := func(fast string) *config.Config {
		cfg, err := config.Load(configtest.Write(t, `
providers: [{name: p, type: openai, base_url: "http://127.0.0.1:1/v1"}]
models: [{id: m, providers: [{provider: p, model: x}], pricing: {prompt: "0.000001"}}]
routing: {fast_lane: `+fast+`}
`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	g := New(Options{Log: log, Store: st, XDS: xds.New(log), Ext: extproc.NewServer(log, extproc.Compile(&ir.Gateway{}, nil), nil)})
	defer g.Close()
	if err := g.ApplyConfig(t.Context(), load("true")); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplyConfig(t.Context(), load("false")); err != nil {
		t.Fatal(err)
	}
	if !g.cfg.Routing.FastLane {
		t.Fatal("a reload turned the fast lane off under running requests")
	}
}
