package chat

// Fuzz target of request translation (Adapter.Chat) for every provider kind.

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

var kinds = []string{ir.ProviderTypeOpenAI, ir.ProviderTypeAnthropic, ir.ProviderTypeGemini}

// FuzzChat translates arbitrary chat requests. Every refusal is the client's fault
// (ErrBadRequest) in words a client reads, without Go type names; every translation is a JSON
// object without the client's gateway key, keeps every text the client sent, and (for the
// translating kinds) alternates user and assistant turns without empty ones.
func FuzzChat(f *testing.F) {
	paths, _ := filepath.Glob("testdata/chat/*.json")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for k := range kinds {
			f.Add(uint8(k), b)
		}
	}
	for _, s := range []string{
		`{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}},{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBE"}}]}],"stop":"END","max_tokens":5,"user":"u"}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":""}}]},{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"ok"}]}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","parallel_tool_calls":false}`,
		`{"messages":[{"role":"user","content":"a"}],"tools":"x","tool_choice":"sometimes","stream":"yes"}`,
		`{"messages":[{"role":"assistant","tool_calls":"x"}]}`,
		`{"messages":[{"role":"user","content":5}],"stop":[1]}`,
	} {
		for k := range kinds {
			f.Add(uint8(k), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		kind := kinds[int(k)%len(kinds)]
		var req provider.Request
		if json.Unmarshal(body, &req) != nil || req == nil {
			return // the planner refuses what is not a JSON object
		}
		a, err := For(kind, "")
		if err != nil {
			t.Fatal(err)
		}
		up, err := a.Chat(testProvider(kind), nil, "fuzz-model", maps.Clone(req))
		if err != nil {
			if !errors.Is(err, provider.ErrBadRequest) {
				t.Fatalf("%s refused with an internal error (a 500 for the client): %v", kind, err)
			}
			if leak := fuzzcheck.Leak(err.Error()); leak != "" {
				t.Fatalf("%s refusal shows the client Go vocabulary %q: %v", kind, leak, err)
			}
			return
		}
		checkUpstream(t, kind, req, up)
	})
}

func checkUpstream(t *testing.T, kind string, req provider.Request, up *provider.Upstream) {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(up.Body, &body); err != nil {
		t.Fatalf("%s body is not a JSON object: %v: %s", kind, err, up.Body)
	}
	if !strings.HasPrefix(up.Path, "/") {
		t.Fatalf("%s path %q", kind, up.Path)
	}
	if got, want := up.Headers["authorization"], map[string]string{ir.ProviderTypeOpenAI: "Bearer test-key"}[kind]; got != want {
		t.Fatalf("%s authorization header %q, want %q: the client's gateway key must never pass", kind, got, want)
	}
	if (up.Response == nil) != (kind == ir.ProviderTypeOpenAI) {
		t.Fatalf("%s: a response translator is needed exactly when the provider speaks another API", kind)
	}
	out := map[string]bool{}
	collectStrings(body, out)
	for _, text := range requestTexts(req) {
		found := false
		for s := range out {
			if strings.Contains(s, text) {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("%s dropped the text %q the client sent: %s", kind, text, up.Body)
		}
	}
	if kind == ir.ProviderTypeOpenAI {
		return // the body is the client's own, model name aside
	}
	var turns struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
		Contents []struct {
			Role  string            `json:"role"`
			Parts []json.RawMessage `json:"parts"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(up.Body, &turns); err != nil {
		t.Fatalf("%s turns: %v", kind, err)
	}
	prev := ""
	for i, m := range turns.Messages {
		if m.Role == prev || len(m.Content) == 0 || (m.Role != "user" && m.Role != "assistant") {
			t.Fatalf("anthropic turn %d (%s after %s, %d blocks): turns must alternate and not be empty: %s", i, m.Role, prev, len(m.Content), up.Body)
		}
		prev = m.Role
	}
	prev = ""
	for i, c := range turns.Contents {
		if c.Role == prev || len(c.Parts) == 0 || (c.Role != "user" && c.Role != "model") {
			t.Fatalf("gemini turn %d (%s after %s, %d parts): turns must alternate and not be empty: %s", i, c.Role, prev, len(c.Parts), up.Body)
		}
		prev = c.Role
	}
}

// requestTexts lists the non-empty texts of the request's messages: string contents and the
// text of text and refusal parts.
func requestTexts(req provider.Request) []string {
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(req["messages"], &msgs) != nil {
		return nil
	}
	var out []string
	for _, m := range msgs {
		var s string
		var parts []openai.Part
		switch {
		case json.Unmarshal(m.Content, &s) == nil:
			out = append(out, s)
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				if p.Type == "text" || p.Type == "refusal" {
					out = append(out, partText(p))
				}
			}
		}
	}
	nonEmpty := out[:0]
	for _, s := range out {
		if s != "" {
			nonEmpty = append(nonEmpty, s)
		}
	}
	return nonEmpty
}

func collectStrings(v any, out map[string]bool) {
	switch t := v.(type) {
	case string:
		out[t] = true
	case []any:
		for _, e := range t {
			collectStrings(e, out)
		}
	case map[string]any:
		for _, e := range t {
			collectStrings(e, out)
		}
	}
}

// TestChatRefusalsInJSONTerms: a request whose fields have the wrong JSON type is refused in
// the client's terms (the field, with its message index, and the JSON types), not with
// encoding/json's Go type names. Found by FuzzChat.
func TestChatRefusalsInJSONTerms(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"messages":[{"role":"user","content":"a"}],"tools":"x"}`, "tools must be an array, not a JSON string"},
		{`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":"f"}]}`,
			"tools[1].function must be an object, not a JSON string"},
		{`{"messages":{"role":"user"}}`, "messages must be an array, not a JSON object"},
		{`{"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":"x"}]}`, "messages[1].tool_calls must be an array, not a JSON string"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}]}`,
			"messages[0].tool_calls.function.arguments must be a string, not a JSON object"},
		{`{"messages":[{"role":7}]}`, "messages[0].role must be a string, not a JSON number"},
	} {
		for _, kind := range []string{ir.ProviderTypeAnthropic, ir.ProviderTypeGemini} {
			_, err := chat(t, kind, "m", tc.body)
			if !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s: err = %v, want ErrBadRequest saying %q", kind, tc.body, err, tc.want)
			}
			if err != nil && fuzzcheck.Leak(err.Error()) != "" {
				t.Errorf("%s: %v shows Go type names", kind, err)
			}
		}
	}
}
