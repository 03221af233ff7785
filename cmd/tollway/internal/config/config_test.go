package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
)

const fullConfig = `
listen:
  public: 0.0.0.0:18080
  admin: "[::1]:19090"
store:
  path: /var/lib/tollway/t.db
envoy:
  bin: /usr/local/bin/envoy
  log_level: debug
  drain_timeout: 3s
log:
  level: warn
providers:
  - name: openai
    type: openai
    base_url: https://api.openai.com/v1
    api_key: "${TOLLWAY_TEST_OPENAI_KEY}"
  - name: groq
    type: openai
    base_url: https://api.groq.com/openai/v1
    api_key: gsk-inline-literal-secret
  - name: local
    type: openai
    base_url: http://127.0.0.1:11434/v1
models:
  - id: gpt-4o-mini
    name: GPT-4o mini
    providers:
      - {provider: openai, model: gpt-4o-mini}
      - {provider: local, model: llama3.2}
    supported_sampling_parameters: [temperature, top_p]
    pricing: {prompt: "0.00000015", completion: "0.0000006"}
  - id: llama-70b
    providers: [{provider: groq, model: llama-3.3-70b-versatile}]
`

func TestLoadConfigEmbeddedDefault(t *testing.T) {
	configtest.ClearEnv(t)
	c, err := Load("")
	if err != nil {
		t.Fatalf("Load(\"\"): %v", err)
	}
	if c.Listen.Public != "127.0.0.1:8080" || c.Listen.Admin != "127.0.0.1:9090" || c.Store.Path != "data/tollway.db" {
		t.Errorf("listen/store = %+v %+v", c.Listen, c.Store)
	}
	if c.Envoy.DrainTimeout != 10*time.Second || c.Envoy.LogLevel != "warning" || c.Log.Level != "info" {
		t.Errorf("defaults not applied: envoy %+v log %+v", c.Envoy, c.Log)
	}
	if len(c.Providers) == 0 || len(c.Models) == 0 {
		t.Fatalf("embedded default has %d providers, %d models; want some of each", len(c.Providers), len(c.Models))
	}
	for _, p := range c.Providers {
		if p.APIKey != "" && !envRef.MatchString(p.APIKey) {
			t.Errorf("embedded default provider %s carries an inline secret; use ${VAR}", p.Name)
		}
	}
	if c.path != "" {
		t.Errorf("path = %q for the embedded default", c.path)
	}
	if _, err := c.catalogIR(); err != nil {
		t.Errorf("embedded default does not compile to IR: %v", err)
	}
}

func TestLoadConfigFile(t *testing.T) {
	configtest.ClearEnv(t)
	path := configtest.Write(t, fullConfig)
	c, err := Load(path)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if c.path != path {
		t.Errorf("path = %q, want %q", c.path, path)
	}
	if c.Listen.Public != "0.0.0.0:18080" || c.Listen.Admin != "[::1]:19090" {
		t.Errorf("listen = %+v", c.Listen)
	}
	if c.Store.Path != "/var/lib/tollway/t.db" {
		t.Errorf("store.path = %q", c.Store.Path)
	}
	if c.Envoy.Bin != "/usr/local/bin/envoy" || c.Envoy.LogLevel != "debug" || c.Envoy.DrainTimeout != 3*time.Second {
		t.Errorf("envoy = %+v", c.Envoy)
	}
	if c.Log.Level != "warn" {
		t.Errorf("log.level = %q", c.Log.Level)
	}
	wantProviders := []ProviderConfig{
		{Name: "openai", Type: "openai", BaseURL: "https://api.openai.com/v1", APIKey: "${TOLLWAY_TEST_OPENAI_KEY}"},
		{Name: "groq", Type: "openai", BaseURL: "https://api.groq.com/openai/v1", APIKey: "gsk-inline-literal-secret"},
		{Name: "local", Type: "openai", BaseURL: "http://127.0.0.1:11434/v1"},
	}
	if !reflect.DeepEqual(c.Providers, wantProviders) {
		t.Errorf("providers = %+v\nwant %+v", c.Providers, wantProviders)
	}
	wantModels := []adminapi.Model{
		{
			ID: "gpt-4o-mini", Name: "GPT-4o mini",
			Providers:                   []store.ModelProvider{{Provider: "openai", Model: "gpt-4o-mini"}, {Provider: "local", Model: "llama3.2"}},
			SupportedSamplingParameters: []string{"temperature", "top_p"},
			Pricing:                     map[string]any{"prompt": "0.00000015", "completion": "0.0000006"},
		},
		{ID: "llama-70b", Providers: []store.ModelProvider{{Provider: "groq", Model: "llama-3.3-70b-versatile"}}},
	}
	if !reflect.DeepEqual(c.Models, wantModels) {
		t.Errorf("models = %+v\nwant %+v", c.Models, wantModels)
	}
}

func TestLoadConfigEnvOverride(t *testing.T) {
	configtest.ClearEnv(t)
	path := configtest.Write(t, fullConfig)
	t.Setenv("TOLLWAY_LISTEN_PUBLIC", "127.0.0.1:8081")
	t.Setenv("TOLLWAY_LOG_LEVEL", "debug")
	t.Setenv("TOLLWAY_ENVOY_DRAIN_TIMEOUT", "250ms")
	c, err := Load(path)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if c.Listen.Public != "127.0.0.1:8081" {
		t.Errorf("listen.public = %q, want the TOLLWAY_LISTEN_PUBLIC override", c.Listen.Public)
	}
	if c.Log.Level != "debug" || c.Envoy.DrainTimeout != 250*time.Millisecond {
		t.Errorf("log.level = %q, drain_timeout = %v; want env overrides", c.Log.Level, c.Envoy.DrainTimeout)
	}
	if c.Listen.Admin != "[::1]:19090" {
		t.Errorf("listen.admin = %q, the file's value must stay", c.Listen.Admin)
	}
	g, err := c.catalogIR()
	if err != nil {
		t.Fatal(err)
	}
	if g.Listener.Port != 8081 {
		t.Errorf("IR listener port = %d, want the overridden 8081", g.Listener.Port)
	}

	// The embedded default takes overrides too, and they are validated.
	t.Setenv("TOLLWAY_LISTEN_PUBLIC", "no-port")
	_, err = Load("")
	if err == nil || !strings.Contains(err.Error(), "listen.public") || !strings.Contains(err.Error(), "no-port") {
		t.Errorf("invalid TOLLWAY_LISTEN_PUBLIC: err = %v, want one naming listen.public and the value", err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	configtest.ClearEnv(t)
	base := `
listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}
store: {path: data/t.db}
`
	okProvider := `
providers:
  - {name: openai, type: openai, base_url: https://api.openai.com/v1}
`
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown top-level key", base + "lissten: {public: x}\n", []string{"lissten"}},
		{"unknown nested key", `
listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090, publik: 127.0.0.1:1}
store: {path: data/t.db}
`, []string{"publik"}},
		{"unknown provider key", base + `
providers:
  - {name: openai, type: openai, base_url: https://api.openai.com/v1, apikey: x}
`, []string{"apikey"}},
		{"non-loopback admin", `
listen: {public: 127.0.0.1:8080, admin: 0.0.0.0:9090}
store: {path: data/t.db}
`, []string{"listen.admin", "0.0.0.0:9090", "loopback"}},
		{"admin on a LAN address", `
listen: {public: 127.0.0.1:8080, admin: 192.168.1.5:9090}
store: {path: data/t.db}
`, []string{"listen.admin", "192.168.1.5:9090"}},
		{"admin on a host name", `
listen: {public: 127.0.0.1:8080, admin: "gateway.internal:9090"}
store: {path: data/t.db}
`, []string{"listen.admin"}},
		{"admin without port", `
listen: {public: 127.0.0.1:8080, admin: 127.0.0.1}
store: {path: data/t.db}
`, []string{"listen.admin"}},
		{"bad public", `
listen: {public: "127.0.0.1:99999", admin: 127.0.0.1:9090}
store: {path: data/t.db}
`, []string{"listen.public", "127.0.0.1:99999"}},
		{"empty store path", `
listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}
store: {path: ""}
`, []string{"store.path"}},
		{"bad base_url", base + `
providers:
  - {name: weird, type: openai, base_url: "ftp://files.example.com/v1"}
`, []string{`"weird"`, "ftp://files.example.com/v1"}},
		{"base_url with credentials", base + `
providers:
  - {name: leaky, type: openai, base_url: "https://u:p@example.com/v1"}
`, []string{`"leaky"`, "credentials"}},
		{"unknown provider type", base + `
providers:
  - {name: claude, type: cohere, base_url: https://api.cohere.com/v1}
`, []string{`"claude"`, `"cohere"`}},
		{"model with unknown provider", base + okProvider + `
models:
  - {id: m1, providers: [{provider: ghost, model: x}]}
`, []string{`"m1"`, `"ghost"`}},
		{"model without upstream name", base + okProvider + `
models:
  - {id: m2, providers: [{provider: openai}]}
`, []string{`"m2"`, `"openai"`}},
		{"several problems at once", `
listen: {public: 127.0.0.1:8080, admin: 10.0.0.1:9090}
store: {path: data/t.db}
providers:
  - {name: claude, type: cohere, base_url: https://api.cohere.com/v1}
models:
  - {id: m1, providers: [{provider: ghost, model: x}]}
`, []string{"listen.admin", `"cohere"`, `"ghost"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := configtest.Write(t, tt.yaml)
			c, err := Load(path)
			if err == nil {
				t.Fatalf("LoadConfig accepted it: %+v", c)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Load(missing) = %v, want an error naming %s", err, path)
	}
}

func TestAdminListen(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9090", true},
		{"127.0.0.2:9090", true},
		{"[::1]:9090", true},
		{"localhost:9090", true},
		{"0.0.0.0:9090", false},
		{":9090", false},
		{"[::]:9090", false},
		{"10.1.2.3:9090", false},
		{"localhost.evil.com:9090", false},
		{"127.0.0.1", false},
	} {
		err := adminListen(tt.addr, "")
		if (err == nil) != tt.ok {
			t.Errorf("adminListen(%q, no token) = %v, want ok=%v", tt.addr, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "listen.admin") {
			t.Errorf("adminListen(%q) error %q does not name listen.admin", tt.addr, err)
		}
		// With a token any address may serve the admin API (and console): the token guards it.
		if err := adminListen(tt.addr, "${TOLLWAY_ADMIN_TOKEN}"); (err == nil) != (tt.addr != "127.0.0.1") {
			t.Errorf("adminListen(%q, token) = %v", tt.addr, err)
		}
	}
}

func TestResolveSecret(t *testing.T) {
	t.Setenv("TOLLWAY_TEST_SET", "sk-from-env")
	t.Setenv("TOLLWAY_TEST_EMPTY", "")
	configtest.Unsetenv(t, "TOLLWAY_TEST_UNSET")
	tests := []struct {
		ref    string
		secret string
		ok     bool
	}{
		{"${TOLLWAY_TEST_SET}", "sk-from-env", true},
		{"${TOLLWAY_TEST_UNSET}", "", false},
		{"${TOLLWAY_TEST_EMPTY}", "", false},
		{"sk-literal", "sk-literal", true},
		{"$TOLLWAY_TEST_SET", "$TOLLWAY_TEST_SET", true},
		{"${TOLLWAY_TEST_SET", "${TOLLWAY_TEST_SET", true},
		{"prefix-${TOLLWAY_TEST_SET}", "prefix-${TOLLWAY_TEST_SET}", true},
		{"", "", true},
	}
	for _, tt := range tests {
		s, ok := resolveSecret(tt.ref)
		if s != tt.secret || ok != tt.ok {
			t.Errorf("resolveSecret(%q) = %q, %v; want %q, %v", tt.ref, s, ok, tt.secret, tt.ok)
		}
	}
}

func TestStoreRef(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"${OPENAI_API_KEY}", "${OPENAI_API_KEY}"},
		{"sk-live-abc", "(inline secret)"},
		{"$OPENAI_API_KEY", "(inline secret)"},
		{"x${OPENAI_API_KEY}", "(inline secret)"},
	} {
		if got := storeRef(tt.in); got != tt.want {
			t.Errorf("storeRef(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func irProvider(t *testing.T, g *ir.Gateway, name string) ir.Provider {
	t.Helper()
	for _, p := range g.Providers {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("provider %s not in IR", name)
	return ir.Provider{}
}

func TestCatalogIRSecrets(t *testing.T) {
	configtest.ClearEnv(t)
	path := configtest.Write(t, fullConfig)

	t.Run("env set", func(t *testing.T) {
		t.Setenv("TOLLWAY_TEST_OPENAI_KEY", "sk-from-env-123")
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		g, err := c.catalogIR()
		if err != nil {
			t.Fatal(err)
		}
		p := irProvider(t, g, "openai")
		if p.APIKey != "sk-from-env-123" || !p.NeedsKey || !p.Ready() {
			t.Errorf("openai = needs %v key %q ready %v; want the resolved env secret", p.NeedsKey, p.APIKey, p.Ready())
		}
		if p.Host != "api.openai.com" || p.Port != 443 || !p.TLS || p.BasePath != "/v1" {
			t.Errorf("openai endpoint = %+v", p)
		}
		groq := irProvider(t, g, "groq")
		if groq.APIKey != "gsk-inline-literal-secret" || !groq.Ready() || groq.BasePath != "/openai/v1" {
			t.Errorf("groq = %+v ready %v; want the inline secret", groq, groq.Ready())
		}
		local := irProvider(t, g, "local")
		if local.NeedsKey || local.APIKey != "" || !local.Ready() {
			t.Errorf("local = %+v; a provider without api_key needs none", local)
		}
		if len(g.Models) != 2 || len(g.Models[0].Targets) != 2 || !reflect.DeepEqual(g.Models[0].Targets[1], ir.Target{Provider: "local", Model: "llama3.2"}) {
			t.Errorf("models = %+v", g.Models)
		}
		if !reflect.DeepEqual(g.Models[0].SupportedParameters, []string{"temperature", "top_p"}) {
			t.Errorf("supported parameters = %v", g.Models[0].SupportedParameters)
		}
	})
	t.Run("env unset", func(t *testing.T) {
		configtest.Unsetenv(t, "TOLLWAY_TEST_OPENAI_KEY")
		c, err := Load(path)
		if err != nil {
			t.Fatalf("an unset credential must not fail the config: %v", err)
		}
		g, err := c.catalogIR()
		if err != nil {
			t.Fatal(err)
		}
		p := irProvider(t, g, "openai")
		if !p.NeedsKey || p.APIKey != "" || p.Ready() {
			t.Errorf("openai = needs %v key %q ready %v; want not ready", p.NeedsKey, p.APIKey, p.Ready())
		}
	})
}

func TestInlineSecretNeverStored(t *testing.T) {
	configtest.ClearEnv(t)
	t.Setenv("TOLLWAY_TEST_OPENAI_KEY", "sk-env-value-never-stored")
	c, err := Load(configtest.Write(t, fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := c.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, p := range cat.Providers {
		refs[p.Name] = p.APIKeyRef
	}
	want := map[string]string{"openai": "${TOLLWAY_TEST_OPENAI_KEY}", "groq": "(inline secret)", "local": ""}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("store refs = %v, want %v", refs, want)
	}
	if got := c.inlineSecrets(); !reflect.DeepEqual(got, map[string]string{"groq": "gsk-inline-literal-secret"}) {
		t.Errorf("inlineSecrets = %v", got)
	}

	dbPath := filepath.Join(t.TempDir(), "t.db")
	s, err := bbolt.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceConfig(cat); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	// What the gateway does on every apply: rebuild the IR from the store with in-memory secrets.
	g, err := catalog.Build(c.Listen.Public, stored, c.BuildEnv(checkOnly))
	if err != nil {
		t.Fatal(err)
	}
	if p := irProvider(t, g, "groq"); p.APIKey != "gsk-inline-literal-secret" {
		t.Errorf("groq key after the store round trip = %q, want the inline secret", p.APIKey)
	}
	if p := irProvider(t, g, "openai"); p.APIKey != "sk-env-value-never-stored" {
		t.Errorf("openai key after the store round trip = %q, want the env secret", p.APIKey)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"gsk-inline-literal-secret", "sk-env-value-never-stored"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("secret %q is in the store file", secret)
		}
	}
	if !bytes.Contains(raw, []byte("${TOLLWAY_TEST_OPENAI_KEY}")) {
		t.Error("the env reference is not in the store file; the byte search cannot be trusted")
	}
}

func TestPerProviderParametersInConfig(t *testing.T) {
	configtest.ClearEnv(t)
	c, err := Load(configtest.Write(t, `
providers:
  - {name: local, type: openai, base_url: http://127.0.0.1:11434/v1}
models:
  - id: m
    supported_sampling_parameters: [temperature, max_tokens]
    providers: [{provider: local, model: llama3.2, supported_sampling_parameters: [temperature]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.catalogIR()
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Models[0].Targets[0].SupportedParameters; !reflect.DeepEqual(got, []string{"temperature"}) {
		t.Fatalf("per-provider list = %v", got)
	}
}

// TestFastLaneIsTheDefault: routing.fast_lane is on unless a file (or the environment) turns it
// off; false stays a setting of its own, the chunk lane for every answer.
func TestFastLaneIsTheDefault(t *testing.T) {
	configtest.ClearEnv(t)
	for _, tc := range []struct {
		name, body string
		want       bool
	}{
		{"embedded default", "", true},
		{"a file without routing", fullConfig, true},
		{"routing without fast_lane", fullConfig + "routing: {attempt_timeout: 5s}\n", true},
		{"fast_lane false", fullConfig + "routing: {fast_lane: false}\n", false},
	} {
		path := ""
		if tc.body != "" {
			path = configtest.Write(t, tc.body)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Routing.FastLane != tc.want {
			t.Errorf("%s: routing.fast_lane = %v, want %v", tc.name, c.Routing.FastLane, tc.want)
		}
	}
	t.Setenv("TOLLWAY_ROUTING_FAST_LANE", "false")
	if c, err := Load(""); err != nil || c.Routing.FastLane {
		t.Errorf("TOLLWAY_ROUTING_FAST_LANE=false: fast_lane %v, err %v; want off", c != nil && c.Routing.FastLane, err)
	}
}
