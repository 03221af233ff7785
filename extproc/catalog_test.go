package extproc

import (
	"encoding/json"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// A model a demo provider may answer says so in the catalog; the spec's fields stay as they are.
func TestCatalogLabelsDemoModels(t *testing.T) {
	g := &ir.Gateway{
		Providers: []ir.Provider{
			{Name: "demo", Type: ir.ProviderTypeDemo, Host: "127.0.0.1", Port: 1},
			{Name: "openai", Type: ir.ProviderTypeOpenAI, Host: "127.0.0.1", Port: 2},
		},
		Models: []ir.Model{
			{ID: "demo-chat", Name: "Demo chat", Targets: []ir.Target{{Provider: "demo", Model: "demo-chat"}}},
			{ID: "mixed", Targets: []ir.Target{{Provider: "openai", Model: "gpt"}, {Provider: "demo", Model: "demo-chat"}}},
			{ID: "real", Name: "Real", Targets: []ir.Target{{Provider: "openai", Model: "gpt"}}},
		},
	}
	rt := core.Compile(g, nil)
	for _, tc := range []struct{ id, owner, name string }{
		{"demo-chat", "tollway-demo", "Demo chat (demo: canned answers, no LLM)"},
		{"mixed", "tollway-demo", "mixed (demo: canned answers, no LLM)"},
		{"real", "tollway", "Real"},
	} {
		e := entry(rt.Models[tc.id], true)
		if e.OwnedBy != tc.owner || e.Name != tc.name || e.ID != tc.id {
			t.Errorf("%s: owned_by %q name %q, want %q %q", tc.id, e.OwnedBy, e.Name, tc.owner, tc.name)
		}
		raw, _ := json.Marshal(e)
		var fields map[string]any
		_ = json.Unmarshal(raw, &fields)
		for _, f := range []string{"id", "name", "input_modalities", "output_modalities", "context_length", "max_output_length",
			"supported_sampling_parameters", "supported_features", "pricing", "is_ready", "is_free", "object", "owned_by"} {
			if _, ok := fields[f]; !ok {
				t.Errorf("%s: catalog entry lacks %q: %s", tc.id, f, raw)
			}
		}
	}
}
