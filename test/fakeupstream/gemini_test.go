package fakeupstream

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func postGemini(t *testing.T, s *Server, key, pathTail, body string) *http.Response {
	t.Helper()
	h := map[string]string{}
	if key != "" {
		h["X-Goog-Api-Key"] = key
	}
	return postNative(t, s, "/v1beta/models/"+pathTail, h, body)
}

type geminiErr struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

func wantGeminiError(t *testing.T, resp *http.Response, code int, status, msgPart string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("status %d, want %d", resp.StatusCode, code)
	}
	e := decode[geminiErr](t, resp)
	if e.Error.Code != code || e.Error.Status != status || !strings.Contains(e.Error.Message, msgPart) {
		t.Errorf("error %+v, want %d %s mentioning %q", e, code, status, msgPart)
	}
}

type geminiOut struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         string `json:"text"`
				FunctionCall *struct {
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *geminiUsage `json:"usageMetadata"`
	ModelVersion  string       `json:"modelVersion"`
	ResponseID    string       `json:"responseId"`
}

const geminiWeather = `"tools":[{"functionDeclarations":[{"name":"get_weather","parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}}}}]}]`

func TestGeminiAuthAndValidation(t *testing.T) {
	s := Start(t, Options{APIKey: "g-key"})
	ok := `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`
	wantGeminiError(t, postGemini(t, s, "", "m:generateContent", ok), 403, "PERMISSION_DENIED", "unregistered callers")
	wantGeminiError(t, postGemini(t, s, "bad", "m:generateContent", ok), 400, "INVALID_ARGUMENT", "API key not valid")
	if resp := postNative(t, s, "/v1beta/models/m:generateContent?key=g-key", nil, ok); resp.StatusCode != 200 {
		t.Errorf("?key= auth: status %d", resp.StatusCode)
	}
	wantGeminiError(t, postGemini(t, s, "g-key", "m:countTokens", ok), 404, "NOT_FOUND", "")
	wantGeminiError(t, postGemini(t, s, "g-key", "m:streamGenerateContent", ok), 400, "INVALID_ARGUMENT", "alt=sse")
	for _, tc := range []struct{ body, msg string }{
		{`{}`, "contents is not specified"},
		{`{"contents":[{"role":"user","parts":[{"text":"x"}]}],"stream_options":{}}`, `Unknown name "stream_options"`},
		{`{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}`, "valid role"},
		{`{"contents":[{"role":"user","parts":[]}]}`, "must not be empty"},
		{`{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, "immediately after a function call turn"},
		{`{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"f"}},{"functionCall":{"name":"f"}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`, "number of function response parts"},
		{`{"contents":`, "Invalid JSON payload"},
	} {
		wantGeminiError(t, postGemini(t, s, "g-key", "m:generateContent", tc.body), 400, "INVALID_ARGUMENT", tc.msg)
	}
}

func TestGeminiReplies(t *testing.T) {
	s := Start(t, Options{Name: "up"})
	post := func(body string) geminiOut {
		t.Helper()
		resp := postGemini(t, s, "", "gem-x:generateContent", body)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return decode[geminiOut](t, resp)
	}
	g := post(`{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"AA=="}},{"text":"there"}]}]}`)
	if len(g.Candidates) != 1 || g.Candidates[0].FinishReason != "STOP" || g.Candidates[0].Content.Role != "model" ||
		g.Candidates[0].Content.Parts[0].Text != "Hello from up/gem-x: hi [image] there" || g.ModelVersion != "gem-x" || g.ResponseID == "" {
		t.Errorf("text reply %+v", g)
	}
	if u := g.UsageMetadata; u == nil || *u != (geminiUsage{5, 6, 11}) {
		t.Errorf("usage %+v", g.UsageMetadata)
	}

	g = post(`{"contents":[{"role":"user","parts":[{"text":"a b c"}]}],"generationConfig":{"maxOutputTokens":2}}`)
	if g.Candidates[0].FinishReason != "MAX_TOKENS" || g.Candidates[0].Content.Parts[0].Text != "Hello from " {
		t.Errorf("max tokens reply %+v", g)
	}

	for _, tc := range []struct{ config, want string }{
		{``, "get_weather"},
		{`,"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["other"]}}`, "other"},
		{`,"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}`, ""},
	} {
		g = post(`{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],` + geminiWeather + tc.config + `}`)
		p := g.Candidates[0].Content.Parts[0]
		if tc.want == "" {
			if p.FunctionCall != nil || p.Text == "" {
				t.Errorf("%s: want text, got %+v", tc.config, g)
			}
			continue
		}
		if p.FunctionCall == nil || p.FunctionCall.Name != tc.want || string(p.FunctionCall.Args) != toolArgs || g.Candidates[0].FinishReason != "STOP" {
			t.Errorf("%s: call reply %+v", tc.config, g)
		}
	}

	g = post(`{` + geminiWeather + `,"contents":[
		{"role":"user","parts":[{"text":"weather?"}]},
		{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}]},
		{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"content":"22C"}}},{"functionResponse":{"name":"get_weather","response":{"temp":25}}}]}]}`)
	if got := g.Candidates[0].Content.Parts[0].Text; got != `Tool said: {"temp":25}` {
		t.Errorf("after function responses: %q", got)
	}

	g = post(`{"contents":[{"role":"user","parts":[{"text":"please ` + GeminiBlockTrigger + `"}]}]}`)
	if len(g.Candidates) != 0 || g.PromptFeedback == nil || g.PromptFeedback.BlockReason != "SAFETY" || g.UsageMetadata == nil || g.UsageMetadata.PromptTokenCount != 2 {
		t.Errorf("blocked reply %+v", g)
	}
}

func TestGeminiStream(t *testing.T) {
	s := Start(t, Options{Name: "up"})
	for _, tc := range []struct {
		name, body, text, call string
		events                 int
	}{
		{"text", `{"contents":[{"role":"user","parts":[{"text":"one two"}]}]}`, "Hello from up/g: one two", "", 5},
		{"function call", `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],` + geminiWeather + `}`, "", "get_weather", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, err := readEvents(t, postGemini(t, s, "", "g:streamGenerateContent?alt=sse", tc.body), "\r\n")
			if err != nil || len(events) != tc.events {
				t.Fatalf("%d events, err %v", len(events), err)
			}
			var text strings.Builder
			for i, ev := range events {
				var g geminiOut
				if err := json.Unmarshal([]byte(ev.data), &g); err != nil || ev.name != "" {
					t.Fatalf("event %d: %v %q", i, err, ev)
				}
				last := i == len(events)-1
				c := g.Candidates[0]
				if (c.FinishReason == "STOP") != last || g.UsageMetadata == nil || (g.UsageMetadata.CandidatesTokenCount > 0) != last {
					t.Errorf("event %d: finish or usage in the wrong place: %s", i, ev.data)
				}
				for _, p := range c.Content.Parts {
					text.WriteString(p.Text)
					if p.FunctionCall != nil && (p.FunctionCall.Name != tc.call || string(p.FunctionCall.Args) != toolArgs) {
						t.Errorf("call %+v", p.FunctionCall)
					}
				}
			}
			if text.String() != tc.text {
				t.Errorf("text %q", text.String())
			}
		})
	}
}

func TestGeminiFaults(t *testing.T) {
	s := Start(t, Options{})
	body := `{"contents":[{"role":"user","parts":[{"text":"a b c d"}]}]}`
	s.FailNext(429, "")
	s.FailNext(503, "try later")
	wantGeminiError(t, postGemini(t, s, "", "g:generateContent", body), 429, "RESOURCE_EXHAUSTED", "exhausted")
	wantGeminiError(t, postGemini(t, s, "", "g:generateContent", body), 503, "UNAVAILABLE", "try later")

	s.CutStreamAfter(2)
	events, err := readEvents(t, postGemini(t, s, "", "g:streamGenerateContent?alt=sse", body), "\r\n")
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 2 {
		t.Fatalf("cut stream: %d events, err %v", len(events), err)
	}
	if resp := postGemini(t, s, "", "g:generateContent", body); resp.StatusCode != 200 {
		t.Errorf("after faults: %d", resp.StatusCode)
	}
}
