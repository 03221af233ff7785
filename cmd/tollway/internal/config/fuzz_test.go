package config

// Fuzz target of config loading: LoadConfig on arbitrary YAML.

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tollway/tollway/configs"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
	"golang.org/x/net/http/httpguts"
)

// envoyLogLevels are the values Envoy 1.40's --log-level takes.
var fuzzEnvoyLogLevels = map[string]bool{"trace": true, "debug": true, "info": true, "warning": true, "warn": true, "error": true, "critical": true, "off": true}

// namesWhat matches an error line that names what is wrong: a key path, a provider, model or
// route by name, a YAML line, or the key names mapstructure quotes.
var namesWhat = regexp.MustCompile(`\b(listen|store|envoy|log|routing|billing|providers|models|routes)\b|` +
	`(provider|model|route) "|line \d+|'[a-z_.\[\]0-9]+'|unknown keys|yaml: `)

// slotTemplate is a config using every section, each value a numbered slot; slotDefaults fill
// it into a config that loads.
const slotTemplate = `
listen: {public: «0», admin: «1»}
store: {path: «2»}
envoy: {log_level: «3», drain_timeout: «4»}
log: {level: «5»}
routing: {attempt_timeout: «6»}
billing: {enabled: «7»}
providers:
  - {name: «8», type: «9», base_url: «10», api_key: sk-ant-x}
  - {name: local, type: openai, base_url: "http://127.0.0.1:11434/v1"}
  - {name: gem, type: gemini, base_url: "https://generativelanguage.googleapis.com/v1beta", api_key: "${TOLLWAY_FUZZ_UNSET}"}
models:
  - id: «11»
    providers: [{provider: «8», model: «12»}, {provider: local, model: llama3.2, supported_sampling_parameters: [«13»]}]
    pricing: {prompt: «14», completion: "0.000015", input_cache_read: «15»}
    context_length: «16»
    max_output_length: «17»
  - id: flash
    providers: [{provider: gem, model: gemini-2.5-flash}]
    pricing:
      - {range_start: 0, range_end: «18», prompt: "0.0000003", completion: "0.0000025"}
      - {range_start: «18», prompt: "0.0000006"}
routes:
  - {name: «19», rule: «20», models: [«11», flash]}
  - {name: tiers, rule: mode_mapping, modes: {«21»: «11», balanced: flash}, status: «22»}
`

var slotDefaults = []string{"127.0.0.1:8080", "127.0.0.1:9090", "data/t.db", "debug", "2s", "warn", "30s", "false",
	"claude", "anthropic", "https://api.anthropic.com/v1", "sonnet", "claude-sonnet-4-5", "temperature", `"0.000003"`,
	`"0.0000003"`, "1000000", "64000", "200000", "Support Bot", "priority_fallback", "fast", "paused"}

func fillTemplate(slot int, value string) []byte {
	out := slotTemplate
	for i, v := range slotDefaults {
		if i == slot {
			v = value
		}
		out = strings.ReplaceAll(out, "«"+strconv.Itoa(i)+"»", v)
	}
	return []byte(out)
}

// FuzzLoadConfig loads arbitrary YAML as a config file, or a full config with one value
// replaced by an arbitrary one. A refusal names the file and, on every
// line, what is wrong (a key, a provider, model or route, or a YAML line) without Go
// vocabulary. A config that loads is one the gateway runs: its catalog survives the store's
// JSON records, becomes IR, translates into Envoy resources that pass validation and form a
// consistent snapshot, compiles into the ext_proc runtime, and its log levels are ones slog
// and Envoy take, and the names ext_proc puts in headers can travel in them.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{string(configs.Default), fullConfig,
		"lissten: {public: x}\nstore: {path: \"\"}\n",
		"listen: {public: \"127.0.0.1:99999\", admin: 0.0.0.0:9090}\nproviders: [{name: claude, type: cohere, base_url: \"ftp://x/v1\"}]\nmodels: [{id: m1, providers: [{provider: ghost}], pricing: {prompt: 0.5}}]\n",
		"providers: [{name: a, type: openai, base_url: http://h/v1, apikey: x}]\nroutes: [{name: r, rule: mode_mapping, modes: {turbo: m}}]\n",
		"envoy: {drain_timeout: soon}\nmodels: {id: x}\n",
	} {
		f.Add([]byte(s), uint8(0), "")
	}
	for i, v := range slotDefaults {
		f.Add([]byte(nil), uint8(i), v)
	}
	f.Add([]byte(nil), uint8(11), `"son\tnet"`) // quoted values take escapes
	f.Add([]byte(nil), uint8(19), `"Support\nBot"`)
	for _, kv := range os.Environ() { // the developer's TOLLWAY_* settings stay out
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "TOLLWAY_") {
			f.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	path := filepath.Join(f.TempDir(), "tollway.yaml")
	push := xds.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Fuzz(func(t *testing.T, yaml []byte, slot uint8, value string) {
		if len(yaml) == 0 { // one value of a full config, as written, replaced by value
			yaml = fillTemplate(int(slot)%len(slotDefaults), value)
		}
		if err := os.WriteFile(path, yaml, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			checkConfigError(t, path, err)
			return
		}
		checkRuns(t, c, push)
	})
}

func checkConfigError(t *testing.T, path string, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.Contains(msg, path) {
		t.Fatalf("error does not name the file: %v", err)
	}
	if leak := fuzzcheck.Leak(msg); leak != "" {
		t.Fatalf("error shows the operator Go vocabulary %q: %v", leak, err)
	}
	for line := range strings.SplitSeq(strings.TrimPrefix(msg, "config "+path+":"), "\n") {
		if strings.TrimSpace(line) != "" && !strings.HasSuffix(line, "following error(s):") && !namesWhat.MatchString(line) {
			t.Fatalf("error line %q does not say which key or value is wrong (in %v)", line, err)
		}
	}
}

// checkRuns does with c what `tollway run` and every later apply do.
func checkRuns(t *testing.T, c *Config, push *xds.Server) {
	t.Helper()
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(c.Log.Level))); err != nil {
		t.Fatalf("log.level %q loads, but the logger falls back to info: %v", c.Log.Level, err)
	}
	if c.Envoy.LogLevel != "" && !fuzzEnvoyLogLevels[c.Envoy.LogLevel] {
		t.Fatalf("envoy.log_level %q loads, but Envoy refuses it at start", c.Envoy.LogLevel)
	}
	if c.Envoy.DrainTimeout < 0 || c.Routing.AttemptTimeout < 0 {
		t.Fatalf("negative durations load: drain_timeout %v, attempt_timeout %v", c.Envoy.DrainTimeout, c.Routing.AttemptTimeout)
	}
	cat, err := c.Catalog()
	if err != nil {
		t.Fatalf("loaded, but the catalog fails: %v", err)
	}
	raw, err := json.Marshal(cat)
	if err != nil {
		t.Fatal(err)
	}
	var stored store.Catalog // the store keeps records as JSON
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	g, err := catalog.Build(c.Listen.Public, stored, c.BuildEnv(checkOnly))
	if err != nil {
		t.Fatalf("loaded, but the stored catalog does not build: %v", err)
	}
	g.AttemptTimeout = c.Routing.AttemptTimeout
	res, err := translator.Translate(g)
	if err != nil {
		t.Fatalf("loaded, but does not translate: %v", err)
	}
	if _, err := push.Push(context.Background(), res, 0); err != nil {
		t.Fatalf("loaded, but Envoy's resources are refused: %v", err)
	}
	extproc.Compile(g, nil)
	// ext_proc names the cluster and the model in request headers (x-tollway-cluster,
	// x-tollway-model); Envoy refuses a header mutation with a value HTTP cannot carry.
	for _, c := range res.Clusters {
		if !httpguts.ValidHeaderFieldValue(c.Name) || strings.TrimSpace(c.Name) != c.Name {
			t.Fatalf("cluster %q cannot travel in the %s header", c.Name, ir.ClusterHeader)
		}
	}
	for _, m := range g.Models {
		if !httpguts.ValidHeaderFieldValue(m.ID) || strings.TrimSpace(m.ID) != m.ID {
			t.Fatalf("model id %q cannot travel in the %s header", m.ID, ir.ModelHeader)
		}
	}
}
