package catalog_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/test/golden"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
)

// input is a golden case: store records as the store keeps them, and what Env resolves.
type input struct {
	Public    string            `json:"public"`
	Secrets   map[string]string `json:"secrets"`  // provider name -> resolved credential
	CAFiles   []string          `json:"ca_files"` // ca_file paths that exist
	Providers []store.Provider  `json:"providers"`
	Models    []store.Model     `json:"models"`
	Routes    []store.Route     `json:"routes"`
}

// output is what the golden file shows: the IR, plus the parts it keeps out of its JSON
// (pricing, and whether each provider's credential resolved; never the secret).
type output struct {
	Gateway *ir.Gateway           `json:"gateway"`
	Pricing map[string]ir.Pricing `json:"pricing"`
	Ready   map[string]bool       `json:"ready"`
}

func env(in input) catalog.Env {
	return catalog.Env{
		SystemCA: "/etc/ssl/certs/system-bundle.pem",
		Secret:   func(p store.Provider) string { return in.Secrets[p.Name] },
		CheckFile: func(path string) error {
			for _, f := range in.CAFiles {
				if f == path {
					return nil
				}
			}
			return errors.New("no such file")
		},
	}
}

// TestGolden builds every testdata/in/<case>.yaml and compares the IR with
// testdata/out/<case>.ir.yaml, or the error with testdata/out/<case>.error.txt.
func TestGolden(t *testing.T) {
	for _, path := range golden.Inputs(t, "testdata/in/*.yaml") {
		name := golden.Case(path)
		t.Run(name, func(t *testing.T) {
			var in input
			if err := golden.DecodeYAML(path, &in); err != nil {
				t.Fatal(err)
			}
			g, err := catalog.Build(in.Public, store.Catalog{Providers: in.Providers, Models: in.Models, Routes: in.Routes}, env(in))
			if err != nil {
				if !errors.Is(err, ir.ErrInvalid) {
					t.Errorf("error %v does not wrap ir.ErrInvalid (the admin API maps it to 400)", err)
				}
				golden.Compare(t, filepath.Join("testdata", "out", name+".error.txt"), []byte(err.Error()+"\n"))
				return
			}
			out := output{Gateway: g, Pricing: map[string]ir.Pricing{}, Ready: map[string]bool{}}
			for _, m := range g.Models {
				out.Pricing[m.ID] = m.Pricing
			}
			for _, p := range g.Providers {
				out.Ready[p.Name] = p.Ready()
			}
			got, err := golden.YAML(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range in.Secrets {
				if s != "" && strings.Contains(string(got), s) {
					t.Fatalf("a secret is in the rendered IR")
				}
			}
			golden.Compare(t, filepath.Join("testdata", "out", name+".ir.yaml"), got)
		})
	}
	golden.Prune(t, "testdata/out/*")
}

func TestSecretsResolveThroughEnv(t *testing.T) {
	cat := store.Catalog{Providers: []store.Provider{{Name: "openai", Type: "openai", BaseURL: "https://api.openai.com/v1", APIKeyRef: "${OPENAI_API_KEY}"}}}
	g, err := catalog.Build("127.0.0.1:8080", cat, catalog.Env{SystemCA: "/ca.pem", Secret: func(p store.Provider) string { return "sk-" + p.Name }})
	if err != nil {
		t.Fatal(err)
	}
	if p := g.Providers[0]; p.APIKey != "sk-openai" || !p.NeedsKey || p.CAFile != "/ca.pem" {
		t.Fatalf("provider = %+v", p)
	}
	g, err = catalog.Build("127.0.0.1:8080", cat, catalog.Env{SystemCA: "/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Providers[0].Ready() {
		t.Fatal("a provider whose credential did not resolve is ready")
	}
}

func TestBadListenAddress(t *testing.T) {
	if _, err := catalog.Build("nope", store.Catalog{}, catalog.Env{}); err == nil || !errors.Is(err, ir.ErrInvalid) {
		t.Errorf("Build with a bad listen address: %v", err)
	}
}

func TestDemoProvider(t *testing.T) {
	calls := 0
	endpoint := func() (string, error) { calls++; return "127.0.0.1:4321", nil }
	cat := store.Catalog{
		Providers: []store.Provider{{Name: "play", Type: ir.ProviderTypeDemo}},
		Models:    []store.Model{{ID: "m", Providers: []store.ModelProvider{{Provider: "play", Model: "m"}}}},
	}
	g, err := catalog.Build("127.0.0.1:8080", cat, catalog.Env{Demo: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	want := ir.Provider{Name: "play", Type: ir.ProviderTypeDemo, Host: "127.0.0.1", Port: 4321, BasePath: "/v1"}
	if p := g.Providers[0]; p != want || calls != 1 {
		t.Errorf("demo provider %+v (endpoint asked %d times), want %+v", p, calls, want)
	}

	// No demo provider, no demo server.
	calls = 0
	if _, err := catalog.Build("127.0.0.1:8080", store.Catalog{Providers: []store.Provider{{Name: "o", Type: "openai", BaseURL: "http://127.0.0.1:1/v1"}}}, catalog.Env{Demo: endpoint}); err != nil || calls != 0 {
		t.Errorf("without a demo provider the endpoint was asked %d times (%v)", calls, err)
	}

	// A demo provider takes no URL or credential: its answers come only from Tollway.
	for _, sp := range []store.Provider{
		{Name: "play", Type: ir.ProviderTypeDemo, BaseURL: "http://127.0.0.1:1/v1"},
		{Name: "play", Type: ir.ProviderTypeDemo, APIKeyRef: "${KEY}"},
		{Name: "play", Type: ir.ProviderTypeDemo, CAFile: "/etc/ca.pem"},
	} {
		cat.Providers = []store.Provider{sp}
		_, err := catalog.Build("127.0.0.1:8080", cat, catalog.Env{Demo: endpoint})
		if !errors.Is(err, ir.ErrInvalid) || !strings.Contains(err.Error(), `provider "play": type demo takes no base_url`) {
			t.Errorf("%+v: %v", sp, err)
		}
	}

	// A server that cannot start fails the change, naming the provider.
	cat.Providers = []store.Provider{{Name: "play", Type: ir.ProviderTypeDemo}}
	_, err = catalog.Build("127.0.0.1:8080", cat, catalog.Env{Demo: func() (string, error) { return "", errors.New("no ports left") }})
	if err == nil || !strings.Contains(err.Error(), `provider "play": no ports left`) {
		t.Errorf("endpoint failure: %v", err)
	}
}

// TestKlingKeyPair: a Kling provider takes access_key and secret_key (not api_key) and is
// ready only when both resolve; other types refuse a key pair; a media model shows video.
func TestKlingKeyPair(t *testing.T) {
	pair := map[string][2]string{"kling": {"ak", "sk"}}
	e := catalog.Env{SystemCA: "/ca.pem", KeyPair: func(p store.Provider) (string, string) { return pair[p.Name][0], pair[p.Name][1] }}
	cat := store.Catalog{
		Providers: []store.Provider{{Name: "kling", Type: ir.ProviderTypeKling, BaseURL: "https://api-singapore.klingai.com", AccessKeyRef: "${AK}", SecretKeyRef: "${SK}"}},
		Models:    []store.Model{{ID: "kling-2", Family: "V3", Providers: []store.ModelProvider{{Provider: "kling", Model: "kling-v2-master"}}}},
	}
	g, err := catalog.Build("127.0.0.1:8080", cat, e)
	if err != nil {
		t.Fatal(err)
	}
	if p := g.Providers[0]; !p.Ready() || p.AccessKey != "ak" || p.SecretKey != "sk" {
		t.Fatalf("provider %+v ready %v", p, p.Ready())
	}
	if m := g.Models[0]; strings.Join(m.OutputModalities, ",") != "video" || strings.Join(m.SupportedFeatures, ",") != "video_generation" {
		t.Fatalf("model %+v", m)
	}
	pair["kling"] = [2]string{"ak", ""}
	if g, _ := catalog.Build("127.0.0.1:8080", cat, e); g.Providers[0].Ready() {
		t.Fatal("ready without its secret key")
	}
	bad := cat
	bad.Providers = []store.Provider{{Name: "kling", Type: ir.ProviderTypeKling, BaseURL: "https://k.example", APIKeyRef: "${K}"}}
	if _, err := catalog.Build("127.0.0.1:8080", bad, e); err == nil || !strings.Contains(err.Error(), "takes access_key and secret_key") {
		t.Fatalf("kling with api_key: %v", err)
	}
	bad.Providers = []store.Provider{{Name: "kling", Type: ir.ProviderTypeMiniMax, BaseURL: "https://k.example", AccessKeyRef: "${K}"}}
	if _, err := catalog.Build("127.0.0.1:8080", bad, e); err == nil || !strings.Contains(err.Error(), "access_key and secret_key are for type kling") {
		t.Fatalf("minimax with a key pair: %v", err)
	}
}

// TestEmbeddingsModel: a model whose output_modalities name embeddings shows the embeddings
// feature unless the config lists its own.
func TestEmbeddingsModel(t *testing.T) {
	cat := store.Catalog{
		Providers: []store.Provider{{Name: "o", Type: "openai", BaseURL: "http://127.0.0.1:1/v1"}},
		Models: []store.Model{
			{ID: "emb", OutputModalities: []string{"embeddings"}, Providers: []store.ModelProvider{{Provider: "o", Model: "te3"}}},
			{ID: "own", OutputModalities: []string{"embeddings"}, SupportedFeatures: []string{"matryoshka"}, Providers: []store.ModelProvider{{Provider: "o", Model: "te3"}}},
		},
	}
	g, err := catalog.Build("127.0.0.1:8080", cat, catalog.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if m := g.Models[0]; fmt.Sprint(m.SupportedFeatures) != "[embeddings]" || m.Kind() != ir.KindEmbeddings {
		t.Fatalf("model %+v", m)
	}
	if m := g.Models[1]; fmt.Sprint(m.SupportedFeatures) != "[matryoshka]" {
		t.Fatalf("model %+v", m)
	}
}
