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
