package embeddings

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

func planRuntime() *core.Runtime {
	emb := []string{ir.KindEmbeddings}
	return core.Compile(&ir.Gateway{
		Providers: []ir.Provider{
			{Name: "oa", Type: ir.ProviderTypeOpenAI, Host: "127.0.0.1", Port: 1, BasePath: "/v1"},
			{Name: "gm", Type: ir.ProviderTypeGemini, Host: "127.0.0.1", Port: 2, BasePath: "/v1beta", NeedsKey: true, APIKey: "k"},
			{Name: "nokey", Type: ir.ProviderTypeOpenAI, Host: "127.0.0.1", Port: 3, NeedsKey: true},
		},
		Models: []ir.Model{
			{ID: "emb", OutputModalities: emb, Targets: []ir.Target{{Provider: "oa", Model: "te3"}, {Provider: "gm", Model: "ge1"}, {Provider: "nokey", Model: "x"}}},
			{ID: "emb-gm", OutputModalities: emb, Targets: []ir.Target{{Provider: "gm", Model: "ge1"}}},
			{ID: "chat", Targets: []ir.Target{{Provider: "oa", Model: "gpt"}}},
		},
		Routes: []ir.Route{
			{ID: "route:r", Rule: ir.RulePriorityFallback, Models: []string{"emb", "emb-gm"}, Status: ir.RouteActive},
			{ID: "route:m", Rule: ir.RuleModeMapping, Modes: map[string]string{"fast": "emb-gm", "balanced": "emb"}, Status: ir.RouteActive},
		},
	}, nil)
}

func TestPlan(t *testing.T) {
	rt := planRuntime()
	plan := func(body string) (*plan, string) {
		req, e := parse([]byte(body))
		if e != nil {
			t.Fatalf("parse %s: %s", body, e.Message)
		}
		p, e := planFor(rt, req)
		if e != nil {
			return nil, e.Code + ": " + e.Message
		}
		return p, ""
	}
	if p, e := plan(`{"model":"emb","input":"x"}`); e != "" || p.cluster != ir.ModelChainCluster("emb") || p.attempts != 2 {
		t.Fatalf("model: %+v %s (the provider without its key is not in the chain)", p, e)
	}
	if p, e := plan(`{"model":"route:r","input":"x","route":{"provider":"gm"}}`); e != "" || p.cluster != ir.RouteChainCluster(p.route) || p.attempts != 3 || p.pinned != "" || len(p.models) != 2 {
		t.Fatalf("route (route.provider ignored): %+v %s", p, e)
	}
	if p, e := plan(`{"model":"route:m","input":"x","route_mode":"fast"}`); e != "" || p.cluster != ir.ModelChainCluster("emb-gm") || p.model.ID != "emb-gm" {
		t.Fatalf("mode route, fast: %+v %s", p, e)
	}
	if p, e := plan(`{"model":"route:m","input":"x"}`); e != "" || p.model.ID != "emb" {
		t.Fatalf("mode route, balanced by default: %+v %s", p, e)
	}
	if p, e := plan(`{"model":"emb","input":"x","route":{"provider":"gm"}}`); e != "" || p.cluster != "provider.gm" || p.pinned != "gm" || p.attempts != 1 {
		t.Fatalf("pinned: %+v %s", p, e)
	}
	if _, e := plan(`{"model":"emb","input":[[1]]}`); e != "" {
		t.Fatalf("token arrays to a chain with a provider on OpenAI's API: %s", e)
	}
	for body, want := range map[string]string{
		`{"model":"nope","input":"x"}`:                             "model_not_found: model \"nope\" is not in the catalog",
		`{"model":"chat","input":"x"}`:                             "model_not_found: model \"chat\" is a chat model, not an embeddings model: send it to POST /v1/chat/completions",
		`{"model":"route:none","input":"x"}`:                       "route_not_found",
		`{"model":"emb-gm","input":"x","route":{"provider":"oa"}}`: "provider_not_available: provider \"oa\" does not serve model \"emb-gm\" (it is served by gm)",
		`{"model":"emb","input":"x","route":{"provider":"nokey"}}`: "provider_not_available: provider \"nokey\" has no API key configured",
		// Every attempt on Gemini: what it cannot take is refused before any call.
		`{"model":"emb-gm","input":[[1]]}`:                                    `invalid_request: input as token arrays cannot be sent to model "emb-gm": its provider (Gemini) takes text only`,
		`{"model":"emb","input":[1],"route":{"provider":"gm"}}`:               `invalid_request: input as token arrays cannot be sent to model "emb": provider gm (Gemini) takes text only`,
		`{"model":"route:m","input":[1],"route_mode":"fast"}`:                 `invalid_request: input as token arrays cannot be sent to route route:m: its provider (Gemini)`,
		`{"model":"emb-gm","input":["a"` + strings.Repeat(`,"a"`, 100) + `]}`: `invalid_request: input has 101 items; model "emb-gm" on its provider (Gemini) embeds at most 100 per request`,
	} {
		if _, e := plan(body); !strings.HasPrefix(e, want) {
			t.Errorf("%s: got %q, want %q", body, e, want)
		}
	}
}
