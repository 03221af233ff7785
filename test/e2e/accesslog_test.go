package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// accessLine finds the access log line of request id among the gateway's stdout lines.
func (g *gateway) accessLine(id string) map[string]any {
	g.t.Helper()
	var line map[string]any
	waitFor(g.t, "the access log line of "+id, 10*time.Second, func() bool {
		for _, l := range strings.Split(g.logs.String(), "\n") {
			js, ok := strings.CutPrefix(strings.TrimSpace(l), "stdout: ")
			var m map[string]any
			if ok && json.Unmarshal([]byte(js), &m) == nil && m["request_id"] == id {
				line = m
				return true
			}
		}
		return false
	})
	return line
}

// TestAccessLogCarriesWhatExtProcKnows: Envoy's access line of each request carries what only
// ext_proc knows, through dynamic metadata: the account, the key's prefix, the model and
// provider that answered, the route, fallbacks, tokens and the exact cost the usage record has;
// a refusal carries its code; the key itself never appears.
func TestAccessLogCarriesWhatExtProcKnows(t *testing.T) {
	t.Parallel()
	f := startRoutes(t)
	send := func(id, key, body string) int {
		req, _ := http.NewRequest("POST", f.g.BaseURL+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send("log-plain", f.key, `{"model":"primary",`+hi+`}`); code != 200 {
		t.Fatalf("plain: %d", code)
	}
	if code := send("log-stream", f.key, `{"model":"route:tiers","route_mode":"fast","stream":true,`+hi+`}`); code != 200 {
		t.Fatalf("stream: %d", code)
	}
	f.a.FailNext(500, "provider trouble") // the route's first model fails: its second answers
	if code := send("log-fallback", f.key, `{"model":"route:support-bot",`+hi+`}`); code != 200 {
		t.Fatalf("fallback: %d", code)
	}
	if code := send("log-refused", "ale-not-a-key-at-all-0000000000000000", `{"model":"primary",`+hi+`}`); code != 401 {
		t.Fatalf("refused: %d", code)
	}
	recs := f.g.waitRecords("acme", 3)
	cost := map[string]string{} // by model and route
	for _, r := range recs {
		cost[r.Model+r.Route] = r.Cost.String()
	}

	plain := f.g.accessLine("log-plain")
	want := map[string]any{"status": float64(200), "account": "acme", "model": "primary", "provider": "a", "fallbacks": nil,
		"route": nil, "code": nil, "cost": cost["primary"], "estimated": false, "method": "POST", "path": "/v1/chat/completions"}
	for k, v := range want {
		if plain[k] != v {
			t.Errorf("plain %s = %v, want %v (%v)", k, plain[k], v, plain)
		}
	}
	if p, _ := plain["key_prefix"].(string); p == "" || !strings.HasPrefix(f.key, p) || len(p) >= len(f.key)/2 {
		t.Errorf("key_prefix %q", plain["key_prefix"])
	}
	if n, _ := plain["prompt_tokens"].(float64); n <= 0 {
		t.Errorf("prompt_tokens %v", plain["prompt_tokens"])
	}

	stream := f.g.accessLine("log-stream")
	for k, v := range map[string]any{"status": float64(200), "model": "backup", "provider": "c", "route": "route:tiers", "cost": cost["backuproute:tiers"]} {
		if stream[k] != v {
			t.Errorf("stream %s = %v, want %v (%v)", k, stream[k], v, stream)
		}
	}
	if n, _ := stream["completion_tokens"].(float64); n <= 0 {
		t.Errorf("stream completion_tokens %v", stream["completion_tokens"])
	}

	fb := f.g.accessLine("log-fallback")
	for k, v := range map[string]any{"status": float64(200), "model": "backup", "provider": "c", "route": "route:support-bot", "fallbacks": float64(1), "attempts": float64(2), "cost": cost["backuproute:support-bot"]} {
		if fb[k] != v {
			t.Errorf("fallback %s = %v, want %v (%v)", k, fb[k], v, fb)
		}
	}

	refused := f.g.accessLine("log-refused")
	if refused["status"] != float64(401) || refused["code"] != "invalid_api_key" || refused["account"] != nil {
		t.Errorf("refused %v", refused)
	}
	if strings.Contains(f.g.logs.String(), f.key) {
		t.Error("an API key reached the gateway's output")
	}
}

// TestAccessLogPaid: the access line of each paid (x402) request, paid with the official Node
// client, carries what its usage record holds: the exact cost, the tokens and whether they were
// estimated, with the endpoint, the payer and the endpoint's account; for whole and streamed
// answers, exact and upto, and a paid task's creation.
func TestAccessLogPaid(t *testing.T) {
	t.Parallel()
	p := startPaid(t)
	cases := []struct{ name, slug, body, scheme string }{
		{"exact", "chat-mini", paidChat, "exact"},
		{"upto", "chat-mini", paidChat, "upto"},
		{"exact stream", "chat-mini", paidStream, "exact"},
		{"upto stream", "chat-mini", paidStream, "upto"},
		{"video", "video", `{"model":"hailuo-02","prompt":"a logged fox","duration":6,"resolution":"1080P"}`, "exact"},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		r := p.payNode(c.slug, c.body, "--scheme", c.scheme)
		if r.Status != 200 || r.Headers["x-request-id"] == "" {
			t.Fatalf("%s: %+v", c.name, r)
		}
		ids[i] = r.Headers["x-request-id"]
	}
	// Envoy writes its access log every few seconds: the lines are read once all were sent.
	for i, c := range cases {
		account := "x402." + c.slug
		var rec *usageRecord
		waitFor(t, c.name+"'s usage record", 10*time.Second, func() bool {
			for _, x := range p.records("account=" + account) {
				if strings.HasPrefix(x.RequestID, ids[i]+".") {
					rec = &x
					return true
				}
			}
			return false
		})
		line := p.accessLine(ids[i])
		want := map[string]any{"status": float64(200), "code": nil, "account": account, "endpoint": c.slug,
			"model": rec.Model, "cost": rec.Cost.String(), "estimated": rec.Estimated,
			"prompt_tokens": float64(rec.PromptTokens), "completion_tokens": float64(rec.CompletionTokens)}
		for k, v := range want {
			if line[k] != v {
				t.Errorf("%s: %s = %v, want %v as its record has (line %v)", c.name, k, line[k], v, line)
			}
		}
		if payer, _ := line["payer"].(string); rec.Payment == nil || !strings.EqualFold(payer, rec.Payment.Payer) || payer == "" {
			t.Errorf("%s: payer %v, record %+v", c.name, line["payer"], rec.Payment)
		}
		if c.slug != "video" && (rec.Cost.Sign() <= 0 || rec.CompletionTokens <= 0) {
			t.Errorf("%s: record %+v has no cost or tokens to compare", c.name, rec)
		}
	}
}
