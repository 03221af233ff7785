package ir

import (
	"errors"
	"strings"
	"testing"
)

func TestParseListen(t *testing.T) {
	tests := []struct {
		in      string
		want    Listener
		wantErr bool
	}{
		{in: "127.0.0.1:8080", want: Listener{Address: "127.0.0.1", Port: 8080}},
		{in: ":8080", want: Listener{Address: "0.0.0.0", Port: 8080}},
		{in: "[::1]:9000", want: Listener{Address: "::1", Port: 9000}},
		{in: "localhost:65535", want: Listener{Address: "localhost", Port: 65535}},
		{in: "127.0.0.1", wantErr: true},
		{in: "127.0.0.1:0", wantErr: true},
		{in: "127.0.0.1:65536", wantErr: true},
		{in: "127.0.0.1:http", wantErr: true},
		{in: "127.0.0.1:-1", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseListen(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseListen(%q) = %+v, want an error", tt.in, got)
			} else if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "listen.public") {
				t.Errorf("ParseListen(%q) error %q: want ErrInvalid naming listen.public", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseListen(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseProviderURL(t *testing.T) {
	tests := []struct {
		url     string
		want    Provider // endpoint fields only
		wantErr string   // substring of the error
	}{
		{url: "https://api.openai.com/v1", want: Provider{Host: "api.openai.com", Port: 443, TLS: true, BasePath: "/v1"}},
		{url: "https://api.groq.com/openai/v1", want: Provider{Host: "api.groq.com", Port: 443, TLS: true, BasePath: "/openai/v1"}},
		{url: "https://api.groq.com/openai/v1/", want: Provider{Host: "api.groq.com", Port: 443, TLS: true, BasePath: "/openai/v1"}},
		{url: "http://127.0.0.1:11434/v1", want: Provider{Host: "127.0.0.1", Port: 11434, BasePath: "/v1"}},
		{url: "http://localhost/v1", want: Provider{Host: "localhost", Port: 80, BasePath: "/v1"}},
		{url: "https://example.com:8443", want: Provider{Host: "example.com", Port: 8443, TLS: true, BasePath: ""}},
		{url: "http://[::1]:8000/v1", want: Provider{Host: "::1", Port: 8000, BasePath: "/v1"}},
		{url: "ftp://example.com/v1", wantErr: "absolute http(s) URL"},
		{url: "api.openai.com/v1", wantErr: "absolute http(s) URL"},
		{url: "https:///v1", wantErr: "absolute http(s) URL"},
		{url: "", wantErr: "absolute http(s) URL"},
		{url: "https://api.openai.com/v1?key=x", wantErr: "query"},
		{url: "https://api.openai.com/v1#frag", wantErr: "fragment"},
		{url: "https://user:pass@api.openai.com/v1", wantErr: "credentials"},
		{url: "https://api.openai.com:0/v1", wantErr: "bad port"},
		{url: "https://api.openai.com:99999/v1", wantErr: "bad port"},
	}
	for _, tt := range tests {
		p := Provider{Name: "prov"}
		err := ParseProviderURL(&p, tt.url)
		if tt.wantErr != "" {
			if err == nil {
				t.Errorf("ParseProviderURL(%q) = %+v, want an error", tt.url, p)
				continue
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), `"prov"`) {
				t.Errorf("ParseProviderURL(%q) error %q: want ErrInvalid naming the provider and %q", tt.url, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseProviderURL(%q): %v", tt.url, err)
			continue
		}
		tt.want.Name = "prov"
		if p != tt.want {
			t.Errorf("ParseProviderURL(%q) = %+v, want %+v", tt.url, p, tt.want)
		}
	}
}

func TestProviderHelpers(t *testing.T) {
	p := Provider{Name: "groq"}
	if p.ClusterName() != "provider.groq" {
		t.Errorf("ClusterName = %q", p.ClusterName())
	}
	for _, tt := range []struct {
		needs bool
		key   string
		ready bool
	}{{false, "", true}, {true, "", false}, {true, "k", true}, {false, "k", true}} {
		p := Provider{NeedsKey: tt.needs, APIKey: tt.key}
		if p.Ready() != tt.ready {
			t.Errorf("Ready(needs=%v key=%q) = %v, want %v", tt.needs, tt.key, p.Ready(), tt.ready)
		}
	}
	want := map[string]bool{ProviderTypeOpenAI: true, ProviderTypeDemo: true, ProviderTypeAnthropic: false, ProviderTypeGemini: false}
	for _, typ := range ProviderTypes() {
		if got := (&Provider{Type: typ}).SpeaksOpenAI(); got != want[typ] {
			t.Errorf("SpeaksOpenAI(%s) = %v, want %v", typ, got, want[typ])
		}
	}
}

func validGateway() *Gateway {
	return &Gateway{
		Listener: Listener{Address: "127.0.0.1", Port: 8080},
		Providers: []Provider{
			{Name: "openai", Type: ProviderTypeOpenAI, Host: "api.openai.com", Port: 443, TLS: true, BasePath: "/v1", CAFile: "/etc/ssl/certs/ca-certificates.crt"},
			{Name: "local_1", Type: ProviderTypeOpenAI, Host: "127.0.0.1", Port: 11434, BasePath: "/v1"},
		},
		Models: []Model{
			{ID: "gpt-4o-mini", Targets: []Target{{Provider: "openai", Model: "gpt-4o-mini"}, {Provider: "local_1", Model: "llama3.2"}}},
			{ID: "meta/llama:3", Targets: []Target{{Provider: "local_1", Model: "llama3"}}},
		},
	}
}

func TestValidateAccepts(t *testing.T) {
	if err := validGateway().Validate(); err != nil {
		t.Fatalf("Validate of a valid gateway: %v", err)
	}
	// An I3 image model answers chat too: it may share a route with chat models.
	g := validGateway()
	g.Providers = append(g.Providers, Provider{Name: "gemini", Type: ProviderTypeGemini, Host: "127.0.0.1", Port: 9, BasePath: "/v1beta"})
	g.Models = append(g.Models, Model{ID: "nano", Family: "I3", Variant: "flash-2.5", Targets: []Target{{Provider: "gemini", Model: "gemini-2.5-flash-image"}}})
	g.Routes = []Route{{ID: "route:talk", Name: "talk", Rule: RulePriorityFallback, Status: RouteActive, Models: []string{"gpt-4o-mini", "nano"}}}
	if err := g.Validate(); err != nil {
		t.Fatalf("a chat route with an I3 model: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(g *Gateway)
		want   []string // each must appear in the error
	}{
		{"no port", func(g *Gateway) { g.Listener.Port = 0 }, []string{"listen.public"}},
		{"tls without a CA bundle", func(g *Gateway) { g.Providers[0].CAFile = "" }, []string{`provider "openai"`, "ca_file"}},
		{"uppercase name", func(g *Gateway) { g.Providers[0].Name = "OpenAI" }, []string{`provider "OpenAI"`, "lowercase"}},
		{"empty name", func(g *Gateway) { g.Providers[0].Name = "" }, []string{`provider ""`}},
		{"name too long", func(g *Gateway) { g.Providers[0].Name = strings.Repeat("a", 64) }, []string{"max 63"}},
		{"duplicate provider", func(g *Gateway) { g.Providers[1].Name = "openai" }, []string{`provider "openai": defined twice`}},
		{"unknown family", func(g *Gateway) { g.Models[0].Family = "V9" }, []string{`family "V9" is unknown (supported: I1, I2, I2b, I3, V1, V2, V3)`}},
		{"variant without family", func(g *Gateway) { g.Models[0].Variant = "t2v" }, []string{`variant "t2v" needs a family`}},
		{"media family on a chat provider", func(g *Gateway) { g.Models[0].Family = "V1" }, []string{`family V1 is served by providers of type minimax`}},
		{"chat model on a media provider", func(g *Gateway) { g.Providers[1].Type = ProviderTypeMiniMax }, []string{`serves media models only: give the model its family`}},
		{"parameter list on a video model", func(g *Gateway) {
			g.Providers = append(g.Providers, Provider{Name: "hailuo", Type: ProviderTypeMiniMax, Host: "127.0.0.1", Port: 9, APIKey: "k"})
			g.Models = append(g.Models, Model{ID: "clip", Family: "V1", Targets: []Target{{Provider: "hailuo", Model: "m", SupportedParameters: []string{"prompt"}}}})
		}, []string{`model "clip": family V1 takes its own fields, which the catalog lists; remove supported_sampling_parameters`}},
		{"unknown type", func(g *Gateway) { g.Providers[1].Type = "cohere" }, []string{`provider "local_1": unknown type "cohere" (supported: openai, anthropic, gemini, demo, minimax, dashscope, kling)`}},
		{"no host", func(g *Gateway) { g.Providers[0].Host = "" }, []string{`provider "openai": base_url is required`}},
		{"no provider port", func(g *Gateway) { g.Providers[0].Port = 0 }, []string{`provider "openai": base_url is required`}},
		{"empty model id", func(g *Gateway) { g.Models[0].ID = "" }, []string{`model ""`}},
		{"route model id", func(g *Gateway) { g.Models[0].ID = "route:cheap" }, []string{`model "route:cheap"`, "route:"}},
		{"model id with space", func(g *Gateway) { g.Models[0].ID = "gpt 4" }, []string{`model "gpt 4"`}},
		{"duplicate model", func(g *Gateway) { g.Models[1].ID = "gpt-4o-mini" }, []string{`model "gpt-4o-mini": defined twice`}},
		{"no targets", func(g *Gateway) { g.Models[1].Targets = nil }, []string{`model "meta/llama:3": needs at least one provider`}},
		{"unknown target", func(g *Gateway) { g.Models[1].Targets[0].Provider = "ghost" }, []string{`model "meta/llama:3": provider "ghost" is not defined`}},
		{"no upstream model", func(g *Gateway) { g.Models[0].Targets[1].Model = "" }, []string{`provider "local_1" needs the upstream model name`}},
		{"route of chat and video models", func(g *Gateway) {
			g.Providers = append(g.Providers, Provider{Name: "hailuo", Type: ProviderTypeMiniMax, Host: "127.0.0.1", Port: 9, APIKey: "k"})
			g.Models = append(g.Models, Model{ID: "clip", Family: "V1", Targets: []Target{{Provider: "hailuo", Model: "MiniMax-Hailuo-02"}}})
			g.Routes = []Route{{ID: "route:mix", Name: "mix", Rule: RuleModeMapping, Status: RouteActive, Modes: map[string]string{"fast": "gpt-4o-mini", "balanced": "clip"}}}
		}, []string{`route "mix": its models must all answer one endpoint (chat, embeddings, video or image), not video (clip) and chat (gpt-4o-mini)`}},
		{"embeddings model on an anthropic provider", func(g *Gateway) {
			g.Providers = append(g.Providers, Provider{Name: "claude", Type: ProviderTypeAnthropic, Host: "127.0.0.1", Port: 9})
			g.Models = append(g.Models, Model{ID: "emb", OutputModalities: []string{"embeddings"}, Targets: []Target{{Provider: "claude", Model: "m"}}})
		}, []string{`model "emb": an embeddings model is served by providers of type openai, demo, gemini; provider "claude" is of type anthropic`}},
		{"route of chat and embeddings models", func(g *Gateway) {
			g.Models = append(g.Models, Model{ID: "emb", OutputModalities: []string{"embeddings"}, Targets: []Target{{Provider: "openai", Model: "text-embedding-3-small"}}})
			g.Routes = []Route{{ID: "route:mix", Name: "mix", Rule: RulePriorityFallback, Status: RouteActive, Models: []string{"emb", "gpt-4o-mini"}}}
		}, []string{`route "mix": its models must all answer one endpoint (chat, embeddings, video or image), not embeddings (emb) and chat (gpt-4o-mini)`}},
		{"several at once", func(g *Gateway) {
			g.Listener.Port = 0
			g.Providers[1].Type = "x"
			g.Models[0].Targets[0].Provider = "ghost"
			g.Models[1].ID = "route:y"
		}, []string{"listen.public", `unknown type "x"`, `provider "ghost"`, `model "route:y"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := validGateway()
			tt.mutate(g)
			err := g.Validate()
			if err == nil {
				t.Fatal("Validate accepted an invalid gateway")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if n := len(tt.want); tt.name == "several at once" {
				if lines := strings.Count(err.Error(), "\n") + 1; lines < n {
					t.Errorf("got %d problems in %q, want all %d reported at once", lines, err, n)
				}
			}
		})
	}
}

// TestAttemptFilter: only a provider a chat request may need rewriting at each attempt keeps the
// per-attempt filter on its own cluster.
func TestAttemptFilter(t *testing.T) {
	for _, tt := range []struct {
		typ, base      string
		direct, filter bool
	}{
		{ProviderTypeOpenAI, "/v1", true, false},
		{ProviderTypeDemo, "/v1", true, false},
		{ProviderTypeOpenAI, "/openai/v1", false, true}, // its path differs from the client's
		{ProviderTypeOpenAI, "", false, true},
		{ProviderTypeAnthropic, "/v1", false, true},
		{ProviderTypeGemini, "/v1beta", false, true},
		{ProviderTypeMiniMax, "", false, false}, // media only: task requests are already in its API
		{ProviderTypeDashScope, "", false, false},
		{ProviderTypeKling, "", false, false},
	} {
		p := Provider{Name: "p", Type: tt.typ, BasePath: tt.base}
		if p.DirectChat() != tt.direct || p.AttemptFilter() != tt.filter {
			t.Errorf("%s at %q: DirectChat %v AttemptFilter %v, want %v %v", tt.typ, tt.base, p.DirectChat(), p.AttemptFilter(), tt.direct, tt.filter)
		}
	}
}
