package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
	"github.com/tollway/tollway/test/otlp"
)

// Tracing (the tracing: section, docs/operations.md#tracing), against a real OTLP/gRPC receiver:
// Envoy's OpenTelemetry tracer makes the server span, one span per upstream attempt and the
// span of each ext_proc call; ext_proc's admission, translation and settlement spans hang under
// the ext_proc call's span with the GenAI attributes.

// Span names Envoy 1.40 gives.
const (
	ingressSpan = "ingress"
	extProcSpan = "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress"
)

// tracingSection points the gateway's traces at rc.
func tracingSection(rc *otlp.Receiver) string {
	return fmt.Sprintf("tracing: {otlp_endpoint: %q, sample_rate: 1.0, service_name: tollway-e2e}\n", rc.Endpoint())
}

// newTraceparent is a client's sampled traceparent with a fresh trace id.
func newTraceparent(t *testing.T) (header, traceID, spanID string) {
	t.Helper()
	traceID = fmt.Sprintf("%032x", time.Now().UnixNano())
	spanID = "b7ad6b7169203331"
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// tracedPost sends body to path with the client's traceparent (none when "").
func (g *gateway) tracedPost(key, path, body, traceparent string) (*http.Response, []byte) {
	g.t.Helper()
	return postTraced(g.t, g.BaseURL, key, path, body, traceparent)
}

// postTraced sends body to baseURL+path with key and the client's traceparent (none when "").
func postTraced(t testing.TB, baseURL, key, path, body, traceparent string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, raw
}

// trace is one trace's spans as received.
type trace []otlp.Span

func (tr trace) named(name string) []otlp.Span {
	var out []otlp.Span
	for _, s := range tr {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one is the only span named name; the test fails if there is not exactly one.
func (tr trace) one(t *testing.T, name string) otlp.Span {
	t.Helper()
	got := tr.named(name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q, want 1; the trace:\n%s", len(got), name, tr)
	}
	return got[0]
}

// byID is the span with id (the zero Span if none).
func (tr trace) byID(id string) otlp.Span {
	for _, s := range tr {
		if s.SpanID == id {
			return s
		}
	}
	return otlp.Span{}
}

// children are the spans whose parent is s.
func (tr trace) children(s otlp.Span) []otlp.Span {
	var out []otlp.Span
	for _, c := range tr {
		if c.ParentID == s.SpanID {
			out = append(out, c)
		}
	}
	return out
}

func (tr trace) String() string {
	var b strings.Builder
	for _, s := range tr {
		fmt.Fprintf(&b, "  %s %s <- %s %q %s %v\n", s.Service, s.SpanID, s.ParentID, s.Name, s.Kind, s.Attrs)
	}
	return b.String()
}

// waitTrace waits until trace traceID has at least want[name] spans of each name.
func waitTrace(t *testing.T, rc *otlp.Receiver, traceID string, want map[string]int) trace {
	t.Helper()
	var tr trace
	deadline := time.Now().Add(20 * time.Second) // Envoy flushes its spans every 5 s
	for {
		tr = rc.Trace(traceID)
		done := true
		for name, n := range want {
			done = done && len(tr.named(name)) >= n
		}
		if done {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: want %v; got:\n%s", traceID, want, tr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// traceOfRequest finds the trace of the request Envoy gave id (its server span's guid).
func traceOfRequest(t *testing.T, rc *otlp.Receiver, requestID string) string {
	t.Helper()
	var id string
	waitFor(t, "the request's server span", 20*time.Second, func() bool {
		for _, s := range rc.Spans() {
			if s.Name == ingressSpan && s.Attrs["guid:x-request-id"] == requestID {
				id = s.TraceID
				return true
			}
		}
		return false
	})
	return id
}

// noSecret fails the test if the key (or the provider's key) shows in any span attribute.
func noSecret(t *testing.T, rc *otlp.Receiver, secrets ...string) {
	t.Helper()
	for _, s := range rc.Spans() {
		for k, v := range s.Attrs {
			for _, secret := range secrets {
				if strings.Contains(v, secret) {
					t.Errorf("span %q attribute %s carries a secret: %q", s.Name, k, v)
				}
			}
		}
	}
}

// wantAttrs fails the test unless s has each attribute as given.
func wantAttrs(t *testing.T, s otlp.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("span %q: %s = %q, want %q (all: %v)", s.Name, k, s.Attrs[k], v, s.Attrs)
		}
	}
}

// wantChildOf fails the test unless s's parent is p.
func wantChildOf(t *testing.T, s, p otlp.Span) {
	t.Helper()
	if s.ParentID != p.SpanID {
		t.Errorf("span %q's parent is %s, want %q (%s)", s.Name, s.ParentID, p.Name, p.SpanID)
	}
}

// chatUsage reads an answer's usage.
func chatUsage(t *testing.T, raw []byte) (prompt, completion int64) {
	t.Helper()
	var a struct {
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.Usage.Prompt == 0 {
		t.Fatalf("no usage in %s (%v)", raw, err)
	}
	return a.Usage.Prompt, a.Usage.Completion
}

// pricedCost is what model priced of pricedCatalog costs for the usage, exactly.
func pricedCost(prompt, completion int64) string {
	return decimal.RequireFromString("0.000001").Mul(decimal.NewFromInt(prompt)).
		Add(decimal.RequireFromString("0.000002").Mul(decimal.NewFromInt(completion))).
		Add(decimal.RequireFromString("0.0001")).String()
}

// TestTracingChat: a chat with the client's traceparent is traced in the client's trace: Envoy's
// server span continues the client's span, ext_proc's calls are its children and the request's
// call holds the admission and settlement spans with the GenAI attributes (the model asked for and the one that answered,
// the provider, the tokens, the exact cost, the key's prefix and never the key), and the
// provider's request carries a traceparent of the same trace, from Envoy's upstream span.
func TestTracingChat(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")+tracingSection(rc), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	tp, traceID, clientSpan := newTraceparent(t)
	resp, raw := g.tracedPost(key, "/chat/completions", `{"model":"priced","messages":[{"role":"user","content":"hello there"}]}`, tp)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, raw)
	}
	prompt, completion := chatUsage(t, raw)
	tr := waitTrace(t, rc, traceID, map[string]int{ingressSpan: 1, extProcSpan: 1, "admission": 1, "settlement": 1, "router provider.fake egress": 1})

	ingress := tr.one(t, ingressSpan)
	if ingress.ParentID != clientSpan || ingress.Kind != "SPAN_KIND_SERVER" || ingress.Service != "tollway-e2e" {
		t.Errorf("server span: parent %s (want the client's %s), kind %s, service %s", ingress.ParentID, clientSpan, ingress.Kind, ingress.Service)
	}
	upstream := tr.one(t, "router provider.fake egress")
	wantChildOf(t, upstream, ingress)
	wantAttrs(t, upstream, map[string]string{"http.status_code": "200", "upstream_cluster": "provider.fake"})

	// The request's ext_proc call holds ext_proc's spans. On the default split gateway the
	// answer filter's call is a second one beside it (routing.fast_lane: false has one), each
	// under the server span.
	admission := tr.one(t, "admission")
	ext := tr.byID(admission.ParentID)
	if ext.Name != extProcSpan {
		t.Fatalf("admission's parent is %q, want the request's ext_proc call; the trace:\n%s", ext.Name, tr)
	}
	for _, s := range tr.named(extProcSpan) {
		wantChildOf(t, s, ingress)
	}
	wantAttrs(t, admission, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "priced", "tollway.request_id": resp.Header.Get("x-request-id")})
	if p := admission.Attrs["tollway.key_prefix"]; p == "" || !strings.HasPrefix(key, p) || len(p) >= len(key)/2 {
		t.Errorf("key prefix %q: want a short prefix of the key", p)
	}
	if admission.Service != "tollway-e2e" || admission.Scope != "tollway/extproc" {
		t.Errorf("admission span from service %q scope %q", admission.Service, admission.Scope)
	}
	settlement := tr.one(t, "settlement")
	wantChildOf(t, settlement, ext)
	wantAttrs(t, settlement, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.system": "fake", "gen_ai.provider.name": "fake",
		"gen_ai.request.model": "priced", "gen_ai.response.model": "priced",
		"gen_ai.usage.input_tokens": fmt.Sprint(prompt), "gen_ai.usage.output_tokens": fmt.Sprint(completion),
		"tollway.cost": pricedCost(prompt, completion), "tollway.usage.estimated": "false",
		"tollway.key_prefix": admission.Attrs["tollway.key_prefix"],
	})
	if settlement.Start.Before(admission.End) {
		t.Errorf("settlement started %v before admission ended %v", settlement.Start, admission.End)
	}

	// The provider's request carries the trace on, from Envoy's upstream span.
	sent := fake.Requests()
	if got, want := sent[len(sent)-1].Header.Get("traceparent"), "00-"+traceID+"-"+upstream.SpanID+"-01"; got != want {
		t.Errorf("provider got traceparent %q, want %q", got, want)
	}
	noSecret(t, rc, key, providerKey)

	// Without a traceparent, Envoy starts the trace (sample_rate 1.0), and ext_proc's spans
	// are in it.
	resp, raw = g.tracedPost(key, "/chat/completions", `{"model":"priced","messages":[{"role":"user","content":"again"}]}`, "")
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, raw)
	}
	own := traceOfRequest(t, rc, resp.Header.Get("x-request-id"))
	tr = waitTrace(t, rc, own, map[string]int{"admission": 1, "settlement": 1})
	if root := tr.one(t, ingressSpan); root.ParentID != "" {
		t.Errorf("Envoy's server span has parent %s: want a new trace", root.ParentID)
	}
	// A refused request's admission span says why.
	tp, refusedTrace, _ := newTraceparent(t)
	resp, _ = g.tracedPost(key, "/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, tp)
	if resp.StatusCode != 400 {
		t.Fatalf("unknown model: %d", resp.StatusCode)
	}
	refused := waitTrace(t, rc, refusedTrace, map[string]int{"admission": 1}).one(t, "admission")
	if refused.Status != "STATUS_CODE_ERROR" || refused.Attrs["error.type"] != "model_not_found" {
		t.Errorf("refused admission: status %s, error.type %q", refused.Status, refused.Attrs["error.type"])
	}
	noSecret(t, rc, key, providerKey)
}

// settlementWants checks a settlement span against the usage record the request left.
func settlementWants(t *testing.T, s otlp.Span, rec usageRecord, provider, model string) {
	t.Helper()
	wantAttrs(t, s, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.system": provider, "gen_ai.response.model": model,
		"gen_ai.usage.input_tokens": fmt.Sprint(rec.PromptTokens), "gen_ai.usage.output_tokens": fmt.Sprint(rec.CompletionTokens),
		"tollway.cost": rec.Cost.String(),
	})
}

// TestTracingStreams: on a split gateway (routing.fast_lane), a stream billed from Envoy's access
// log (the fast lane) and an answer passed by the answer filter in an ext_proc stream of its own
// (the chunk lane) each have their settlement span in the client's trace, under the request's
// ext_proc call, with the bill the usage record has.
func TestTracingStreams(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")+"routing: {fast_lane: true}\n"+tracingSection(rc), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	for _, c := range []struct{ name, body string }{
		{"fast lane stream", `{"model":"priced","stream":true,"messages":[{"role":"user","content":"tell me a story"}]}`},
		{"chunk lane answer", `{"model":"priced","messages":[{"role":"user","content":"tell me a story"}]}`},
	} {
		tp, traceID, clientSpan := newTraceparent(t)
		resp, raw := g.tracedPost(key, "/chat/completions", c.body, tp)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, raw)
		}
		id := resp.Header.Get("x-request-id")
		tr := waitTrace(t, rc, traceID, map[string]int{ingressSpan: 1, "admission": 1, "settlement": 1, "router provider.fake egress": 1, extProcSpan: 2})
		ingress := tr.one(t, ingressSpan)
		if ingress.ParentID != clientSpan {
			t.Errorf("%s: server span's parent %s, want the client's", c.name, ingress.ParentID)
		}
		admission, settlement := tr.one(t, "admission"), tr.one(t, "settlement")
		if admission.ParentID != settlement.ParentID {
			t.Errorf("%s: admission under %s, settlement under %s: want both under the request's ext_proc call", c.name, admission.ParentID, settlement.ParentID)
		}
		if ext := tr.byID(settlement.ParentID); ext.Name != extProcSpan {
			t.Errorf("%s: settlement's parent is %q, want the request's ext_proc call", c.name, ext.Name)
		} else {
			wantChildOf(t, ext, ingress)
		}
		rec := recordOf(t, g, "acme", id)
		settlementWants(t, settlement, rec, "fake", "priced")
		if rec.CompletionTokens == 0 {
			t.Errorf("%s: record %+v bills no answer", c.name, rec)
		}
	}
	noSecret(t, rc, key, providerKey)
}

// TestTracingFallback: a fallback shows as two upstream spans of Envoy's under the server span,
// the first failed (500) and the second answered; the provider of the second speaks another
// API, so its attempt has a translation span; each provider's request carried the trace on from
// its own attempt's span; the settlement names the route asked for, and the provider and model
// that answered.
func TestTracingFallback(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	body := fmt.Sprintf(`providers:
  - {name: first, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: claude, type: anthropic, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: mini
    providers: [{provider: first, model: fake-priced}]
    pricing: {prompt: "0.000001", completion: "0.000002"}
  - id: haiku
    providers: [{provider: claude, model: claude-haiku}]
    pricing: {prompt: "0.000001", completion: "0.000005"}
routes:
  - {name: chained, rule: priority_fallback, models: [mini, haiku]}
`, fake.URL(), fake.AnthropicURL())
	g := startGateway(t, body+tracingSection(rc), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	fake.FailNext(500, "internal")
	tp, traceID, _ := newTraceparent(t)
	resp, raw := g.tracedPost(key, "/chat/completions", `{"model":"route:chained","messages":[{"role":"user","content":"hello"}]}`, tp)
	if resp.StatusCode != 200 || resp.Header.Get("x-tollway-provider") != "claude" {
		t.Fatalf("fallback: %d %s %s", resp.StatusCode, resp.Header.Get("x-tollway-provider"), raw)
	}
	// Three ext_proc calls: the router-level filter's and each attempt's.
	tr := waitTrace(t, rc, traceID, map[string]int{ingressSpan: 1, extProcSpan: 3, "admission": 1, "translation": 1, "settlement": 1})
	ingress := tr.one(t, ingressSpan)
	var attempts []otlp.Span
	for _, s := range tr.children(ingress) {
		if s.Kind == "SPAN_KIND_CLIENT" && strings.HasPrefix(s.Name, "router ") {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d upstream spans under the server span, want 2 (the failed attempt and the fallback):\n%s", len(attempts), tr)
	}
	if attempts[0].Start.After(attempts[1].Start) {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	if attempts[0].Attrs["http.status_code"] != "500" || attempts[1].Attrs["http.status_code"] != "200" {
		t.Errorf("attempts answered %s then %s, want 500 then 200", attempts[0].Attrs["http.status_code"], attempts[1].Attrs["http.status_code"])
	}
	// Each provider's request carries the trace on from its own attempt's span.
	sent := fake.Requests()
	if len(sent) != 2 {
		t.Fatalf("the providers got %d requests, want 2", len(sent))
	}
	for i, r := range sent {
		if got, want := r.Header.Get("traceparent"), "00-"+traceID+"-"+attempts[i].SpanID+"-01"; got != want {
			t.Errorf("attempt %d (%s) carried traceparent %q, want %q", i+1, r.Path, got, want)
		}
	}
	translation := tr.one(t, "translation")
	wantAttrs(t, translation, map[string]string{"gen_ai.system": "claude", "gen_ai.request.model": "haiku", "gen_ai.operation.name": "chat"})
	// The translation runs in the second attempt's own ext_proc call (the upstream filter's),
	// which Envoy 1.40 puts under the server span, beside the attempt's upstream span.
	if s := tr.byID(translation.ParentID); s.Name != extProcSpan {
		t.Errorf("translation's parent is %q, want an ext_proc call", s.Name)
	} else {
		wantChildOf(t, s, ingress)
	}
	if a := tr.one(t, "admission"); a.ParentID == translation.ParentID || tr.byID(a.ParentID).Name != extProcSpan {
		t.Errorf("admission under %s, translation under %s: want each under its own filter's ext_proc call", a.ParentID, translation.ParentID)
	}
	rec := recordOf(t, g, "acme", resp.Header.Get("x-request-id"))
	settlement := tr.one(t, "settlement")
	settlementWants(t, settlement, rec, "claude", "haiku")
	wantAttrs(t, settlement, map[string]string{"gen_ai.request.model": "route:chained", "tollway.route": "route:chained"})
	noSecret(t, rc, key, providerKey)
}

// TestTracingVideoCreate: a video create's admission span carries the model asked for and the
// generate_content operation, and the gateway's own create call to the provider, through Envoy's
// internal listener, continues the request's trace: its server and upstream spans are in it and
// the provider's request carries a traceparent of the trace.
func TestTracingVideoCreate(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, hailuoCatalog(fake, "")+tracingSection(rc), "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	tp, traceID, clientSpan := newTraceparent(t)
	resp, raw := g.tracedPost(key, "/videos", `{"model":"hailuo-02","prompt":"a red fox in snow"}`, tp)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"status":"queued"`) {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}
	tr := waitTrace(t, rc, traceID, map[string]int{ingressSpan: 2, extProcSpan: 1, "admission": 1, "router provider.hailuo egress": 1})
	var public, internal otlp.Span
	for _, s := range tr.named(ingressSpan) {
		if s.ParentID == clientSpan {
			public = s
		} else {
			internal = s
		}
	}
	if public.SpanID == "" || internal.SpanID == "" {
		t.Fatalf("want the public request's server span and the create call's:\n%s", tr)
	}
	admission := tr.one(t, "admission")
	wantAttrs(t, admission, map[string]string{"gen_ai.operation.name": "generate_content", "gen_ai.request.model": "hailuo-02"})
	ext := tr.byID(admission.ParentID)
	wantChildOf(t, ext, public)
	wantChildOf(t, internal, ext) // the create call runs under the request's ext_proc call
	upstream := tr.one(t, "router provider.hailuo egress")
	wantChildOf(t, upstream, internal)
	for _, r := range fake.Requests() {
		if r.Path == "/v1/video_generation" {
			if got, want := r.Header.Get("traceparent"), "00-"+traceID+"-"+upstream.SpanID+"-01"; got != want {
				t.Errorf("MiniMax got traceparent %q, want %q", got, want)
			}
		}
	}
	noSecret(t, rc, key, providerKey)
}

// TestTracingTaskSettledLater: a video task the poller finds finished long after its create is
// billed under a settlement span in the create's trace (the task keeps its create's
// traceparent), with its provider, model and cost.
func TestTracingTaskSettledLater(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, hailuoCatalog(fake, `{request: "0.05", duration: "0.045"}`)+tracingSection(rc), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	tp, traceID, _ := newTraceparent(t)
	resp, raw := g.tracedPost(key, "/videos", `{"model":"hailuo-02","prompt":"a red fox in snow","duration":6}`, tp)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"status":"queued"`) {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}
	var obj map[string]any
	_ = json.Unmarshal(raw, &obj)
	id, _ := obj["id"].(string)
	var done map[string]any
	waitFor(t, "the task to complete", 30*time.Second, func() bool {
		_, done = g.do("GET", key, "/videos/"+id, "")
		return done["status"] == "completed"
	})
	tr := waitTrace(t, rc, traceID, map[string]int{"admission": 1, "settlement": 1})
	settlement, admission := tr.one(t, "settlement"), tr.one(t, "admission")
	if settlement.ParentID != admission.ParentID {
		t.Errorf("settlement under %s, admission under %s: want both under the create's ext_proc call", settlement.ParentID, admission.ParentID)
	}
	wantAttrs(t, settlement, map[string]string{
		"gen_ai.operation.name": "generate_content", "gen_ai.system": "hailuo", "gen_ai.response.model": "hailuo-02",
		"tollway.cost": fmt.Sprint(done["cost"]), "tollway.request_id": resp.Header.Get("x-request-id"),
	})
	noSecret(t, rc, key, providerKey)
}

// TestTracingSampledOut: Envoy samples by tracing.sample_rate, whatever the client's sampled
// flag says (Envoy 1.40): at 0 nothing reaches the collector, from Envoy or ext_proc, and the
// provider still gets the client's trace id, marked unsampled.
func TestTracingSampledOut(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")+fmt.Sprintf("tracing: {otlp_endpoint: %q, sample_rate: 0}\n", rc.Endpoint()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	tp, traceID, _ := newTraceparent(t)
	if resp, raw := g.tracedPost(key, "/chat/completions", `{"model":"priced","messages":[{"role":"user","content":"hello"}]}`, tp); resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, raw)
	}
	got := fake.Requests()[0].Header.Get("traceparent")
	if !strings.HasPrefix(got, "00-"+traceID+"-") || !strings.HasSuffix(got, "-00") {
		t.Errorf("provider got traceparent %q: want the client's trace, unsampled", got)
	}
	time.Sleep(6 * time.Second) // past Envoy's 5 s flush
	if n := len(rc.Spans()); n != 0 {
		t.Errorf("%d spans at sample_rate 0:\n%s", n, trace(rc.Spans()))
	}
}

// TestTracingExternalEnvoy: with --envoy external the bootstrap is unchanged and the tracer comes
// over xDS: an Envoy started from `tollway bootstrap` makes the server and upstream spans of the
// client's trace, and Tollway's ext_proc adds its spans under that Envoy's ext_proc call.
func TestTracingExternalEnvoy(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	env := []string{"FAKE_PROVIDER_KEY=" + providerKey, "TOLLWAY_LISTEN_XDS=" + freeAddr(t), "TOLLWAY_LISTEN_EXTPROC=" + freeAddr(t)}
	g := startWith(t, harness.Options{Dir: t.TempDir(), Body: pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1") + tracingSection(rc), Env: env, Args: []string{"--envoy", "external"}})
	if err := g.NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	e := startExternalEnvoy(t, g, env, "edge-traced", freeAddr(t))
	waitFor(t, "the external Envoy to serve", 20*time.Second, func() bool { code, _ := chatVia(t, e.public, key, "priced"); return code == 200 })
	tp, traceID, clientSpan := newTraceparent(t)
	if resp, raw := postTraced(t, "http://"+e.public+"/v1", key, "/chat/completions", `{"model":"priced","messages":[{"role":"user","content":"hi"}]}`, tp); resp.StatusCode != 200 {
		t.Fatalf("chat via the external Envoy: %d %s", resp.StatusCode, raw)
	}
	tr := waitTrace(t, rc, traceID, map[string]int{ingressSpan: 1, extProcSpan: 1, "admission": 1, "settlement": 1, "router provider.fake egress": 1})
	ingress := tr.one(t, ingressSpan)
	if ingress.ParentID != clientSpan || ingress.Attrs["node_id"] != "edge-traced" {
		t.Errorf("server span: parent %s, node %q", ingress.ParentID, ingress.Attrs["node_id"])
	}
	wantChildOf(t, tr.byID(tr.one(t, "admission").ParentID), ingress)
	noSecret(t, rc, key, providerKey)
}

// TestTracingImageCreate: an image the provider finishes within its create (Gemini) is billed
// under a settlement span of the request's trace, with the task's provider, model, tokens and
// exact cost.
func TestTracingImageCreate(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	g, _, _, key := startI3(t, tracingSection(rc))
	m := i3Models[1]
	tp, traceID, _ := newTraceparent(t)
	resp, raw := g.tracedPost(key, "/images", i3Create(m.id, "a red fox in the snow", ""), tp)
	var obj struct{ Status, Provider, Cost string }
	if err := json.Unmarshal(raw, &obj); err != nil || resp.StatusCode != 200 || obj.Status != "completed" || obj.Cost == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}
	tr := waitTrace(t, rc, traceID, map[string]int{extProcSpan: 1, "admission": 1, "settlement": 1})
	admission, settlement := tr.one(t, "admission"), tr.one(t, "settlement")
	if admission.ParentID != settlement.ParentID || tr.byID(settlement.ParentID).Name != extProcSpan {
		t.Errorf("admission under %s, settlement under %s: want both under the request's ext_proc call", admission.ParentID, settlement.ParentID)
	}
	wantAttrs(t, settlement, map[string]string{"gen_ai.operation.name": "generate_content", "gen_ai.request.model": m.id,
		"gen_ai.response.model": m.id, "gen_ai.system": obj.Provider, "tollway.cost": obj.Cost})
	if settlement.Attrs["gen_ai.usage.input_tokens"] == "" || settlement.Attrs["gen_ai.usage.input_tokens"] == "0" {
		t.Errorf("settlement without the prompt's tokens: %v", settlement.Attrs)
	}
	noSecret(t, rc, key, providerKey)
}

// TestTracingEmbeddings: an embeddings request has its admission and settlement spans, named
// embeddings, with the input tokens and the cost its usage record has, and the provider's
// request carries the trace on.
func TestTracingEmbeddings(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	g, fake := startEmbeddings(t, tracingSection(rc))
	if err := g.NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	tp, traceID, _ := newTraceparent(t)
	resp, raw := g.tracedPost(key, "/embeddings", `{"model":"emb-small","input":["the sea","the sky"]}`, tp)
	if resp.StatusCode != 200 {
		t.Fatalf("embeddings: %d %s", resp.StatusCode, raw)
	}
	// emb-small has a chain of two providers: its attempts go through the chain's cluster, each
	// rewritten by the attempt filter's own ext_proc call.
	tr := waitTrace(t, rc, traceID, map[string]int{ingressSpan: 1, "admission": 1, "settlement": 1, "router chain.model.emb-small egress": 1})
	admission, settlement := tr.one(t, "admission"), tr.one(t, "settlement")
	ext := tr.byID(admission.ParentID)
	if ext.Name != extProcSpan {
		t.Fatalf("admission's parent is %q, want the request's ext_proc call", ext.Name)
	}
	wantChildOf(t, ext, tr.one(t, ingressSpan))
	wantChildOf(t, settlement, ext)
	wantAttrs(t, admission, map[string]string{"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "emb-small"})
	rec := recordOf(t, g, "acme", resp.Header.Get("x-request-id"))
	if rec.PromptTokens == 0 {
		t.Fatalf("record %+v bills no input", rec)
	}
	wantAttrs(t, settlement, map[string]string{
		"gen_ai.operation.name": "embeddings", "gen_ai.system": "oa", "gen_ai.response.model": "emb-small",
		"gen_ai.usage.input_tokens": fmt.Sprint(rec.PromptTokens), "gen_ai.usage.output_tokens": "0",
		"tollway.cost": rec.Cost.String(), "tollway.usage.estimated": "false",
	})
	sent := fake.Requests()
	if got := sent[len(sent)-1].Header.Get("traceparent"); !strings.Contains(got, traceID) {
		t.Errorf("provider got traceparent %q, want one of trace %s", got, traceID)
	}
	// On Gemini's API the attempt's rewrite is a translation span of the embeddings operation.
	tp, traceID, _ = newTraceparent(t)
	if resp, raw = g.tracedPost(key, "/embeddings", `{"model":"emb-gemini","input":"the sea"}`, tp); resp.StatusCode != 200 {
		t.Fatalf("gemini embeddings: %d %s", resp.StatusCode, raw)
	}
	tr = waitTrace(t, rc, traceID, map[string]int{"translation": 1, "settlement": 1})
	wantAttrs(t, tr.one(t, "translation"), map[string]string{"gen_ai.operation.name": "embeddings", "gen_ai.system": "gm", "gen_ai.request.model": "emb-gemini"})
	noSecret(t, rc, key, providerKey)
}

// TestTracingPaidSettlement: a paid (x402) request's settlement, billed through its payment and
// not from credits, has its settlement span in the request's trace, with the usage and the cost
// its payment settled.
func TestTracingPaidSettlement(t *testing.T) {
	t.Parallel()
	rc := otlp.Start(t, false)
	bed, err := harness.StartBed()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bed.Stop)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGatewayIn(t, t.TempDir(), paidBody(bed, fake, "")+tracingSection(rc), "FAKE_PROVIDER_KEY="+providerKey)
	setPayURL(t, g, "http://"+g.Public)
	p := &paidGateway{gateway: g, bed: bed, fake: fake}
	sig := p.capture("chat-mini", paidChat, "--scheme", "exact").Signature
	resp := p.paidDo("POST", "/x402/chat-mini", paidChat, map[string]string{"payment-signature": sig})
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("paid chat: %d %s", resp.StatusCode, raw)
	}
	prompt, completion := chatUsage(t, raw)
	tr := waitTrace(t, rc, traceOfRequest(t, rc, resp.Header.Get("x-request-id")), map[string]int{"admission": 1, "settlement": 1})
	settlement := tr.one(t, "settlement")
	wantChildOf(t, settlement, tr.byID(tr.one(t, "admission").ParentID))
	wantAttrs(t, settlement, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.system": "fake", "gen_ai.response.model": "gpt-4o-mini",
		"gen_ai.usage.input_tokens": fmt.Sprint(prompt), "gen_ai.usage.output_tokens": fmt.Sprint(completion),
		"tollway.usage.estimated": "false",
	})
	if c, err := decimal.NewFromString(settlement.Attrs["tollway.cost"]); err != nil || !c.IsPositive() {
		t.Errorf("settlement cost %q: want the paid request's cost", settlement.Attrs["tollway.cost"])
	}
}
