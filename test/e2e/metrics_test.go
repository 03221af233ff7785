package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
)

const metricsToken = "e2e-metrics-token-0a1b2c3d4e5f6a7b"

// TestMetrics: a known mix of requests (plain, streamed, refused, one that falls back) moves
// the /metrics counters by exactly that mix; the exported cost of each model equals the sum of
// its usage records' exact costs; the scrape needs the admin token; Envoy's stats are
// re-exposed at /metrics/envoy; metrics.enabled: false turns both off.
func TestMetrics(t *testing.T) {
	t.Parallel()
	a := fakeupstream.Start(t, fakeupstream.Options{Name: "a", APIKey: providerKey})
	c := fakeupstream.Start(t, fakeupstream.Options{Name: "c", APIKey: providerKey})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: a, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: c, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: priced
    providers: [{provider: c, model: c-model}]
    pricing: {prompt: "0.000001", completion: "0.000002", request: "0.0001"}
  - id: chain
    providers: [{provider: a, model: a-model}, {provider: c, model: c-model}]
    pricing: {prompt: "0.000003", completion: "0.000007"}
routes:
  - {name: Support Bot, rule: priority_fallback, models: [chain]}
admin: {token: "%s"}
`, a.URL(), c.URL(), metricsToken), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	tight := g.newKey("acme", "--monthly-limit", "0.0000001") // refused: any answer costs more

	// The scrape is an admin call: the guard wants the token.
	if status, body := g.adminRaw("GET", "/metrics", "", nil); status != http.StatusUnauthorized || !strings.Contains(body, "invalid_admin_token") {
		t.Fatalf("/metrics without the token: %d %s", status, body)
	}
	before := scrape(t, g, "/metrics")

	const plain, streamed = 3, 2
	for range plain {
		resp := g.chat(ctx, key, `{"model":"priced",`+hi+`}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("plain: %d", resp.StatusCode)
		}
	}
	for range streamed {
		resp := g.chat(ctx, key, `{"model":"priced","stream":true,`+hi+`}`)
		if events := readStream(t, resp); len(events) < 2 {
			t.Fatalf("stream: %v", events)
		}
	}
	wantError(t, g.chat(ctx, tight, `{"model":"priced",`+hi+`}`), 403, "spend_limit_exceeded")
	a.FailNext(500, "provider trouble")
	resp := g.chat(ctx, key, `{"model":"route:support-bot",`+hi+`}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-tollway-provider") != "c" {
		t.Fatalf("fallback: %d from %q", resp.StatusCode, resp.Header.Get("x-tollway-provider"))
	}
	if v := resp.Header.Get("x-tollway-attempts"); v != "" {
		t.Fatalf("Envoy's attempt count reached the client: %q", v)
	}

	// A request's metrics are recorded when its ext_proc stream closes, which may be just
	// after the client has its answer.
	const requests = plain + streamed + 2
	var after map[string]*dto.MetricFamily
	waitFor(t, "every request counted", 10*time.Second, func() bool {
		after = scrape(t, g, "/metrics")
		return sum(after, "tollway_requests_total", nil)-sum(before, "tollway_requests_total", nil) == requests &&
			sum(after, "tollway_extproc_streams_active", nil) == 0
	})
	moved := func(name string, labels map[string]string) float64 {
		return sum(after, name, labels) - sum(before, name, labels)
	}
	check := func(what string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s moved by %v, want %v", what, got, want)
		}
	}
	served := map[string]string{"endpoint": "chat", "model": "priced", "provider": "c", "route": "", "status": "200", "code": ""}
	check("requests served by priced", moved("tollway_requests_total", served), plain+streamed)
	check("requests refused", moved("tollway_requests_total", map[string]string{"model": "priced", "provider": "", "status": "403", "code": "spend_limit_exceeded"}), 1)
	fellBack := map[string]string{"model": "chain", "provider": "c", "route": "route:support-bot"}
	check("requests through the route", moved("tollway_requests_total", merge(fellBack, map[string]string{"status": "200", "code": ""})), 1)
	check("fallbacks", moved("tollway_fallbacks_total", fellBack), 1)
	check("fallbacks in all", moved("tollway_fallbacks_total", nil), 1)
	check("attempts of the route", moved("tollway_upstream_attempts_total", map[string]string{"model": "chain", "route": "route:support-bot"}), 2)
	check("attempts of priced", moved("tollway_upstream_attempts_total", map[string]string{"model": "priced", "route": ""}), plain+streamed)
	check("router streams", moved("tollway_extproc_streams_total", map[string]string{"phase": "router"}), requests)
	// priced has one OpenAI-shaped provider: the router-level filter rewrites its requests and
	// they open no attempt stream; the route's two attempts each open one.
	check("attempt streams", moved("tollway_extproc_streams_total", map[string]string{"phase": "attempt"}), 2)
	check("router overhead observations", moved("tollway_gateway_overhead_seconds_count", map[string]string{"phase": "router"}), requests)
	check("streamed durations", moved("tollway_request_duration_seconds_count", map[string]string{"endpoint": "chat", "stream": "true"}), streamed)
	check("plain durations", moved("tollway_request_duration_seconds_count", map[string]string{"endpoint": "chat", "stream": "false"}), plain+2)
	check("time to first token", moved("tollway_time_to_first_token_seconds_count", map[string]string{"model": "priced", "provider": "c"}), streamed)
	check("upstream times of priced", moved("tollway_upstream_seconds_count", map[string]string{"model": "priced", "provider": "c"}), plain+streamed)
	check("upstream times of the route", moved("tollway_upstream_seconds_count", map[string]string{"model": "chain", "provider": "c"}), 1)
	check("holds taken", moved("tollway_holds_total", map[string]string{"result": "taken"}), plain+streamed+1)
	check("holds refused", moved("tollway_holds_total", map[string]string{"result": "spend_limit_exceeded"}), 1)
	check("holds settled", moved("tollway_hold_ends_total", map[string]string{"end": "settled"}), plain+streamed+1)
	check("holds released", moved("tollway_hold_ends_total", map[string]string{"end": "released"}), 0)
	check("holds open", sum(after, "tollway_holds_open", nil), 0)
	check("usage records", moved("tollway_usage_records_total", nil), plain+streamed+1)

	// Tokens and cost agree with the durable usage records, cost to the digit per model.
	recs := metricsRecords(t, g, plain+streamed+1)
	var prompt, completion int64
	cost := map[string]decimal.Decimal{}
	for _, r := range recs {
		prompt += r.PromptTokens
		completion += r.CompletionTokens
		cost[r.Model+"/"+r.Provider] = cost[r.Model+"/"+r.Provider].Add(r.Cost)
	}
	check("prompt tokens", moved("tollway_tokens_total", map[string]string{"direction": "prompt"}), float64(prompt))
	check("completion tokens", moved("tollway_tokens_total", map[string]string{"direction": "completion"}), float64(completion))
	if prompt == 0 || completion == 0 {
		t.Errorf("records with no tokens: %+v", recs)
	}
	if len(cost) != 2 {
		t.Errorf("costs by model/provider: %v", cost)
	}
	for mp, want := range cost {
		m, p, _ := strings.Cut(mp, "/")
		// The gauge was 0 before (no record of this model yet), so after is the whole sum: the
		// nearest float to the exact decimal total, which formats back to it.
		got := sum(after, "tollway_cost_usd_total", map[string]string{"model": m, "provider": p})
		if f := strconv.FormatFloat(got, 'f', -1, 64); f != want.String() {
			t.Errorf("cost of %s: /metrics says %s, the usage records sum to %s", mp, f, want)
		}
	}

	// A reload pushes one snapshot, which Envoy accepts: no NACK.
	if status, body := g.adminRaw("POST", "/admin/v1/reload", "", map[string]string{"authorization": "Bearer " + metricsToken, "content-type": "application/json"}); status != 200 {
		t.Fatalf("reload: %d %s", status, body)
	}
	var xds map[string]*dto.MetricFamily
	waitFor(t, "the reload accepted", 10*time.Second, func() bool {
		xds = scrape(t, g, "/metrics")
		return sum(xds, "tollway_xds_version_accepted", nil) == sum(xds, "tollway_xds_version_pushed", nil) &&
			sum(xds, "tollway_xds_version_pushed", nil) > sum(after, "tollway_xds_version_pushed", nil)
	})
	check("pushes", sum(xds, "tollway_xds_pushes_total", map[string]string{"reason": "change"})-sum(after, "tollway_xds_pushes_total", map[string]string{"reason": "change"}), 1)
	if acks := sum(xds, "tollway_xds_acks_total", nil) - sum(after, "tollway_xds_acks_total", nil); acks < 3 {
		t.Errorf("ACKs after a push: %v, want one per resource type at least", acks)
	}
	check("NACKs", sum(xds, "tollway_xds_nacks_total", nil), 0)
	check("Envoy connected", sum(xds, "tollway_xds_envoy_connected", nil), 1)

	// Envoy's own stats, re-exposed through its admin socket.
	envoyStats := scrape(t, g, "/metrics/envoy")
	if n := sum(envoyStats, "envoy_http_downstream_rq_total", nil); n < requests {
		t.Errorf("Envoy's downstream requests: %v, want at least %d", n, requests)
	}
	for _, secret := range []string{key, tight, providerKey, metricsToken} {
		for _, path := range []string{"/metrics", "/metrics/envoy"} {
			if strings.Contains(scrapeRaw(t, g, path), secret) {
				t.Errorf("%s shows a secret", path)
			}
		}
	}

	// metrics.enabled: false: nothing is served (and nothing measured).
	off := startGateway(t, fmt.Sprintf(`providers:
  - {name: c, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: priced
    providers: [{provider: c, model: c-model}]
metrics: {enabled: false}
`, c.URL()), "FAKE_PROVIDER_KEY="+providerKey)
	for _, path := range []string{"/metrics", "/metrics/envoy"} {
		if status, body := off.adminRaw("GET", path, "", nil); status != http.StatusNotFound || !strings.Contains(body, "metrics.enabled") {
			t.Errorf("%s with metrics off: %d %s", path, status, body)
		}
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func scrapeRaw(t *testing.T, g *gateway, path string) string {
	t.Helper()
	status, body := g.adminRaw("GET", path, "", map[string]string{"authorization": "Bearer " + metricsToken})
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	return body
}

// scrape reads an exposition with Prometheus's own parser.
func scrape(t *testing.T, g *gateway, path string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(scrapeRaw(t, g, path)))
	if err != nil {
		t.Fatalf("GET %s: not the Prometheus text format: %v", path, err)
	}
	return fams
}

// sum adds the values of name's series whose labels include want (a histogram's _count and
// _sum are asked for by those names).
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	base, part := name, ""
	for _, suffix := range []string{"_count", "_sum"} {
		if b, ok := strings.CutSuffix(name, suffix); ok && fams[name] == nil && fams[b] != nil {
			base, part = b, suffix
		}
	}
	var total float64
	for _, m := range fams[base].GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case part == "_count":
			total += float64(m.GetHistogram().GetSampleCount())
		case part == "_sum":
			total += m.GetHistogram().GetSampleSum()
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v { // an absent label reads as "", as Prometheus has it
			return false
		}
	}
	return true
}

// metricsRecords waits for n usage records of acme, read with the admin token.
func metricsRecords(t *testing.T, g *gateway, n int) []usageRecord {
	t.Helper()
	var out struct{ Data []usageRecord }
	waitFor(t, fmt.Sprintf("%d usage records", n), 10*time.Second, func() bool {
		body := scrapeRaw(t, g, "/admin/v1/usage/records?account=acme")
		out.Data = nil
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		return len(out.Data) >= n
	})
	if len(out.Data) != n {
		t.Fatalf("%d usage records, want %d", len(out.Data), n)
	}
	return out.Data
}
