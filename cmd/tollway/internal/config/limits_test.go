package config

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/xds/ir"
)

// TestLimitsConfig: limits.max_concurrent_requests and listen.xff_num_trusted_hops default to
// 10000 and 0, reach the IR, and out-of-range values are refused naming the key.
func TestLimitsConfig(t *testing.T) {
	configtest.ClearEnv(t)
	const base = "store: {path: data/t.db}\n"
	c, err := Load(configtest.Write(t, "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.IRLimits(); got.Requests() != ir.DefaultMaxConcurrentRequests || c.Listen.XFFNumTrustedHops != 0 {
		t.Fatalf("defaults: %+v, hops %d", got, c.Listen.XFFNumTrustedHops)
	}
	c, err = Load(configtest.Write(t, "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090, xff_num_trusted_hops: 2}\nlimits: {max_concurrent_requests: 50}\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.IRLimits(); got.Requests() != 50 || got.ExtProcStreams() != 2*50+256 || c.Listen.XFFNumTrustedHops != 2 {
		t.Fatalf("explicit: %+v (ext_proc %d), hops %d", got, got.ExtProcStreams(), c.Listen.XFFNumTrustedHops)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"limits: {max_concurrent_requests: 0}\n", "limits.max_concurrent_requests 0"},
		{"limits: {max_concurrent_requests: -5}\n", "limits.max_concurrent_requests -5"},
		{"limits: {max_concurrent_requests: 2000000}\n", "limits.max_concurrent_requests 2000000"},
		{"limits: {max_concurrent_request: 5}\n", "max_concurrent_request"},
	} {
		_, err := Load(configtest.Write(t, "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\n"+base+bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v", bad.yaml, err)
		}
	}
	for _, hops := range []string{"-1", "11"} {
		_, err := Load(configtest.Write(t, "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090, xff_num_trusted_hops: "+hops+"}\n"+base))
		if err == nil || !strings.Contains(err.Error(), "listen.xff_num_trusted_hops "+hops) {
			t.Errorf("hops %s: %v", hops, err)
		}
	}
}

// TestKeyRateDefaults: keys.rate_limits is every key's default rates (absent: none); either
// rate may be left out; a rate below 1 or not a whole number is refused naming the key.
func TestKeyRateDefaults(t *testing.T) {
	configtest.ClearEnv(t)
	const base = "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\nstore: {path: data/t.db}\n"
	for _, ok := range []struct {
		yaml string
		want ir.RateLimits
	}{
		{"", ir.RateLimits{}},
		{"keys: {rate_limits: {requests_per_minute: 60, tokens_per_minute: 100000}}\n", ir.RateLimits{RequestsPerMinute: 60, TokensPerMinute: 100000}},
		{"keys: {rate_limits: {tokens_per_minute: 5000}}\n", ir.RateLimits{TokensPerMinute: 5000}},
	} {
		c, err := Load(configtest.Write(t, base+ok.yaml))
		if err != nil || c.KeyRateDefaults() != ok.want {
			t.Errorf("%q: %+v %v, want %+v", ok.yaml, c.KeyRateDefaults(), err, ok.want)
		}
	}
	for _, bad := range []struct{ yaml, want string }{
		{"keys: {rate_limits: {requests_per_minute: 0}}\n", "keys.rate_limits.requests_per_minute is 0: give a whole number from 1"},
		{"keys: {rate_limits: {tokens_per_minute: -2}}\n", "keys.rate_limits.tokens_per_minute is -2"},
		{"keys: {rate_limits: {requests_per_minute: 1.5}}\n", "requests_per_minute"},
		{"keys: {rate_limits: {rpm: 5}}\n", "rpm"},
	} {
		_, err := Load(configtest.Write(t, base+bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.yaml, err, bad.want)
		}
	}
}

// TestRouteRateLimits: a routes: entry takes rate_limits like a key (either rate may be left
// out; none: no limit), kept on the store's route and in the IR; a rate below 1 or not a whole
// number is refused naming the route's field.
func TestRouteRateLimits(t *testing.T) {
	configtest.ClearEnv(t)
	const base = "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\nstore: {path: data/t.db}\n" +
		"providers: [{name: p, type: openai, base_url: http://127.0.0.1:1/v1, api_key: x}]\n" +
		"models: [{id: m, providers: [{provider: p, model: m}], pricing: {prompt: \"0.000001\", completion: \"0.000002\"}}]\n"
	for _, ok := range []struct {
		yaml string
		want ir.RateLimits
	}{
		{"routes: [{name: bot, rule: priority_fallback, models: [m]}]\n", ir.RateLimits{}},
		{"routes: [{name: bot, rule: priority_fallback, models: [m], rate_limits: {requests_per_minute: 2, tokens_per_minute: 5000}}]\n", ir.RateLimits{RequestsPerMinute: 2, TokensPerMinute: 5000}},
		{"routes: [{name: bot, rule: priority_fallback, models: [m], rate_limits: {tokens_per_minute: 5000}}]\n", ir.RateLimits{TokensPerMinute: 5000}},
	} {
		c, err := Load(configtest.Write(t, base+ok.yaml))
		if err != nil {
			t.Fatalf("%q: %v", ok.yaml, err)
		}
		cat, err := c.Catalog()
		if err != nil || len(cat.Routes) != 1 {
			t.Fatalf("%q: %+v %v", ok.yaml, cat.Routes, err)
		}
		g, err := c.catalogIR()
		if err != nil || len(g.Routes) != 1 || g.Routes[0].RateLimits != ok.want {
			t.Errorf("%q: IR %+v %v, want %+v", ok.yaml, g.Routes, err, ok.want)
		}
		if got := cat.Routes[0].RateLimits; (got == nil) != !ok.want.Any() {
			t.Errorf("%q: store route's rate_limits %+v, want %+v", ok.yaml, got, ok.want)
		}
	}
	for _, bad := range []struct{ yaml, want string }{
		{"rate_limits: {requests_per_minute: 0}", "routes[0].rate_limits.requests_per_minute is 0: give a whole number from 1"},
		{"rate_limits: {tokens_per_minute: -2}", "routes[0].rate_limits.tokens_per_minute is -2"},
		{"rate_limits: {requests_per_minute: 1.5}", "requests_per_minute"},
		{"rate_limits: {requests_per_minute: lots}", "requests_per_minute"},
		{"rate_limits: {rpm: 5}", "rpm"},
	} {
		yaml := base + "routes: [{name: bot, rule: priority_fallback, models: [m], " + bad.yaml + "}]\n"
		_, err := Load(configtest.Write(t, yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.yaml, err, bad.want)
		}
	}
}
