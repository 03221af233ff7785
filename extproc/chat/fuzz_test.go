package chat

// Fuzz target of the chat request path: the router-level plan (planChat) and the per-attempt
// rewrite (attempt) for every provider type.

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

var (
	errorCode = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	// gatewayOnly never reaches a provider, whatever the catalog says.
	gatewayOnly = []string{"route", "route_mode"}
)

// FuzzPlanChat plans arbitrary request bodies. A refusal is a 4xx/5xx with a snake_case code
// and a message without Go vocabulary. An accepted request names a cluster that exists with
// as many attempts as it has, and every attempt of it (every provider type) rewrites the body
// into a JSON request without gateway fields or removed parameters, or refuses it as the
// client's fault (a 400, never a 500) in words without Go vocabulary.
func FuzzPlanChat(f *testing.F) {
	paths, _ := filepath.Glob("../provider/chat/testdata/chat/*.json")
	if len(paths) == 0 {
		f.Fatal("no seeds in provider/chat/testdata/chat")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var req map[string]json.RawMessage
		if err := json.Unmarshal(b, &req); err != nil {
			f.Fatal(err)
		}
		for _, m := range []string{`"claude"`, `"route:chain"`, `"route:modes"`, `"gpt"`, `"flash"`, `"nb"`} {
			req["model"] = json.RawMessage(m)
			seed, _ := json.Marshal(req)
			f.Add(seed)
		}
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, s := range []string{
		`{"model":"claude",` + msgs + `,"stream":true,"stream_options":{"include_usage":false},"max_tokens":99999,"temperature":0.5,"seed":1}`,
		`{"model":"claude",` + msgs + `,"route":{"provider":"gemini"},"max_completion_tokens":5,"tools":"x"}`,
		`{"model":"route:modes",` + msgs + `,"route_mode":"fast","stream":false}`,
		`{"model":"route:modes",` + msgs + `,"route_mode":"deep"}`,
		`{"model":"route:off",` + msgs + `}`,
		`{"model":"gpt",` + msgs + `,"route":{"provider":"nokey"},"stream_options":5}`,
		`{"model":"fallback",` + msgs + `,"stream":true,"stream_options":null}`,
		`{"model":"flash","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"[]"}}]},{"role":"tool","tool_call_id":"b","content":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	rt := core.Compile(fuzzGateway(), nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		plan, e := planChat(rt, body)
		if e != nil {
			checkRefusal(t, e)
			return
		}
		for _, a := range planAttempts(t, rt, plan) {
			m, p := rt.Models[a.Model], rt.Providers[a.Provider]
			up, removed, err := AttemptRequest(rt, body, m, p)
			if err != nil {
				if !errors.Is(err, provider.ErrBadRequest) {
					t.Fatalf("accepted body fails its attempt on %s/%s with an internal error (Envoy answers 500): %v", a.Model, a.Provider, err)
				}
				checkRefusal(t, core.Errorf(http.StatusBadRequest, "invalid_request", "%v", err))
				continue
			}
			checkAttempt(t, p, removed, up)
		}
	})
}

func checkRefusal(t *testing.T, e *core.APIError) {
	t.Helper()
	if e.Status < 400 || e.Status > 599 || !errorCode.MatchString(e.Code) || e.Message == "" {
		t.Fatalf("refusal %d %q %q: want a 4xx/5xx, a snake_case code and a message", e.Status, e.Code, e.Message)
	}
	if leak := fuzzcheck.Leak(e.Message); leak != "" {
		t.Fatalf("refusal %s shows the client Go vocabulary %q: %s", e.Code, leak, e.Message)
	}
	if !json.Valid(e.Body("req-1")) {
		t.Fatalf("refusal body is not JSON: %s", e.Body("req-1"))
	}
}

// planAttempts checks that the plan's cluster exists as Envoy will have it and returns the
// attempts Envoy may make on it.
func planAttempts(t *testing.T, rt *core.Runtime, plan *chatPlan) []ir.Attempt {
	t.Helper()
	if plan.model == nil || len(plan.models) == 0 || slices.Contains(plan.models, nil) {
		t.Fatalf("plan without its models: %+v", plan)
	}
	if plan.pinned != "" {
		p := rt.Providers[plan.pinned]
		if p == nil || !p.Ready() || plan.cluster != p.ClusterName() || plan.attempts != 1 {
			t.Fatalf("pinned plan %+v: want the ready provider's own cluster, one attempt", plan)
		}
		return []ir.Attempt{{Model: plan.model.ID, Provider: plan.pinned}}
	}
	chain := rt.Chains[plan.cluster]
	if len(chain) == 0 || plan.attempts != len(chain) {
		t.Fatalf("plan names cluster %q with %d attempts; the runtime has %d", plan.cluster, plan.attempts, len(chain))
	}
	for _, a := range chain {
		if !slices.ContainsFunc(plan.models, func(m *core.Model) bool { return m.ID == a.Model }) {
			t.Fatalf("cluster %s may use model %s, which the plan's hold does not cover (%d models)", plan.cluster, a.Model, len(plan.models))
		}
	}
	return chain
}

func checkAttempt(t *testing.T, p *ir.Provider, removed []string, up *provider.Upstream) {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(up.Body, &body); err != nil {
		t.Fatalf("%s: upstream body is not a JSON object: %v: %s", p.Name, err, up.Body)
	}
	if !sort.StringsAreSorted(removed) {
		t.Fatalf("%s: removed %v is not sorted", p.Name, removed)
	}
	if p.Type != ir.ProviderTypeOpenAI {
		return // the adapter builds its own body from what it understands
	}
	for _, f := range append(slices.Clone(gatewayOnly), removed...) {
		if _, ok := body[f]; ok {
			t.Fatalf("%s: upstream body still has %q: %s", p.Name, f, up.Body)
		}
	}
}
