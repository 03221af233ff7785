package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestClientAddressHeadersNeverReachProviders: whatever a client (or the proxies in front of the
// gateway) says about where a request came from stays at the gateway, at the edge
// (xff_num_trusted_hops 0) and behind one trusted proxy (1).
func TestClientAddressHeadersNeverReachProviders(t *testing.T) {
	t.Parallel()
	sent := map[string]string{
		"x-forwarded-for":          "203.0.113.7, 198.51.100.9",
		"x-real-ip":                "203.0.113.8",
		"forwarded":                "for=203.0.113.9;proto=https",
		"x-envoy-external-address": "203.0.113.10",
		"x-envoy-internal":         "true",
		"true-client-ip":           "203.0.113.11",
		"cf-connecting-ip":         "203.0.113.12",
		"x-client-ip":              "203.0.113.13",
		"x-forwarded-host":         "203.0.113.14",
		"x-forwarded-proto":        "https",
	}
	for _, hops := range []string{"0", "1"} {
		t.Run("hops="+hops, func(t *testing.T) {
			fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
			g := startGateway(t, catalog(fake.URL()), "FAKE_PROVIDER_KEY="+providerKey, "TOLLWAY_LISTEN_XFF_NUM_TRUSTED_HOPS="+hops)
			req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions", strings.NewReader(hiBody))
			req.Header.Set("authorization", "Bearer "+g.newKey("acme"))
			req.Header.Set("content-type", "application/json")
			for k, v := range sent {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("provider saw %d requests", len(reqs))
			}
			for name, values := range reqs[0].Header {
				if _, leaked := sent[strings.ToLower(name)]; leaked {
					t.Errorf("%s reached the provider: %q", name, values)
				}
				for _, v := range values {
					if strings.Contains(v, "203.0.113.") || strings.Contains(v, "198.51.100.") {
						t.Errorf("a client address reached the provider in %s: %q", name, v)
					}
				}
			}
		})
	}
}
