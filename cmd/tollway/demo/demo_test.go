package demo

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func post(t *testing.T, s *Server, body string) *http.Response {
	t.Helper()
	resp, err := http.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type toolCallOut struct {
	Index int `json:"index"` // streamed calls only
	openai.ToolCall
}

type completionOut struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Message struct {
			Role      string        `json:"role"`
			Content   *string       `json:"content"`
			ToolCalls []toolCallOut `json:"tool_calls"`
		} `json:"message"`
		Delta struct {
			Content   *string       `json:"content"`
			ToolCalls []toolCallOut `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

func complete(t *testing.T, s *Server, body string) completionOut {
	t.Helper()
	resp := post(t, s, body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var c completionOut
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-demo") || c.SystemFingerprint != Fingerprint || len(c.Choices) != 1 || c.Usage == nil {
		t.Fatalf("not a demo chat.completion: %+v", c)
	}
	if u := *c.Usage; u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.CompletionTokens == 0 {
		t.Errorf("usage %+v", u)
	}
	return c
}

// stream returns the chunks of a streamed answer, which must end with [DONE].
func stream(t *testing.T, s *Server, body string) []completionOut {
	t.Helper()
	resp := post(t, s, body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []completionOut
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || done {
			t.Fatalf("unexpected line %q (after [DONE]: %v)", line, done)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c completionOut
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil || !done {
		t.Fatalf("stream ended without [DONE]: %v", err)
	}
	return out
}

func TestTextAnswer(t *testing.T) {
	s := start(t, Options{})
	c := complete(t, s, `{"model":"demo-chat","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`)
	ch := c.Choices[0]
	want := `Tollway demo model (offline, no LLM): you said "Hello there".`
	if ch.Message.Role != "assistant" || ch.Message.Content == nil || *ch.Message.Content != want || *ch.FinishReason != "stop" {
		t.Errorf("answer %+v %q, want %q", ch, *ch.Message.Content, want)
	}
	if c.Model != "demo-chat" {
		t.Errorf("model %q", c.Model)
	}
	if u := *c.Usage; u.PromptTokens != 4 || u.CompletionTokens != int64(len(Pieces(want))) {
		t.Errorf("usage %+v: want 4 prompt words and one completion token per piece", u)
	}

	// Parts are flattened and long prompts are cut.
	c = complete(t, s, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:,"}}]}]}`)
	if got := *c.Choices[0].Message.Content; got != Prefix+`you said "look [image]".` {
		t.Errorf("parts: %q", got)
	}
	long := strings.Repeat("ab ", 500)
	c = complete(t, s, `{"model":"m","messages":[{"role":"user","content":"`+long+`"}]}`)
	if got := *c.Choices[0].Message.Content; len(got) > len(Prefix)+maxEcho+20 || !strings.HasSuffix(got, `...".`) {
		t.Errorf("long prompt echoed as %q", got)
	}
}

func TestOutputCap(t *testing.T) {
	s := start(t, Options{})
	for _, field := range []string{"max_tokens", "max_completion_tokens"} {
		c := complete(t, s, `{"model":"m","`+field+`":3,"messages":[{"role":"user","content":"a b c d"}]}`)
		if got := *c.Choices[0].Message.Content; got != "Tollway demo model " || *c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 3 {
			t.Errorf("%s: %q finish %q usage %+v", field, got, *c.Choices[0].FinishReason, c.Usage)
		}
	}
}

func TestStreamMatchesWholeAnswer(t *testing.T) {
	s := start(t, Options{ChunkDelay: time.Millisecond})
	const msgs = `"messages":[{"role":"user","content":"stream me"}]`
	whole := complete(t, s, `{"model":"m",`+msgs+`}`)
	for _, usage := range []bool{false, true} {
		body := `{"model":"m","stream":true,` + msgs + `}`
		if usage {
			body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`
		}
		cs := stream(t, s, body)
		if usage {
			last := cs[len(cs)-1]
			if len(last.Choices) != 0 || last.Usage == nil || !reflect.DeepEqual(*last.Usage, *whole.Usage) {
				t.Fatalf("usage chunk %+v, want usage %+v", last, whole.Usage)
			}
			cs = cs[:len(cs)-1]
		}
		var text strings.Builder
		for i, c := range cs {
			if c.Usage != nil || len(c.Choices) != 1 || c.ID != cs[0].ID {
				t.Fatalf("chunk %d: %+v", i, c)
			}
			if d := c.Choices[0].Delta.Content; d != nil {
				text.WriteString(*d)
			}
			if fr := c.Choices[0].FinishReason; (fr != nil) != (i == len(cs)-1) || (fr != nil && *fr != "stop") {
				t.Errorf("chunk %d: finish_reason %v", i, fr)
			}
		}
		if text.String() != *whole.Choices[0].Message.Content {
			t.Errorf("include_usage=%v: streamed %q, whole %q", usage, text.String(), *whole.Choices[0].Message.Content)
		}
	}
}

const weatherTool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
	"properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},
	"required":["city","unit"]}}}`
const timeTool = `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"timezone":{"type":"string","default":"UTC"}}}}}`

func TestToolCallLoop(t *testing.T) {
	s := start(t, Options{})
	const msgs = `"messages":[{"role":"user","content":"Weather in Paris?"}]`
	tools := `"tools":[` + weatherTool + `,` + timeTool + `]`
	for _, tc := range []struct{ choice, name, args string }{
		{``, "get_weather", `{"city":"Paris","unit":"celsius"}`},
		{`,"tool_choice":"auto"`, "get_weather", `{"city":"Paris","unit":"celsius"}`},
		{`,"tool_choice":"required"`, "get_weather", `{"city":"Paris","unit":"celsius"}`},
		{`,"tool_choice":{"type":"function","function":{"name":"get_time"}}`, "get_time", `{"timezone":"UTC"}`},
		{`,"tool_choice":{"type":"function","function":{"name":"not_offered"}}`, "not_offered", `{}`},
		{`,"tool_choice":"none"`, "", ""},
	} {
		c := complete(t, s, `{"model":"m",`+msgs+`,`+tools+tc.choice+`}`)
		ch := c.Choices[0]
		if tc.name == "" {
			if len(ch.Message.ToolCalls) != 0 || ch.Message.Content == nil || *ch.FinishReason != "stop" {
				t.Errorf("%s: want text, got %+v", tc.choice, ch)
			}
			continue
		}
		if *ch.FinishReason != "tool_calls" || ch.Message.Content != nil || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("%s: want one tool call, got %+v", tc.choice, ch)
		}
		call := ch.Message.ToolCalls[0]
		if !strings.HasPrefix(call.ID, "call_demo") || call.Type != "function" || call.Function.Name != tc.name || call.Function.Arguments != tc.args {
			t.Errorf("%s: call %+v, want %s(%s)", tc.choice, call, tc.name, tc.args)
		}
	}

	// Step two: the tool's result comes back and is answered in text, naming the tool.
	c := complete(t, s, `{"model":"m",`+tools+`,"messages":[
		{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_7","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_7","content":"22 C and sunny"}]}`)
	if got, want := *c.Choices[0].Message.Content, Prefix+`get_weather returned "22 C and sunny".`; got != want || *c.Choices[0].FinishReason != "stop" {
		t.Errorf("after the tool result: %q, want %q", got, want)
	}
}

func TestStreamedToolCall(t *testing.T) {
	s := start(t, Options{})
	cs := stream(t, s, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"tools":[`+weatherTool+`],"messages":[{"role":"user","content":"Weather?"}]}`)
	if last := cs[len(cs)-1]; last.Usage == nil || last.Usage.CompletionTokens != int64(len(cs)-3) {
		t.Errorf("usage chunk %+v: want one completion token per argument chunk (%d)", last.Usage, len(cs)-3)
	}
	var id, name, args string
	for _, c := range cs[:len(cs)-1] {
		for _, tc := range c.Choices[0].Delta.ToolCalls {
			if tc.Index != 0 {
				t.Fatalf("index %d", tc.Index)
			}
			id, name, args = id+tc.ID, name+tc.Function.Name, args+tc.Function.Arguments
		}
	}
	if !strings.HasPrefix(id, "call_demo") || name != "get_weather" || args != `{"city":"Paris","unit":"celsius"}` {
		t.Errorf("assembled %s %s(%s)", id, name, args)
	}
	if fr := cs[len(cs)-2].Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Errorf("finish_reason %v", fr)
	}
}

func TestToolArguments(t *testing.T) {
	req := &ChatRequest{openai.ChatRequest{Messages: []openai.Message{{Role: "user", Content: json.RawMessage(`"find cheap flights"`)}}}}
	nested := `{"type":"object","properties":{"a":` + strings.Repeat(`{"type":"object","required":["a"],"properties":{"a":`, 20) + `{"type":"string"}` + strings.Repeat(`}}`, 20) + `},"required":["a"]}`
	for _, tc := range []struct{ schema, want string }{
		{``, `{}`},
		{`{"type":"object","properties":{}}`, `{}`},
		{`{"type":"string"}`, `{}`}, // arguments are always an object
		{`{"type":"object","properties":{"q":{"type":"string"},"when":{"type":"string","format":"date"}}}`,
			`{"q":"find cheap flights","when":"2026-01-15"}`}, // no required list: every property
		{`{"type":"object","required":["n","x","ok","tags","mode","c"],"properties":{
			"n":{"type":"integer","minimum":3},"x":{"type":"number"},"ok":{"type":"boolean"},
			"tags":{"type":"array","items":{"type":"string","examples":["red"]}},
			"mode":{"anyOf":[{"const":"fast"},{"type":"null"}]},"c":{"type":["null","string"],"description":"country"}}}`,
			`{"c":"example","mode":"fast","n":3,"ok":true,"tags":["red"],"x":1.5}`},
		{`{"properties":{"email":{"type":"string"},"user_name":{}}}`, `{"email":"ada@example.com","user_name":"Ada"}`},
		{nested, ""}, // deeper than maxDepth: cut, still valid JSON
	} {
		got := toolArguments(json.RawMessage(tc.schema), req)
		if !json.Valid([]byte(got)) || (tc.want != "" && got != tc.want) {
			t.Errorf("schema %s:\n got %s\nwant %s", tc.schema, got, tc.want)
		}
	}
}

func TestArgumentPieces(t *testing.T) {
	for _, args := range []string{`{}`, `{"city":"Paris","unit":"celsius"}`, `{"city":"Zürich—Genève"}`} {
		pieces := argumentPieces(args)
		if strings.Join(pieces, "") != args {
			t.Errorf("%q: pieces %q do not join back", args, pieces)
		}
		for _, p := range pieces {
			if !utf8.ValidString(p) {
				t.Errorf("%q: piece %q splits a rune", args, p)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	s := start(t, Options{})
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":`, 400, ""},
		{`[]`, 400, ""},
		{`{"messages":[{"role":"user","content":"x"}]}`, 400, ""},
		{`{"model":"m"}`, 400, "missing_required_parameter"},
		{`{"model":"m","messages":[]}`, 400, "empty_array"},
		{`{"model":"m","messages":"hi"}`, 400, "invalid_type"},
		{`{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_type"},
	} {
		wantError(t, post(t, s, tc.body), tc.status, tc.code)
	}
	resp, err := http.Get("http://" + s.Addr() + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantError(t, resp, 405, "method_not_allowed")
	resp, err = http.Get("http://" + s.Addr() + "/v1/embeddings")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantError(t, resp, 405, "method_not_allowed")
	resp, err = http.Get("http://" + s.Addr() + "/v1/audio/speech")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantError(t, resp, 404, "not_found")
}

func wantError(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &e); err != nil || resp.StatusCode != status || e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
		t.Errorf("got %d %s, want %d with an OpenAI error", resp.StatusCode, raw, status)
		return
	}
	if got := ""; e.Error.Code != nil && *e.Error.Code != code || e.Error.Code == nil && code != got {
		t.Errorf("code %v, want %q: %s", e.Error.Code, code, raw)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	s, err := Start(Options{ChunkDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+s.Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the first chunk came
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on an open stream")
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the stream ended cleanly after Close; want it cut")
	}
}
