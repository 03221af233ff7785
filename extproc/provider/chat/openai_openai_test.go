package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/xds/ir"
)

func TestForKnownAndUnknown(t *testing.T) {
	// Every type a configuration may name has a chat adapter or serves a media family, and every
	// media family has its task adapter.
	media := map[string]bool{}
	for fam, f := range ir.MediaFamilies {
		media[f.ProviderType] = true
		if ta, err := task.For(fam); err != nil || ta == nil {
			t.Errorf("family %s has no task adapter: %v", fam, err)
		}
	}
	for _, kind := range ir.ProviderTypes() {
		if a, err := For(kind, ""); (err != nil || a == nil) && !media[kind] {
			t.Errorf("type %q has neither a chat adapter nor a media family: %v", kind, err)
		}
	}
	// An I3 model's chat goes to the Gemini image adapter, whatever else the provider serves.
	if a, err := For(ir.ProviderTypeGemini, ir.ChatImageFamily); err != nil || a != (toGeminiImage{}) {
		t.Errorf("For(gemini, I3) = %T, %v; want the image adapter", a, err)
	}
	_, err := For("cohere", "")
	if err == nil {
		t.Fatal("For(anthropic) succeeded; there is no such adapter")
	}
	if !strings.Contains(err.Error(), `"cohere"`) {
		t.Errorf("error %q does not name the type", err)
	}
}

func TestOpenAIChat(t *testing.T) {
	a, err := For(ir.ProviderTypeOpenAI, "")
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]string{
		"messages":    `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"caf\u00e9 \"quoted\""}]}]`,
		"temperature": `0.70`,
		"max_tokens":  `1e3`,
		"tools":       `[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}]`,
		"metadata":    `{"z":1,"a":2}`,
		"stream":      `false`,
	}
	tests := []struct {
		name     string
		provider ir.Provider
		model    string
		auth     string
	}{
		{"with key", ir.Provider{Name: "openai", Type: "openai", NeedsKey: true, APIKey: "sk-123"}, "gpt-4o", "Bearer sk-123"},
		{"without key", ir.Provider{Name: "local", Type: "openai"}, "llama3.2", ""},
		{"model needing escapes", ir.Provider{Name: "local", Type: "openai"}, `org/model "v2"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := provider.Request{"model": json.RawMessage(`"client-model"`)}
			for k, v := range raw {
				req[k] = json.RawMessage(v)
			}
			up, err := a.Chat(&tt.provider, nil, tt.model, req)
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(up.Body, &got); err != nil {
				t.Fatalf("body %s: %v", up.Body, err)
			}
			var model string
			if err := json.Unmarshal(got["model"], &model); err != nil || model != tt.model {
				t.Errorf("model = %s, want %q", got["model"], tt.model)
			}
			for k, v := range raw {
				if string(got[k]) != v {
					t.Errorf("field %s = %s, want byte-identical %s", k, got[k], v)
				}
			}
			if len(got) != len(raw)+1 {
				t.Errorf("body has %d fields, want %d: %s", len(got), len(raw)+1, up.Body)
			}
			auth, ok := up.Headers["authorization"]
			if !ok {
				t.Fatal("no authorization entry: a keyless provider must still remove the client's header")
			}
			if auth != tt.auth {
				t.Errorf("authorization = %q, want %q", auth, tt.auth)
			}
			if len(up.Headers) != 1 {
				t.Errorf("headers = %v, want only authorization", up.Headers)
			}
		})
	}
}
