package config

import (
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/test/fuzzcheck"
)

// TestConfigErrorsInConfigTerms: a value of the wrong kind is refused naming its key and what
// to write, in YAML terms rather than the decoder's Go types. Found by FuzzLoadConfig.
func TestConfigErrorsInConfigTerms(t *testing.T) {
	configtest.ClearEnv(t)
	for _, tc := range []struct{ yaml, want string }{
		{"0", "the file must be a mapping of keys"},
		{"a: [{{}}]", "a mapping key must be plain text"},
		{"- a\n- b", "the file must be a mapping of keys"},
		{"listen: 5", "listen must be a mapping (key: value), not a number"},
		{"listen: {public: [1]}", "listen.public must be a string, not a list"},
		{"log: {level: {a: 1}}", "log.level must be a string, not a mapping"},
		{"providers: [1]", "providers[0] must be a mapping (key: value), not a number"},
		{"models: [{id: m, context_length: abc}]", `models[0].context_length is "abc": write a whole number`},
		{"billing: {enabled: maybe}", `billing.enabled is "maybe": write true or false`},
		{"routes: [{name: r, modes: [a]}]", "routes[0].modes[0] must be a mapping (key: value), not the text \"a\""},
		{"envoy: {drain_timeout: [1]}", "envoy.drain_timeout must be a duration such as 30s or 500ms, not a list"},
		{"envoy: {drain_timeout: soon}", `envoy.drain_timeout is "soon": write a duration such as 30s or 500ms`},
		{"lissten: {public: x}", "unknown keys at the top level: lissten"},
		{"providers: [{name: a, apikey: x}]", "providers[0] has unknown keys: apikey"},
		{"models: [{id: m, pricing: [1]}]", "pricing[0] must be an object with price fields, not a number"},
	} {
		_, err := Load(configtest.Write(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.yaml, err, tc.want)
			continue
		}
		if leak := fuzzcheck.Leak(err.Error()); leak != "" {
			t.Errorf("%q: error %v shows Go vocabulary %q", tc.yaml, err, leak)
		}
	}
}

// TestConfigValuesTheGatewayUses: a config loads only with values the gateway uses as
// written: log levels slog and Envoy know (a typo was silently read as info, or stopped Envoy
// at start), durations with a unit (a bare 60 was 60 ns) and not below Envoy's millisecond,
// whole numbers where counts go (1.5 was silently 1). Found by FuzzLoadConfig's "a config that
// loads runs" property, the bare numbers while writing it.
func TestConfigValuesTheGatewayUses(t *testing.T) {
	configtest.ClearEnv(t)
	for _, tc := range []struct{ yaml, want string }{
		{"log: {level: loud}", `log.level is "loud": use debug, info, warn or error`},
		{"envoy: {log_level: verbose}", `envoy.log_level is "verbose": use trace, debug, info, warning, error, critical or off`},
		{"routing: {attempt_timeout: 60}", "routing.attempt_timeout is the number 60: write a duration with its unit, such as 60s"},
		{"envoy: {drain_timeout: -2s}", "envoy.drain_timeout is -2s: it must not be negative"},
		{"envoy: {concurrency: -1}", "envoy.concurrency is -1: use 0 (one Envoy worker per CPU Tollway may use, the default) or a number of workers from 1 to 1024"},
		{"envoy: {concurrency: 80000}", "envoy.concurrency is 80000: use 0"},
		{"envoy: {concurrency: 2.5}", "envoy.concurrency is 2.5: write a whole number"},
		{"routing: {attempt_timeout: 300us}", "routing.attempt_timeout is 300µs: Envoy counts milliseconds, use 1ms or more (or 0 for the default)"},
		{"models: [{id: m, max_output_length: 1.5, providers: [{provider: p, model: x}]}]", "models[0].max_output_length is 1.5: write a whole number"},
		{"x402: {facilitator_timeout: 60}", "x402.facilitator_timeout is the number 60: write a duration with its unit, such as 60s"},
		{"x402: {facilitator_timeout: soon}", `x402.facilitator_timeout is "soon": write a duration such as 30s or 500ms`},
		{"x402: {facilitator_timeout: 0s}", "x402.facilitator_timeout is 0s: use 1s to 2m30s (default 1m0s)"},
		{"x402: {facilitator_timeout: 500ms}", "x402.facilitator_timeout is 500ms: use 1s to 2m30s (default 1m0s)"},
		{"x402: {facilitator_timeout: -5s}", "x402.facilitator_timeout is -5s: use 1s to 2m30s"},
		{"x402: {facilitator_timeout: 5m}", "x402.facilitator_timeout is 5m0s: use 1s to 2m30s"},
	} {
		_, err := Load(configtest.Write(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.yaml, err, tc.want)
		}
	}
	// What stays accepted: slog's level forms, Envoy's "warn", whole floats, 0 durations.
	c, err := Load(configtest.Write(t, `
log: {level: WARN}
envoy: {log_level: warn, drain_timeout: 0s, concurrency: 2}
routing: {attempt_timeout: 1ms}
providers: [{name: p, type: openai, base_url: "http://127.0.0.1:1/v1"}]
models: [{id: m, context_length: 8e3, providers: [{provider: p, model: x}]}]
`))
	if err != nil || c.Models[0].ContextLength != 8000 || c.Envoy.Concurrency != 2 || c.X402.FacilitatorTimeout != 60*time.Second {
		t.Fatalf("LoadConfig: %v (%+v)", err, c)
	}
	if c, err := Load(configtest.Write(t, "x402: {facilitator_timeout: 2m30s}")); err != nil || c.X402.FacilitatorTimeout != 150*time.Second {
		t.Fatalf("facilitator_timeout 2m30s: %v", err)
	}
}

// TestModelIDsTravelInHeaders: ext_proc names a request's model and cluster in headers, so a
// model id with a control character (easy to write as "\r" in YAML or JSON) or longer than a
// header should carry is refused where the catalog is checked, not by Envoy on every request.
// The property FuzzLoadConfig checks; found with a hand-written value in its template.
func TestModelIDsTravelInHeaders(t *testing.T) {
	configtest.ClearEnv(t)
	for _, id := range []string{`"a\rb"`, `"a\u0001b"`, `"a\u007f"`, strings.Repeat("m", 257)} {
		_, err := Load(configtest.Write(t, string(fillTemplate(11, id))))
		if err == nil || !strings.Contains(err.Error(), "the id ") {
			t.Errorf("model id %.20s...: %v, want a refusal naming the id rules", id, err)
		}
	}
	if _, err := Load(configtest.Write(t, string(fillTemplate(11, `"claude-sonnet-4.5@2025/meta-llama:free+x"`)))); err != nil {
		t.Errorf("a printable id: %v", err)
	}
}
