package chat

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// firstAttempt plans body and rewrites it for the first attempt of its chain, as the upstream
// ext_proc would for the endpoint Envoy picks first.
func firstAttempt(t *testing.T, rt *core.Runtime, body string) (*chatPlan, *ir.Provider, *provider.Upstream, []string) {
	t.Helper()
	plan, e := planChat(rt, []byte(body))
	if e != nil {
		t.Fatalf("planChat: %v", e)
	}
	var p *ir.Provider
	if plan.pinned != "" {
		p = rt.Providers[plan.pinned]
	} else {
		p = rt.Providers[rt.Chains[plan.cluster][0].Provider]
	}
	up, removed, err := AttemptRequest(rt, []byte(body), plan.model, p)
	if err != nil {
		t.Fatalf("attempt: %v", err)
	}
	return plan, p, up, removed
}

func TestPlanChatRewritesForProvider(t *testing.T) {
	rt := testRuntime()
	body := `{"model":"gpt","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"user":"u1",` +
		`"temperature":0.2,"max_tokens":10,"top_k":5,"logit_bias":{"1":2},"route":{"provider":"openai"},"route_mode":"fast"}`
	plan, p, upstream, removed := firstAttempt(t, rt, body)
	if p.Name != "openai" || plan.model.ID != "gpt" || plan.cluster != "provider.openai" || plan.attempts != 1 {
		t.Errorf("plan goes to %s/%s via %s (%d attempts), want openai/gpt via provider.openai", p.Name, plan.model.ID, plan.cluster, plan.attempts)
	}
	if want := []string{"logit_bias", "top_k"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed = %v, want %v (sorted)", removed, want)
	}
	if upstream.Path != "/chat/completions" {
		t.Errorf("path %q", upstream.Path)
	}
	up := decodeObject(t, upstream.Body)
	if got := jsonString(t, up["model"]); got != "gpt-4o-2024-08-06" {
		t.Errorf("upstream model = %q, want the provider's model name", got)
	}
	for _, gone := range []string{"route", "route_mode", "top_k", "logit_bias"} {
		if _, ok := up[gone]; ok {
			t.Errorf("upstream body still has %q: %s", gone, upstream.Body)
		}
	}
	want := map[string]string{
		"messages":       `[{"role":"user","content":"hi"}]`,
		"stream":         `true`,
		"stream_options": `{"include_usage":true}`,
		"user":           `"u1"`,
		"temperature":    `0.2`,
		"max_tokens":     `10`,
	}
	for k, v := range want {
		if got := string(up[k]); got != v {
			t.Errorf("upstream %s = %s, want %s", k, got, v)
		}
	}
	if len(up) != len(want)+1 {
		t.Errorf("upstream body has %d fields, want %d: %s", len(up), len(want)+1, upstream.Body)
	}
	if got := upstream.Headers["authorization"]; got != "Bearer sk-openai-secret" {
		t.Errorf("authorization = %q, want the provider key", got)
	}
}

func TestPlanChatNoSupportedListPassesEverything(t *testing.T) {
	rt := testRuntime()
	body := `{"model":"free","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"top_k":5,"frobnicate":{"a":1},"route":null}`
	_, _, upstream, removed := firstAttempt(t, rt, body)
	if len(removed) != 0 {
		t.Errorf("removed = %v, want none for a model without a supported list", removed)
	}
	up := decodeObject(t, upstream.Body)
	if string(up["top_k"]) != "5" || string(up["frobnicate"]) != `{"a":1}` {
		t.Errorf("unknown fields not passed through: %s", upstream.Body)
	}
	if _, ok := up["route"]; ok {
		t.Errorf("route must be stripped even when every field passes: %s", upstream.Body)
	}
	if got := jsonString(t, up["model"]); got != "qwen2.5:7b" {
		t.Errorf("upstream model = %q", got)
	}
	if got, ok := upstream.Headers["authorization"]; !ok || got != "" {
		t.Errorf("authorization header = %q (present %v); a keyless provider must remove the client's header", got, ok)
	}
}

func TestPlanChatErrors(t *testing.T) {
	rt := testRuntime()
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name     string
		body     string
		status   int
		code     string
		contains []string // in the message
	}{
		{"not json", `{"model":`, http.StatusBadRequest, "invalid_json", nil},
		{"json array", `[1,2]`, http.StatusBadRequest, "invalid_json", nil},
		{"json null", `null`, http.StatusBadRequest, "invalid_json", nil},
		{"empty body", ``, http.StatusBadRequest, "invalid_json", nil},
		{"missing model", `{` + msgs + `}`, http.StatusBadRequest, "missing_model", []string{"GET /v1/models"}},
		{"empty model", `{"model":"",` + msgs + `}`, http.StatusBadRequest, "missing_model", nil},
		{"numeric model", `{"model":42,` + msgs + `}`, http.StatusBadRequest, "missing_model", nil},
		{"null model", `{"model":null,` + msgs + `}`, http.StatusBadRequest, "missing_model", nil},
		{"missing messages", `{"model":"gpt"}`, http.StatusBadRequest, "missing_messages", nil},
		{"empty messages", `{"model":"gpt","messages":[]}`, http.StatusBadRequest, "missing_messages", nil},
		{"null messages", `{"model":"gpt","messages":null}`, http.StatusBadRequest, "missing_messages", nil},
		{"messages object", `{"model":"gpt","messages":{"role":"user"}}`, http.StatusBadRequest, "invalid_messages", nil},
		{"bad role", `{"model":"gpt","messages":[{"role":"user","content":"a"},{"role":"robot","content":"b"}]}`, http.StatusBadRequest, "invalid_messages", []string{"messages[1]"}},
		{"missing role", `{"model":"gpt","messages":[{"content":"b"}]}`, http.StatusBadRequest, "invalid_messages", []string{"messages[0]"}},
		{"stream string", `{"model":"gpt",` + msgs + `,"stream":"yes"}`, http.StatusBadRequest, "invalid_request", []string{"stream"}},
		{"stream number", `{"model":"gpt",` + msgs + `,"stream":1}`, http.StatusBadRequest, "invalid_request", []string{"stream"}},
		{"route string", `{"model":"gpt",` + msgs + `,"route":"openai"}`, http.StatusBadRequest, "invalid_request", []string{"route"}},
		{"route empty provider", `{"model":"gpt",` + msgs + `,"route":{"provider":""}}`, http.StatusBadRequest, "invalid_request", []string{"route"}},
		{"route provider number", `{"model":"gpt",` + msgs + `,"route":{"provider":1}}`, http.StatusBadRequest, "invalid_request", []string{"route"}},
		{"pinned provider not serving", `{"model":"gpt",` + msgs + `,"route":{"provider":"groq"}}`, http.StatusBadRequest, "provider_not_available",
			[]string{`"groq"`, `"gpt"`, "openai, local", "route.provider"}},
		{"pinned unknown provider", `{"model":"free",` + msgs + `,"route":{"provider":"nope"}}`, http.StatusBadRequest, "provider_not_available", []string{`"nope"`, "local"}},
		{"unknown model", `{"model":"gpt-5",` + msgs + `}`, http.StatusBadRequest, "model_not_found", []string{`"gpt-5"`, "GET /v1/models"}},
		{"route model", `{"model":"route:cheap",` + msgs + `}`, http.StatusBadRequest, "route_not_found", []string{`"route:cheap"`}},
		{"only provider has no key", `{"model":"broken",` + msgs + `}`, http.StatusServiceUnavailable, "model_unavailable", []string{`"broken"`, "nokey"}},
		{"pinned provider has no key", `{"model":"fallback",` + msgs + `,"route":{"provider":"nokey"}}`, http.StatusServiceUnavailable, "provider_not_available", []string{"nokey"}},
		{"bad route_mode", `{"model":"gpt",` + msgs + `,"route_mode":"turbo"}`, http.StatusBadRequest, "invalid_route_mode", []string{"fast, balanced, deep"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, e := planChat(rt, []byte(tt.body))
			if e == nil {
				t.Fatalf("planChat(%s) succeeded via %s; want %d %s", tt.body, plan.cluster, tt.status, tt.code)
			}
			if e.Status != tt.status || e.Code != tt.code {
				t.Errorf("got %d %s (%s), want %d %s", e.Status, e.Code, e.Message, tt.status, tt.code)
			}
			if strings.TrimSpace(e.Message) == "" {
				t.Error("empty error message")
			}
			for _, s := range tt.contains {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not contain %q", e.Message, s)
				}
			}
		})
	}
}

func TestPlanChatProviderChoice(t *testing.T) {
	rt := testRuntime()
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name     string
		body     string
		provider string
		model    string
		auth     string
	}{
		{"first ready target", `{"model":"gpt",` + msgs + `}`, "openai", "gpt-4o-2024-08-06", "Bearer sk-openai-secret"},
		{"pinned to the second target", `{"model":"gpt",` + msgs + `,"route":{"provider":"local"}}`, "local", "llama3.2", ""},
		{"pinned to the first target", `{"model":"gpt",` + msgs + `,"route":{"provider":"openai"}}`, "openai", "gpt-4o-2024-08-06", "Bearer sk-openai-secret"},
		{"keyless first target skipped", `{"model":"fallback",` + msgs + `}`, "groq", "llama-3.3-70b", "Bearer gsk-groq-secret"},
		{"route without provider", `{"model":"fallback",` + msgs + `,"route":{}}`, "groq", "llama-3.3-70b", "Bearer gsk-groq-secret"},
		{"stream false", `{"model":"free",` + msgs + `,"stream":false}`, "local", "qwen2.5:7b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p, upstream, _ := firstAttempt(t, rt, tt.body)
			if p.Name != tt.provider {
				t.Errorf("provider = %s, want %s", p.Name, tt.provider)
			}
			up := decodeObject(t, upstream.Body)
			if got := jsonString(t, up["model"]); got != tt.model {
				t.Errorf("upstream model = %q, want %q", got, tt.model)
			}
			if got := upstream.Headers["authorization"]; got != tt.auth {
				t.Errorf("authorization = %q, want %q", got, tt.auth)
			}
		})
	}
}

func TestPlanChatAllRolesAccepted(t *testing.T) {
	rt := testRuntime()
	roles := []string{"system", "developer", "user", "assistant", "tool"}
	var msgs []map[string]string
	for _, r := range roles {
		msgs = append(msgs, map[string]string{"role": r, "content": "x"})
	}
	msgs[4]["tool_call_id"] = "call_1"
	body, _ := json.Marshal(map[string]any{"model": "free", "messages": msgs})
	if _, e := planChat(rt, body); e != nil {
		t.Fatalf("roles %v rejected: %v", roles, e)
	}
}

func TestPlanChatRemovedSorted(t *testing.T) {
	rt := testRuntime()
	body := `{"model":"gpt","messages":[{"role":"user","content":"hi"}],"zz":1,"aa":2,"mm":3,"seed":4,"temperature":1}`
	_, _, _, removed := firstAttempt(t, rt, body)
	if !sort.StringsAreSorted(removed) || len(removed) != 4 {
		t.Errorf("removed = %v, want 4 sorted names", removed)
	}
	if removed[0] != "aa" || removed[3] != "zz" {
		t.Errorf("removed = %v", removed)
	}
}

// TestPerProviderParameters: a provider's own list for a model replaces the model's list for
// attempts on that provider only.
func TestPerProviderParameters(t *testing.T) {
	g := testGateway()
	g.Models[0].Targets[1].SupportedParameters = []string{"temperature"} // local takes no max_tokens or tools
	rt := core.Compile(g, nil)
	body := []byte(`{"model":"gpt","messages":[{"role":"user","content":"hi"}],"temperature":1,"max_tokens":5,"seed":1}`)
	_, removed, err := AttemptRequest(rt, body, rt.Models["gpt"], rt.Providers["openai"])
	if err != nil || !reflect.DeepEqual(removed, []string{"seed"}) {
		t.Fatalf("openai removed %v (%v), want [seed]", removed, err)
	}
	up, removed, err := AttemptRequest(rt, body, rt.Models["gpt"], rt.Providers["local"])
	if err != nil || !reflect.DeepEqual(removed, []string{"max_tokens", "seed"}) {
		t.Fatalf("local removed %v (%v), want [max_tokens seed]", removed, err)
	}
	if _, ok := decodeObject(t, up.Body)["max_tokens"]; ok {
		t.Fatal("max_tokens reached a provider that does not accept it")
	}
}

// TestAttemptKeepsTheClientsOutputCap: the hold is sized from the client's output cap, so every
// attempt must carry that cap even when the model's parameter list names only the other cap
// field (o-series models take only max_completion_tokens; many servers only max_tokens). A cap
// the provider cannot see would let an answer cost more than its hold.
func TestAttemptKeepsTheClientsOutputCap(t *testing.T) {
	g := testGateway()
	g.Models = append(g.Models,
		ir.Model{ID: "capped", MaxOutputLength: 16384, SupportedParameters: []string{"max_tokens"},
			Targets: []ir.Target{{Provider: "local", Model: "llama3.2"}}},
		ir.Model{ID: "new-cap", SupportedParameters: []string{"max_completion_tokens"},
			Targets: []ir.Target{{Provider: "local", Model: "o3"}}},
		ir.Model{ID: "uncapped", MaxOutputLength: 100, SupportedParameters: []string{"temperature"},
			Targets: []ir.Target{{Provider: "local", Model: "x"}}},
	)
	rt := core.Compile(g, nil)
	cases := []struct {
		model, body, field string
		want               int64
	}{
		{"capped", `"max_completion_tokens":1`, "max_tokens", 1},
		{"capped", `"max_tokens":20000`, "max_tokens", 16384},
		{"capped", ``, "max_tokens", 16384},
		{"new-cap", `"max_tokens":7`, "max_completion_tokens", 7},
	}
	for _, c := range cases {
		body := `{"model":"` + c.model + `","messages":[{"role":"user","content":"hi"}]`
		if c.body != "" {
			body += "," + c.body
		}
		body += "}"
		up, _, err := AttemptRequest(rt, []byte(body), rt.Models[c.model], rt.Providers["local"])
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		got := decodeObject(t, up.Body)
		other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[c.field]
		if n, _ := strconv.ParseInt(string(got[c.field]), 10, 64); n != c.want || got[other] != nil {
			t.Errorf("%s: upstream %s=%s %s=%s, want %s=%d only", body, c.field, got[c.field], other, got[other], c.field, c.want)
		}
	}
	// A model whose providers carry no cap field at all: the hold cannot rely on the client's
	// cap, so it uses the model's own bound.
	if !rt.Models["capped"].CapCarried() || rt.Models["uncapped"].CapCarried() {
		t.Error("capCarried: want true for a model carrying max_tokens, false for one carrying neither cap")
	}
}
