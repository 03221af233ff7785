package fakeupstream

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// postNative sends body to path below the server with the given headers.
func postNative(t *testing.T, s *Server, path string, header map[string]string, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+s.Addr()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func postAnthropic(t *testing.T, s *Server, key, body string) *http.Response {
	t.Helper()
	return postNative(t, s, "/v1/messages", map[string]string{"X-Api-Key": key, "Anthropic-Version": "2023-06-01"}, body)
}

type anthropicErr struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func wantAnthropicError(t *testing.T, resp *http.Response, status int, typ, msgPart string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d", resp.StatusCode, status)
	}
	e := decode[anthropicErr](t, resp)
	if e.Type != "error" || e.Error.Type != typ || !strings.Contains(e.Error.Message, msgPart) {
		t.Errorf("error %+v, want type %s mentioning %q", e, typ, msgPart)
	}
}

type anthropicOut struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage anthropicUsage `json:"usage"`
}

const anthropicWeather = `"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`

func TestAnthropicAuthAndValidation(t *testing.T) {
	s := Start(t, Options{APIKey: "sk-ant"})
	ok := `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"x"}]}`
	wantAnthropicError(t, postNative(t, s, "/v1/messages", map[string]string{"Anthropic-Version": "2023-06-01"}, ok), 401, "authentication_error", "x-api-key")
	wantAnthropicError(t, postAnthropic(t, s, "wrong", ok), 401, "authentication_error", "invalid x-api-key")
	// A Bearer token is not how Anthropic authenticates.
	wantAnthropicError(t, postNative(t, s, "/v1/messages", map[string]string{"Authorization": "Bearer sk-ant", "Anthropic-Version": "2023-06-01"}, ok), 401, "authentication_error", "x-api-key")
	wantAnthropicError(t, postNative(t, s, "/v1/messages", map[string]string{"X-Api-Key": "sk-ant"}, ok), 400, "invalid_request_error", "anthropic-version")
	for _, tc := range []struct{ body, msg string }{
		{`{"model":"claude","messages":[{"role":"user","content":"x"}]}`, "max_tokens: Field required"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "model: Field required"},
		{`{"model":"claude","max_tokens":5,"messages":[]}`, "at least one message"},
		{`{"model":"claude","max_tokens":5,"stream_options":{},"messages":[{"role":"user","content":"x"}]}`, "stream_options: Extra inputs are not permitted"},
		{`{"model":"claude","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "messages.0.role"},
		{`{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "non-empty"},
		// Tool results must answer the tool_use turn right before, all of them in one turn.
		{`{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}]}`, "unexpected `tool_use_id`"},
		{`{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"b"}]}]}`, "without `tool_result`"},
		{`{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "without `tool_result`"},
		{`{"model":`, "parsing"},
	} {
		wantAnthropicError(t, postAnthropic(t, s, "sk-ant", tc.body), 400, "invalid_request_error", tc.msg)
	}
	if n := len(s.Requests()); n != 14 {
		t.Errorf("recorded %d requests, want 14 (rejected ones too)", n)
	}
}

func TestAnthropicReplies(t *testing.T) {
	s := Start(t, Options{Name: "up"})
	post := func(body string) anthropicOut {
		t.Helper()
		resp := postAnthropic(t, s, "", body)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return decode[anthropicOut](t, resp)
	}

	m := post(`{"model":"claude-x","max_tokens":100,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}},{"type":"text","text":"there"}]}]}`)
	if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "claude-x" || m.StopReason != "end_turn" ||
		len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != "Hello from up/claude-x: hi [image] there" {
		t.Errorf("text reply %+v", m)
	}
	if m.Usage.anthropicCounts != (anthropicCounts{InputTokens: 5, OutputTokens: 6}) || m.Usage.Iterations != nil {
		t.Errorf("usage %+v", m.Usage)
	}

	m = post(`{"model":"c","max_tokens":2,"messages":[{"role":"user","content":"a b c"}]}`)
	if m.StopReason != "max_tokens" || m.Content[0].Text != "Hello from " {
		t.Errorf("max_tokens reply %+v", m)
	}

	for _, tc := range []struct{ choice, want string }{
		{``, "get_weather"},
		{`,"tool_choice":{"type":"any"}`, "get_weather"},
		{`,"tool_choice":{"type":"tool","name":"other"}`, "other"},
		{`,"tool_choice":{"type":"none"}`, ""},
	} {
		m = post(`{"model":"c","max_tokens":100,"messages":[{"role":"user","content":"weather?"}],` + anthropicWeather + tc.choice + `}`)
		if tc.want == "" {
			if m.StopReason != "end_turn" || m.Content[0].Type != "text" {
				t.Errorf("%s: want text, got %+v", tc.choice, m)
			}
			continue
		}
		if m.StopReason != "tool_use" || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Name != tc.want ||
			!strings.HasPrefix(m.Content[0].ID, "toolu_") || string(m.Content[0].Input) != toolArgs {
			t.Errorf("%s: tool reply %+v", tc.choice, m)
		}
	}

	// The loop's second step: the results come back in one user turn.
	m = post(`{"model":"c","max_tokens":100,` + anthropicWeather + `,"messages":[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"t2","name":"get_weather","input":{"city":"Rome"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"22C"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"25C"}]}]}]}`)
	if m.StopReason != "end_turn" || m.Content[0].Text != "Tool said: 25C" {
		t.Errorf("after tool results: %+v", m)
	}
}

type sseEvent struct{ name, data string }

// readEvents reads a stream of "event: X\ndata: Y" events, and the error that ended it early.
func readEvents(t *testing.T, resp *http.Response, sep string) ([]sseEvent, error) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q", ct)
	}
	var events []sseEvent
	var cur sseEvent
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" {
				return events, nil
			}
			return events, err
		}
		if !strings.HasSuffix(line, sep) {
			t.Fatalf("line %q does not end with %q", line, sep)
		}
		line = strings.TrimSuffix(line, sep)
		switch {
		case line == "":
			events = append(events, cur)
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// anthropicEvent is what the stream tests read of an event.
type anthropicEvent struct {
	Type  string `json:"type"`
	Delta struct {
		Text       string `json:"text"`
		StopReason string `json:"stop_reason"`
	} `json:"delta"`
	Usage   *anthropicUsage `json:"usage"`
	Message struct {
		Usage anthropicUsage `json:"usage"`
	} `json:"message"`
}

func TestAnthropicStream(t *testing.T) {
	s := Start(t, Options{Name: "up"})
	events, err := readEvents(t, postAnthropic(t, s, "", `{"model":"c","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"one two"}]}`), "\n")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var text strings.Builder
	for _, ev := range events {
		names = append(names, ev.name)
		var d anthropicEvent
		if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.Type != ev.name {
			t.Fatalf("event %s: %v %s", ev.name, err, ev.data)
		}
		text.WriteString(d.Delta.Text)
		switch ev.name {
		case "message_start":
			if d.Message.Usage.InputTokens != 2 {
				t.Errorf("message_start usage %+v", d.Message.Usage)
			}
		case "message_delta":
			if d.Delta.StopReason != "end_turn" || d.Usage == nil || d.Usage.OutputTokens != 5 {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Errorf("events %v", names)
	}
	if text.String() != "Hello from up/c: one two" {
		t.Errorf("text %q", text.String())
	}
}

func TestAnthropicStreamToolUse(t *testing.T) {
	s := Start(t, Options{})
	events, err := readEvents(t, postAnthropic(t, s, "", `{"model":"c","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"weather?"}],`+anthropicWeather+`}`), "\n")
	if err != nil {
		t.Fatal(err)
	}
	var args strings.Builder
	pieces := 0
	for _, ev := range events {
		var d struct {
			ContentBlock struct{ Type, ID, Name string } `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
		}
		json.Unmarshal([]byte(ev.data), &d)
		switch ev.name {
		case "content_block_start":
			if d.ContentBlock.Type != "tool_use" || d.ContentBlock.Name != "get_weather" || !strings.HasPrefix(d.ContentBlock.ID, "toolu_") {
				t.Errorf("block start %s", ev.data)
			}
		case "content_block_delta":
			if d.Delta.Type != "input_json_delta" {
				t.Errorf("delta %s", ev.data)
			}
			args.WriteString(d.Delta.PartialJSON)
			pieces++
		case "message_delta":
			if d.Delta.StopReason != "tool_use" {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	if args.String() != toolArgs || pieces < 3 {
		t.Errorf("input %q in %d pieces", args.String(), pieces)
	}
}

func TestAnthropicFaults(t *testing.T) {
	s := Start(t, Options{})
	body := `{"model":"c","max_tokens":100,"messages":[{"role":"user","content":"x"}]}`
	s.FailNext(429, "")
	s.FailNext(529, "")
	s.Script(Fault{Status: 500, Message: "boom"})
	wantAnthropicError(t, postAnthropic(t, s, "", body), 429, "rate_limit_error", "rate limit")
	wantAnthropicError(t, postAnthropic(t, s, "", body), 529, "overloaded_error", "Overloaded")
	wantAnthropicError(t, postAnthropic(t, s, "", body), 500, "api_error", "boom")

	s.CutStreamAfter(3)
	events, err := readEvents(t, postAnthropic(t, s, "", strings.Replace(body, `"model"`, `"stream":true,"model"`, 1)), "\n")
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 3 {
		t.Fatalf("cut stream: %d events, err %v", len(events), err)
	}
	s.CutStreamAfter(0)
	if _, err := io.ReadAll(postAnthropic(t, s, "", body).Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut body: err %v", err)
	}
	if resp := postAnthropic(t, s, "", body); resp.StatusCode != 200 {
		t.Errorf("after faults: %d", resp.StatusCode)
	}
}

func TestNativeURLs(t *testing.T) {
	s := Start(t, Options{})
	if s.AnthropicURL() != "http://"+s.Addr()+"/v1" || s.GeminiURL() != "http://"+s.Addr()+"/v1beta" {
		t.Errorf("AnthropicURL %s, GeminiURL %s", s.AnthropicURL(), s.GeminiURL())
	}
}

// TestAnthropicIterationsFake: the compaction and advisor triggers answer as the API does with
// server-side iterations: the leading blocks, usage.iterations, top-level counts covering only
// the message (compaction) or the executor (advisor); streamed, message_start reports the
// first iteration's input and message_delta the rest.
func TestAnthropicIterationsFake(t *testing.T) {
	s := Start(t, Options{Name: "up"})
	type out struct {
		Content []struct{ Type string }
		Usage   anthropicUsage
	}
	// "one two #compaction": 3 prompt tokens; the answer "Hello from up/c: one two #compaction" 6.
	m := decode[out](t, postAnthropic(t, s, "", `{"model":"c","max_tokens":100,"messages":[{"role":"user","content":"one two `+AnthropicCompactionTrigger+`"}]}`))
	compaction := anthropicCounts{InputTokens: 3, CacheReadInputTokens: AnthropicCompactionCacheRead, OutputTokens: AnthropicCompactionOutput}
	message := anthropicCounts{InputTokens: AnthropicCompactedInput, OutputTokens: 6}
	if len(m.Content) != 2 || m.Content[0].Type != "compaction" || m.Content[1].Type != "text" || m.Usage.anthropicCounts != message ||
		len(m.Usage.Iterations) != 2 || m.Usage.Iterations[0] != (anthropicIteration{Type: "compaction", anthropicCounts: compaction}) ||
		m.Usage.Iterations[1] != (anthropicIteration{Type: "message", anthropicCounts: message}) {
		t.Fatalf("compaction %+v", m)
	}
	m = decode[out](t, postAnthropic(t, s, "", `{"model":"c","max_tokens":100,"messages":[{"role":"user","content":"two `+AnthropicAdvisorTrigger+`claude-opus-4-8"}]}`))
	its := m.Usage.Iterations
	if len(m.Content) != 3 || m.Content[0].Type != "server_tool_use" || m.Content[1].Type != "advisor_tool_result" || len(its) != 3 ||
		its[1].Model != "claude-opus-4-8" || its[1].InputTokens != AnthropicAdvisorInput || its[0].Model != "" ||
		m.Usage.InputTokens != 2+AnthropicAdvisorResumeInput || m.Usage.OutputTokens != AnthropicAdvisorCallOutput+5 {
		t.Fatalf("advisor %+v", m)
	}
	events, err := readEvents(t, postAnthropic(t, s, "", `{"model":"c","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"one two `+AnthropicCompactionTrigger+`"}]}`), "\n")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range events {
		names = append(names, ev.name)
		var d anthropicEvent
		_ = json.Unmarshal([]byte(ev.data), &d)
		switch ev.name {
		case "message_start":
			if d.Message.Usage.CacheReadInputTokens != AnthropicCompactionCacheRead || d.Message.Usage.Iterations != nil {
				t.Errorf("message_start %s", ev.data)
			}
		case "message_delta":
			if d.Usage == nil || d.Usage.anthropicCounts != message || len(d.Usage.Iterations) != 2 {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	if got := strings.Join(names[:5], " "); got != "message_start content_block_start content_block_delta content_block_stop content_block_start" {
		t.Errorf("events %v", names)
	}
}
