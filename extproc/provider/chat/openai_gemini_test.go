package chat

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/xds/ir"
)

func TestGeminiGolden(t *testing.T) {
	t.Run("request", func(t *testing.T) { goldenRequests(t, ir.ProviderTypeGemini, "gemini-2.5-flash") })
	t.Run("response", func(t *testing.T) { goldenResponses(t, ir.ProviderTypeGemini, "gemini-2.5-flash") })
	t.Run("stream", func(t *testing.T) { goldenStreams(t, ir.ProviderTypeGemini, geminiExpect) })
}

// geminiExpect reads what a Gemini stream says, up to an error: its answer text and its
// function calls with their arguments as sent.
func geminiExpect(t *testing.T, in []byte) streamSummary {
	var s streamSummary
	var r sseReader
	err := r.feed(in, true, func(data []byte) error {
		var a struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text         string `json:"text"`
						Thought      bool   `json:"thought"`
						FunctionCall *struct {
							Name string          `json:"name"`
							Args json.RawMessage `json:"args"`
						} `json:"functionCall"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &a); err != nil {
			return err
		}
		if a.Error != nil {
			s.Error = "error"
		}
		if s.Error != "" || len(a.Candidates) == 0 {
			return nil
		}
		for _, p := range a.Candidates[0].Content.Parts {
			switch {
			case p.FunctionCall != nil:
				s.Calls = append(s.Calls, streamCall{Name: p.FunctionCall.Name, Args: string(p.FunctionCall.Args)})
			case !p.Thought:
				s.Text += p.Text
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return s
}

func TestGeminiPathAndHeaders(t *testing.T) {
	for _, tc := range []struct{ model, stream, path string }{
		{"gemini-2.5-flash", "false", "/models/gemini-2.5-flash:generateContent"},
		{"gemini-2.5-flash", "true", "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"},
		{"models/gemini-2.5-pro", "false", "/models/gemini-2.5-pro:generateContent"},
		{"odd/name x", "false", "/models/odd%2Fname%20x:generateContent"},
	} {
		up, err := chat(t, ir.ProviderTypeGemini, tc.model, `{"stream":`+tc.stream+`,"messages":[{"role":"user","content":"x"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		if up.Path != tc.path {
			t.Errorf("%s stream=%s: path %q, want %q", tc.model, tc.stream, up.Path, tc.path)
		}
		want := map[string]string{"x-goog-api-key": "test-key", "authorization": "", "content-type": "application/json"}
		if len(up.Headers) != len(want) {
			t.Errorf("headers %v, want %v", up.Headers, want)
		}
		for k, v := range want {
			if got, ok := up.Headers[k]; !ok || got != v {
				t.Errorf("header %s = %q (set %v), want %q", k, got, ok, v)
			}
		}
	}
}

func TestGeminiToolChoice(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	for _, tc := range []struct{ fields, want string }{
		{`,"tool_choice":"auto"`, `{"functionCallingConfig":{"mode":"AUTO"}}`},
		{`,"tool_choice":"none"`, `{"functionCallingConfig":{"mode":"NONE"}}`},
		{`,"tool_choice":"required"`, `{"functionCallingConfig":{"mode":"ANY"}}`},
		{`,"tool_choice":{"type":"function","function":{"name":"f"}}`, `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["f"]}}`},
		{``, ``},
	} {
		up, err := chat(t, ir.ProviderTypeGemini, "g", `{"messages":[{"role":"user","content":"x"}],`+tools+tc.fields+`}`)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			ToolConfig json.RawMessage `json:"toolConfig"`
		}
		json.Unmarshal(up.Body, &got)
		if string(got.ToolConfig) != tc.want {
			t.Errorf("%s: toolConfig %s, want %s", tc.fields, got.ToolConfig, tc.want)
		}
	}
}

func TestGeminiBadRequests(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown tool_call_id", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c2","content":"out"}]}`, `messages[2]: tool_call_id "c2"`},
		{"tool result before its call", `{"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c1","content":"out"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, `messages[1]`},
		{"bad tool arguments", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"not json"}}]}]}`, "messages[1].tool_calls[0] (f)"},
		{"data URL not base64", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,xyz"}}]}]}`, "image_url.url"},
		{"audio without format", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA"}}]}]}`, "input_audio"},
		{"file by id", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chat(t, ir.ProviderTypeGemini, "g", tc.body)
			if !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadRequest mentioning %q", err, tc.want)
			}
		})
	}
}

func TestGeminiAudioAndFile(t *testing.T) {
	up, err := chat(t, ir.ProviderTypeGemini, "g", `{"messages":[{"role":"user","content":[
		{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}},
		{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0=","filename":"a.pdf"}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `"parts":[{"inlineData":{"mimeType":"audio/wav","data":"UklGRg=="}},{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0="}}]`
	if !strings.Contains(string(up.Body), want) {
		t.Errorf("body %s lacks %s", up.Body, want)
	}
}

func TestGeminiBlockedPrompt(t *testing.T) {
	up, err := chat(t, ir.ProviderTypeGemini, "g", `{"messages":[{"role":"user","content":"x"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = up.Response.Body([]byte(`{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT","blockReasonMessage":"not allowed"},"usageMetadata":{"promptTokenCount":9}}`))
	var blocked *provider.BlockedError
	if !errors.As(err, &blocked) || blocked.Reason != "PROHIBITED_CONTENT" || !strings.Contains(err.Error(), "PROHIBITED_CONTENT") || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("err = %v, want a BlockedError naming the reason", err)
	}
	if _, err := up.Response.Body([]byte(`{"usageMetadata":{"promptTokenCount":9}}`)); err == nil || errors.As(err, &blocked) {
		t.Errorf("no candidates and no block reason: err = %v", err)
	}
}

func TestGeminiAgainstFake(t *testing.T) {
	fake := fakeupstream.Start(t, fakeupstream.Options{Name: "fake-gemini", APIKey: "test-key"})
	testAgainstFake(t, ir.ProviderTypeGemini, fake.GeminiURL())
	t.Run("blocked", func(t *testing.T) {
		up, err := chat(t, ir.ProviderTypeGemini, "g", `{"messages":[{"role":"user","content":"tell me `+fakeupstream.GeminiBlockTrigger+`"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		status, answer := fakeCall(t, fake.GeminiURL(), up)
		var blocked *provider.BlockedError
		if _, err := up.Response.Body(answer); status != http.StatusOK || !errors.As(err, &blocked) || blocked.Reason != "SAFETY" {
			t.Errorf("status %d, err %v", status, err)
		}
		_, s := viaFake(t, ir.ProviderTypeGemini, fake.GeminiURL(), `{"stream":true,"messages":[{"role":"user","content":"`+fakeupstream.GeminiBlockTrigger+`"}]}`)
		if !strings.Contains(s.Error, "SAFETY") || s.Done {
			t.Errorf("blocked stream %+v", s)
		}
	})
	for _, r := range fake.Requests() {
		if !strings.HasPrefix(r.Path, "/v1beta/models/") || r.Header.Get("Authorization") != "" || r.Header.Get("X-Goog-Api-Key") != "test-key" {
			t.Errorf("fake got %s with headers %v", r.Path, r.Header)
		}
	}
}

func TestGeminiRefusesCredential(t *testing.T) {
	r := newGeminiResponse("m")
	for _, c := range []struct {
		status int
		body   string
		want   bool
	}{
		{400, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}`, true},
		{403, `{"error":{"code":403,"message":"Method doesn't allow unregistered callers (callers without established identity).","status":"PERMISSION_DENIED"}}`, true},
		{400, `{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}`, false},
		{429, `{"error":{"code":429,"message":"API key not valid"}}`, false},
	} {
		if got := r.RefusesCredential(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%d %s: %v", c.status, c.body, got)
		}
	}
}
