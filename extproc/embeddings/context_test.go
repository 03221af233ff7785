package embeddings

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// An input over the model's context_length is refused before any hold or provider; one at it
// passes; a model without context_length takes any.
func TestContextLength(t *testing.T) {
	emb := []string{ir.KindEmbeddings}
	rt := core.Compile(&ir.Gateway{
		Providers: []ir.Provider{{Name: "oa", Type: ir.ProviderTypeOpenAI, Host: "127.0.0.1", Port: 1, BasePath: "/v1"}},
		Models: []ir.Model{
			{ID: "small", ContextLength: 16, OutputModalities: emb, Targets: []ir.Target{{Provider: "oa", Model: "te3"}}},
			{ID: "open", OutputModalities: emb, Targets: []ir.Target{{Provider: "oa", Model: "te3"}}},
		},
		Routes: []ir.Route{{ID: "route:r", Rule: ir.RulePriorityFallback, Models: []string{"small", "open"}, Status: ir.RouteActive}},
	}, nil)
	ids := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("7,", n), ",") + "]" }
	words := func(n int) string { return `"` + strings.TrimSpace(strings.Repeat(" word", n)) + `"` } // one token a word (o200k_base)
	check := func(body string) string {
		req, e := parse([]byte(body))
		if e != nil {
			t.Fatalf("parse %s: %s", body, e.Message)
		}
		if _, e = planFor(rt, req); e != nil {
			return e.Code + ": " + e.Message
		}
		return ""
	}
	for body, want := range map[string]string{
		`{"model":"small","input":[` + ids(3) + `,` + ids(16) + `,` + ids(17) + `]}`: "invalid_request: input[2] is 17 tokens; model small takes at most 16 per input: split it or shorten it",
		`{"model":"small","input":` + ids(17) + `}`:                                  "invalid_request: input is 17 tokens; model small takes at most 16 per input",
		`{"model":"small","input":["hi",` + words(16) + `,` + words(40) + `]}`:       "invalid_request: input[2] is 40 tokens; model small takes at most 16 per input",
		`{"model":"route:r","input":[` + words(17) + `]}`:                            "invalid_request: input[0] is 17 tokens; model small takes at most 16 per input",
		// At the limit (the input's own tokens, without the special tokens a provider may add).
		`{"model":"small","input":[` + ids(16) + `,` + ids(1) + `]}`: "",
		`{"model":"small","input":[` + words(16) + `]}`:              "",
		`{"model":"open","input":[` + ids(50000) + `]}`:              "",
		// Text beyond maxCounted bytes is counted up to it: a lower bound, said as one.
		`{"model":"small","input":` + words(maxCounted/5+100) + `}`: "invalid_request: input is over 209715 tokens; model small takes at most 16 per input",
	} {
		if got := check(body); !strings.HasPrefix(got, want) || (want == "") != (got == "") {
			t.Errorf("%.80s: got %q, want %q", body, got, want)
		}
	}
}
