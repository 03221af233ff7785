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

// applyTwice applies a configuration with more (YAML lines) added, then one with then added, as
// a start and a reload would, and returns the gateway.
func applyTwice(t *testing.T, first, then string) *Gateway {
	t.Helper()
	configtest.ClearEnv(t)
	load := func(more string) *config.Config {
		cfg, err := config.Load(configtest.Write(t, `
providers: [{name: p, type: openai, base_url: "http://127.0.0.1:1/v1"}]
models: [{id: m, providers: [{provider: p, model: x}], pricing: {prompt: "0.000001"}}]
`+more))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	g := New(Options{Log: log, Store: st, XDS: xds.New(log), Ext: extproc.NewServer(log, extproc.Compile(&ir.Gateway{}, nil), nil)})
	t.Cleanup(g.Close)
	if err := g.ApplyConfig(t.Context(), load(first)); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplyConfig(t.Context(), load(then)); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestFastLaneChangesOnRestartOnly: a reload that turns routing.fast_lane over keeps the running
// value (Envoy takes the listener and routes in two pushes; a request between them would be
// answered through a filter its route does not run and go unbilled).
func TestFastLaneChangesOnRestartOnly(t *testing.T) {
	g := applyTwice(t, "routing: {fast_lane: true}\n", "routing: {fast_lane: false}\n")
	if !g.cfg.Routing.FastLane {
		t.Fatal("a reload turned the fast lane off under running requests")
	}
}

// TestTracingChangesOnRestartOnly: a reload that changes tracing: keeps the running section, in
// Envoy's tracer as in ext_proc's exporter (made once, at start): one collector, one rate.
func TestTracingChangesOnRestartOnly(t *testing.T) {
	g := applyTwice(t, `tracing: {otlp_endpoint: "http://collector:4317", sample_rate: 0.5}`+"\n", `tracing: {otlp_endpoint: "http://other:4317", sample_rate: 1}`+"\n")
	if tr := g.lastIR.Tracing; tr == nil || tr.Host != "collector" || tr.SampleRate != 0.5 {
		t.Fatalf("after the reload Envoy's tracer is %+v: want the running one", tr)
	}
}
