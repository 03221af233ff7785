package extproc

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

func TestCompile(t *testing.T) {
	g := testGateway()
	bad := keyRecord("key_badhash", testSecret(9), false)
	bad.Hash = "zz" + bad.Hash[2:]
	short := keyRecord("key_short", testSecret(10), false)
	short.Hash = short.Hash[:62]
	rt := core.Compile(g, []store.Key{
		keyRecord("key_valid", validSecret, false),
		keyRecord("key_revoked", revokedSecret, true),
		bad, short,
	})
	if len(rt.Keys) != 1 {
		t.Fatalf("compiled %d keys, want 1 (revoked and undecodable hashes skipped)", len(rt.Keys))
	}
	k := rt.Keys[store.HashKey(validSecret)]
	if k == nil || k.ID != "key_valid" || k.Account != "acct-key_valid" {
		t.Fatalf("valid key compiled as %+v", k)
	}
	if rt.Keys[store.HashKey(revokedSecret)] != nil {
		t.Error("revoked key compiled")
	}
	if len(rt.Models) != len(g.Models) || len(rt.Providers) != len(g.Providers) {
		t.Errorf("compiled %d models, %d providers; want %d, %d", len(rt.Models), len(rt.Providers), len(g.Models), len(g.Providers))
	}
	if m := rt.Models["gpt"]; m == nil || !m.Carries("openai", "temperature") || m.Carries("openai", "top_k") {
		t.Errorf("gpt parameters = %+v", m.Params)
	}
	if m := rt.Models["free"]; m == nil || !m.Carries("local", "top_k") {
		t.Errorf("free parameters = %+v, want everything to pass", m.Params)
	}
	if p := rt.Providers["groq"]; p == nil || p.APIKey != "gsk-groq-secret" || p.BasePath != "/openai/v1" {
		t.Errorf("groq provider = %+v", p)
	}
}

// TestParameterRule: an adapter's parameters, narrowed by the model's or the provider entry's
// list; the catalog shows what every provider of the model carries.
func TestParameterRule(t *testing.T) {
	g := testGateway()
	g.Providers = append(g.Providers,
		ir.Provider{Name: "claude", Type: ir.ProviderTypeAnthropic, Host: "api.anthropic.com", Port: 443, TLS: true, BasePath: "/v1"},
		ir.Provider{Name: "gem", Type: ir.ProviderTypeGemini, Host: "g.example", Port: 443, TLS: true, BasePath: "/v1beta"})
	g.Models = append(g.Models,
		ir.Model{ID: "mixed", Targets: []ir.Target{{Provider: "local", Model: "a"}, {Provider: "claude", Model: "b"}}},
		ir.Model{ID: "listed", Targets: []ir.Target{{Provider: "local", Model: "a"}, {Provider: "gem", Model: "c", SupportedParameters: []string{"temperature", "seed", "top_k"}}},
			SupportedParameters: []string{"temperature", "top_p", "top_k"}})
	rt := core.Compile(g, nil)
	cases := []struct {
		model, provider  string
		carried, dropped []string
	}{
		// OpenAI-shaped, no list: everything, unknown fields included
		{"free", "local", []string{"temperature", "seed", "top_k", "user", "anything"}, nil},
		// OpenAI-shaped, a list: only the list (and user)
		{"gpt", "openai", []string{"temperature", "max_tokens", "tools", "user", "stream_options"}, []string{"seed", "top_k"}},
		// Anthropic, no list: what the adapter translates
		{"mixed", "claude", []string{"temperature", "top_p", "stop", "tools", "user", "max_tokens", "n", "response_format"}, []string{"seed", "logit_bias", "top_k", "reasoning_effort"}},
		// Gemini, its own list: the list within what it translates; user it cannot carry
		{"listed", "gem", []string{"temperature", "seed"}, []string{"top_k", "top_p", "user"}},
		{"listed", "local", []string{"temperature", "top_p", "top_k", "user"}, []string{"seed"}},
	}
	for _, c := range cases {
		m := rt.Models[c.model]
		for _, f := range c.carried {
			if !m.Carries(c.provider, f) {
				t.Errorf("%s on %s drops %s", c.model, c.provider, f)
			}
		}
		for _, f := range c.dropped {
			if m.Carries(c.provider, f) {
				t.Errorf("%s on %s carries %s", c.model, c.provider, f)
			}
		}
	}
	for id, want := range map[string]string{
		"free":   "frequency_penalty,logit_bias,logprobs,max_completion_tokens,max_tokens,n,parallel_tool_calls,presence_penalty,reasoning_effort,response_format,seed,stop,temperature,tool_choice,tools,top_logprobs,top_p",
		"gpt":    "max_tokens,temperature,tools",                                                                                  // the list, on both providers
		"mixed":  "max_completion_tokens,max_tokens,parallel_tool_calls,response_format,stop,temperature,tool_choice,tools,top_p", // n: Anthropic takes only 1
		"listed": "temperature",
	} {
		if got := strings.Join(entry(rt.Models[id], true).SupportedSamplingParameters, ","); got != want {
			t.Errorf("catalog %s: supported_sampling_parameters %s, want %s", id, got, want)
		}
	}
}

// TestPricedAs: the catalog model that prices usage a provider reports on a model by its own
// name: one this provider serves under that name, else one a provider of the same type serves
// under it, the first of the configuration either way; media models never.
func TestPricedAs(t *testing.T) {
	g := testGateway()
	g.Providers = append(g.Providers, ir.Provider{Name: "claude", Type: ir.ProviderTypeAnthropic, Host: "api.anthropic.com", Port: 443, TLS: true, BasePath: "/v1", NeedsKey: true, APIKey: "k"})
	g.Models = append(g.Models,
		ir.Model{ID: "opus-groq", Targets: []ir.Target{{Provider: "groq", Model: "opus"}}},
		ir.Model{ID: "opus-local", Targets: []ir.Target{{Provider: "local", Model: "opus"}}},
		ir.Model{ID: "opus-local-2", Targets: []ir.Target{{Provider: "local", Model: "opus"}}},
		ir.Model{ID: "video", Family: "V1", Targets: []ir.Target{{Provider: "claude", Model: "clip"}}},
	)
	rt := core.Compile(g, nil)
	for _, c := range []struct{ provider, upstream, want string }{
		{"local", "opus", "opus-local"},  // this provider's, the first configured
		{"groq", "opus", "opus-groq"},    // this provider's
		{"openai", "opus", "opus-groq"},  // none here: the first of the same type (groq before local)
		{"openai", "qwen2.5:7b", "free"}, // local serves it, local is of type openai
		{"claude", "opus", ""},           // no anthropic provider serves it
		{"claude", "clip", ""},           // a video model prices tasks, not tokens
		{"gone", "opus", ""},             // a provider no longer configured
	} {
		got := ""
		if m := rt.PricedAs(c.provider, c.upstream); m != nil {
			got = m.ID
		}
		if got != c.want {
			t.Errorf("pricedAs(%s, %s) = %q, want %q", c.provider, c.upstream, got, c.want)
		}
	}
}
