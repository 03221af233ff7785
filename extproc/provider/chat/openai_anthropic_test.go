package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/apischema/anthropic"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/xds/ir"
)

func TestAnthropicGolden(t *testing.T) {
	t.Run("request", func(t *testing.T) { goldenRequests(t, ir.ProviderTypeAnthropic, "claude-sonnet-4-5") })
	t.Run("response", func(t *testing.T) { goldenResponses(t, ir.ProviderTypeAnthropic, "claude-sonnet-4-5") })
	t.Run("stream", func(t *testing.T) { goldenStreams(t, ir.ProviderTypeAnthropic, anthropicExpect) })
}

// anthropicExpect reads what an Anthropic stream says, up to an error event: its text and
// its tool calls with their input pieces joined.
func anthropicExpect(t *testing.T, in []byte) streamSummary {
	var s streamSummary
	calls := map[int]int{}
	var r sseReader
	err := r.feed(in, true, func(data []byte) error {
		var ev anthropic.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return err
		}
		switch {
		case s.Error != "":
		case ev.Type == "error":
			s.Error = "error"
		case ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use":
			calls[ev.Index] = len(s.Calls)
			s.Calls = append(s.Calls, streamCall{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name})
		case ev.Type == "content_block_delta":
			s.Text += ev.Delta.Text
			if n, ok := calls[ev.Index]; ok {
				s.Calls[n].Args += ev.Delta.PartialJSON
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	for i, c := range s.Calls {
		if c.Args == "" {
			s.Calls[i].Args, c.Args = "{}", "{}" // a call without parameters streams no input
		}
		if !json.Valid([]byte(c.Args)) {
			t.Fatalf("fixture: the pieces of %s do not join into JSON: %s", c.Name, c.Args)
		}
	}
	return s
}

func TestAnthropicHeaders(t *testing.T) {
	up, err := chat(t, ir.ProviderTypeAnthropic, "claude", `{"messages":[{"role":"user","content":"x"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"x-api-key": "test-key", "anthropic-version": "2023-06-01", "authorization": "", "content-type": "application/json"}
	if len(up.Headers) != len(want) {
		t.Errorf("headers %v, want %v", up.Headers, want)
	}
	for k, v := range want {
		if got, ok := up.Headers[k]; !ok || got != v {
			t.Errorf("header %s = %q (set %v), want %q", k, got, ok, v)
		}
	}
	if up.Path != "/messages" || up.Response == nil {
		t.Errorf("path %q, response %v", up.Path, up.Response)
	}
}

// anthropicBody translates a request and decodes the fields a test looks at.
func anthropicBody(t *testing.T, body string) anthropic.Request {
	t.Helper()
	up, err := chat(t, ir.ProviderTypeAnthropic, "claude", body)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	var got anthropic.Request
	if err := json.Unmarshal(up.Body, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAnthropicMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		fields string
		want   int64
	}{
		{``, anthropicDefaultMaxTokens},
		{`,"max_tokens":50`, 50},
		{`,"max_tokens":50,"max_completion_tokens":70`, 70},
		{`,"max_completion_tokens":null,"max_tokens":20`, 20},
	} {
		got := anthropicBody(t, `{"messages":[{"role":"user","content":"x"}]`+tc.fields+`}`)
		if got.MaxTokens != tc.want {
			t.Errorf("%s: max_tokens %d, want %d", tc.fields, got.MaxTokens, tc.want)
		}
	}
}

func TestAnthropicToolChoice(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"f"}}]`
	for _, tc := range []struct {
		fields string
		want   string // tool_choice as JSON, "" for none
	}{
		{`,"tool_choice":"auto"`, `{"type":"auto"}`},
		{`,"tool_choice":"none"`, `{"type":"none"}`},
		{`,"tool_choice":"required"`, `{"type":"any"}`},
		{`,"tool_choice":{"type":"function","function":{"name":"f"}}`, `{"type":"tool","name":"f"}`},
		{``, ``},
		{`,"parallel_tool_calls":false`, `{"type":"auto","disable_parallel_tool_use":true}`},
		{`,"parallel_tool_calls":true,"tool_choice":"required"`, `{"type":"any"}`},
		{`,"parallel_tool_calls":false,"tool_choice":"none"`, `{"type":"none"}`},
	} {
		got := anthropicBody(t, `{"messages":[{"role":"user","content":"x"}],`+tools+tc.fields+`}`)
		var choice string
		if got.ToolChoice != nil {
			choice = string(provider.Marshal(got.ToolChoice))
		}
		if choice != tc.want {
			t.Errorf("%s: tool_choice %s, want %s", tc.fields, choice, tc.want)
		}
	}
	// Without tools a tool_choice means nothing, and Anthropic would refuse it.
	if got := anthropicBody(t, `{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`); got.ToolChoice != nil {
		t.Errorf("tool_choice without tools: %+v", got.ToolChoice)
	}
}

func TestAnthropicBadRequests(t *testing.T) {
	user := func(content string) string { return `{"messages":[{"role":"user","content":` + content + `}]}` }
	for _, tc := range []struct{ name, body, want string }{
		{"bad tool arguments", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"city\":"}}]}]}`, "messages[1].tool_calls[0] (f)"},
		{"arguments not an object", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "must be a JSON object"},
		{"audio", user(`[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]`), `messages[0]: content part type "input_audio"`},
		{"data URL not base64", user(`[{"type":"image_url","image_url":{"url":"data:image/svg+xml,<svg/>"}}]`), "must be base64"},
		{"ftp image", user(`[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]`), "http(s)"},
		{"non-PDF file", user(`[{"type":"file","file":{"file_data":"data:text/csv;base64,YQ=="}}]`), "PDF"},
		{"image in a system message", `{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "text only"},
		{"unknown role", `{"messages":[{"role":"function","content":"x"}]}`, `role "function"`},
		{"bad tool_choice", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`, "tool_choice"},
		{"non-function tool", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search"}]}`, "tools[0]"},
		{"bad stop", `{"messages":[{"role":"user","content":"x"}],"stop":5}`, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chat(t, ir.ProviderTypeAnthropic, "claude", tc.body)
			if !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadRequest mentioning %q", err, tc.want)
			}
		})
	}
}

func TestAnthropicBodyNotJSON(t *testing.T) {
	up, err := chat(t, ir.ProviderTypeAnthropic, "claude", `{"messages":[{"role":"user","content":"x"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Response.Body([]byte(`<html>`)); err == nil {
		t.Error("Body accepted a non-JSON answer")
	}
	if _, err := up.Response.Chunk([]byte("data: {oops\n\n"), false); err == nil {
		t.Error("Chunk accepted a non-JSON event")
	}
}

// fakeCall sends an adapter's request to a fake upstream at base and returns its answer.
func fakeCall(t *testing.T, base string, up *provider.Upstream) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+up.Path, strings.NewReader(string(up.Body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer ale-client-key") // what the gateway must remove
	for k, v := range up.Headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// viaFake runs one request through kind's adapter, the fake and back: the translated
// completion, or for streams the assembled translated stream.
func viaFake(t *testing.T, kind, base, body string) ([]byte, streamSummary) {
	t.Helper()
	up, err := chat(t, kind, "model-x", body)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	status, answer := fakeCall(t, base, up)
	if status != http.StatusOK {
		t.Fatalf("fake answered %d: %s\nrequest: %s", status, answer, up.Body)
	}
	if !strings.Contains(body, `"stream":true`) {
		out, err := up.Response.Body(answer)
		if err != nil {
			t.Fatalf("Body: %v", err)
		}
		return out, streamSummary{}
	}
	var out []byte
	for i := 0; i < len(answer); i += 5 { // pieces that split events and lines
		got, err := up.Response.Chunk(answer[i:min(i+5, len(answer))], false)
		out = append(out, withFailure(got, err)...)
	}
	got, err := up.Response.Chunk(nil, true)
	return nil, parseStream(t, append(out, withFailure(got, err)...))
}

const weatherTools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

// testAgainstFake runs the conversation a client has with kind through its fake: a text
// answer, a tool call, the tool loop's second step with two results, and the same streamed.
func testAgainstFake(t *testing.T, kind, base string) {
	t.Run("text", func(t *testing.T) {
		out, _ := viaFake(t, kind, base, `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi there"}],"max_tokens":100}`)
		msg, finish, usage := completion(t, out)
		if msg.Content.Text == nil || *msg.Content.Text != "Hello from fake-"+kind+"/model-x: hi there" || finish != "stop" {
			t.Errorf("content %v, finish %q", msg.Content.Text, finish)
		}
		if usage == nil || usage.PromptTokens != 4 || usage.CompletionTokens != 5 || usage.TotalTokens != 9 {
			t.Errorf("usage %+v", usage)
		}
	})
	t.Run("length", func(t *testing.T) {
		out, _ := viaFake(t, kind, base, `{"messages":[{"role":"user","content":"a b c"}],"max_completion_tokens":2}`)
		msg, finish, _ := completion(t, out)
		if msg.Content.Text == nil || *msg.Content.Text != "Hello from " || finish != "length" {
			t.Errorf("content %v, finish %q", msg.Content.Text, finish)
		}
	})
	t.Run("tool call", func(t *testing.T) {
		out, _ := viaFake(t, kind, base, `{"messages":[{"role":"user","content":"weather?"}],`+weatherTools+`,"tool_choice":"required"}`)
		msg, finish, _ := completion(t, out)
		if finish != "tool_calls" || msg.Content.Text != nil || len(msg.ToolCalls) != 1 {
			t.Fatalf("finish %q, message %s", finish, provider.Marshal(msg))
		}
		tc := msg.ToolCalls[0]
		if tc.ID == "" || tc.Type != "function" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris"}` {
			t.Errorf("tool call %s", provider.Marshal(tc))
		}
	})
	loop := `{"messages":[
		{"role":"user","content":"weather in Paris and Rome?"},
		{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"22C"},
		{"role":"tool","tool_call_id":"call_2","content":"25C"}],` + weatherTools + `STREAM}`
	t.Run("tool results", func(t *testing.T) {
		out, _ := viaFake(t, kind, base, strings.Replace(loop, "STREAM", "", 1))
		msg, finish, _ := completion(t, out)
		if msg.Content.Text == nil || *msg.Content.Text != "Tool said: 25C" || finish != "stop" {
			t.Errorf("content %v, finish %q", msg.Content.Text, finish)
		}
	})
	t.Run("stream text", func(t *testing.T) {
		_, s := viaFake(t, kind, base, `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"one two three"}]}`)
		if s.Text != "Hello from fake-"+kind+"/model-x: one two three" || s.Finish != "stop" || !s.Done || len(s.Calls) != 0 {
			t.Errorf("stream %+v", s)
		}
		if s.Usage == nil || s.Usage.PromptTokens != 3 || s.Usage.CompletionTokens != 6 {
			t.Errorf("usage %+v", s.Usage)
		}
	})
	t.Run("stream tool call", func(t *testing.T) {
		_, s := viaFake(t, kind, base, `{"stream":true,"messages":[{"role":"user","content":"weather?"}],`+weatherTools+`}`)
		if len(s.Calls) != 1 || s.Calls[0].Name != "get_weather" || s.Calls[0].Args != `{"city":"Paris"}` || s.Finish != "tool_calls" || !s.Done || s.Usage == nil {
			t.Errorf("stream %+v", s)
		}
	})
	t.Run("stream tool results", func(t *testing.T) {
		_, s := viaFake(t, kind, base, strings.Replace(loop, "STREAM", `,"stream":true`, 1))
		if s.Text != "Tool said: 25C" || s.Finish != "stop" || !s.Done {
			t.Errorf("stream %+v", s)
		}
	})
}

func TestAnthropicAgainstFake(t *testing.T) {
	fake := fakeupstream.Start(t, fakeupstream.Options{Name: "fake-anthropic", APIKey: "test-key"})
	testAgainstFake(t, ir.ProviderTypeAnthropic, fake.AnthropicURL())
	for _, r := range fake.Requests() {
		if r.Path != "/v1/messages" || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "test-key" {
			t.Errorf("fake got %s with headers %v", r.Path, r.Header)
		}
	}
}

// TestAnthropicStreamFraming covers SSE variants the fixtures do not: CRLF lines, "data:"
// without a space, a last event without its blank line, and a message_stop that was not
// preceded by a stop reason.
func TestAnthropicStreamFraming(t *testing.T) {
	in := "event: message_start\r\ndata:{\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":3}}}\r\n\r\n" +
		": a comment\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}"
	out := feedStream(t, ir.ProviderTypeAnthropic, []byte(in), 3, true)
	s := parseStream(t, out)
	if s.Text != "hi" || s.Finish != "stop" || !s.Done || s.Usage == nil || s.Usage.PromptTokens != 3 {
		t.Errorf("stream %+v from\n%s", s, out)
	}
}

// TestAnthropicStreamToolArgumentsAreJSON: every tool call a client sees in a finished stream
// has arguments that parse as JSON (issue 10 item 1; FuzzResponseStream found the class). A
// call without parameters streams input {} and at most an empty delta: the client gets "{}",
// as from the non-streamed answer. Arguments that do not join into JSON end the stream with an
// error, unless the answer was cut at max_tokens (finish_reason length, as OpenAI does).
func TestAnthropicStreamToolArgumentsAreJSON(t *testing.T) {
	const start = `data: {"type":"message_start","message":{"id":"m","model":"claude","usage":{"input_tokens":5}}}` + "\n\n"
	tool := func(i int, input string) string {
		return fmt.Sprintf(`data: {"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":"toolu_%d","name":"f%d","input":%s}}`+"\n\n", i, i, i, input)
	}
	delta := func(i int, partial string) string {
		b, _ := json.Marshal(partial)
		return fmt.Sprintf(`data: {"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`+"\n\n", i, b)
	}
	stop := func(reason string) string {
		return `data: {"type":"message_delta","delta":{"stop_reason":"` + reason + `"},"usage":{"output_tokens":9}}` + "\n\n" +
			`data: {"type":"message_stop"}` + "\n\n"
	}
	blockStop := func(i int) string { return fmt.Sprintf(`data: {"type":"content_block_stop","index":%d}`+"\n\n", i) }
	for _, tc := range []struct {
		name, in string
		args     []string
		finish   string
		err      bool
	}{
		{"no arguments, empty delta", start + tool(0, "{}") + delta(0, "") + blockStop(0) + stop("tool_use"), []string{"{}"}, "tool_calls", false},
		{"no delta, no block stop", start + tool(0, "{}") + `data: {"type":"message_stop"}` + "\n\n", []string{"{}"}, "stop", false},
		{"input given at the start", start + tool(0, `{"a": 1}`) + blockStop(0) + stop("tool_use"), []string{`{"a":1}`}, "tool_calls", false},
		{"two calls, the first without arguments", start + tool(0, "{}") + blockStop(0) + tool(1, "{}") + delta(1, `{"x":`) + delta(1, `2}`) + blockStop(1) + stop("tool_use"),
			[]string{"{}", `{"x":2}`}, "tool_calls", false},
		{"arguments not JSON", start + tool(0, "{}") + delta(0, `{"x":`) + blockStop(0) + stop("tool_use"), nil, "", true},
		{"cut at max_tokens", start + tool(0, "{}") + delta(0, `{"x":`) + blockStop(0) + stop("max_tokens"), []string{`{"x":`}, "length", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := parseStream(t, feedStream(t, ir.ProviderTypeAnthropic, []byte(tc.in), 0, false))
			if tc.err {
				if s.Error == "" || s.Done || s.Finish != "" {
					t.Fatalf("stream %+v; want an error event and no finish or [DONE]", s)
				}
				return
			}
			if !s.Done || s.Finish != tc.finish || len(s.Calls) != len(tc.args) {
				t.Fatalf("stream %+v; want [DONE], finish %s and %d calls", s, tc.finish, len(tc.args))
			}
			for i, want := range tc.args {
				if s.Calls[i].Args != want {
					t.Errorf("call %d arguments %q, want %q", i, s.Calls[i].Args, want)
				}
			}
		})
	}
}

// TestAnthropicStreamKeepsOneID: chunks of one stream share one id and model, even if the
// provider sent a second message_start (the stream property FuzzResponseStream checks).
func TestAnthropicStreamKeepsOneID(t *testing.T) {
	in := `data: {"type":"message_start","message":{"id":"m1","model":"c1"}}` + "\n\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}` + "\n\n" +
		`data: {"type":"message_start","message":{"id":"m2","model":"c2"}}` + "\n\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}` + "\n\n" +
		`data: {"type":"message_stop"}` + "\n\n"
	s := parseStream(t, feedStream(t, ir.ProviderTypeAnthropic, []byte(in), 0, false))
	if s.Text != "ab" || !s.Done {
		t.Errorf("stream %+v", s)
	}
}

// TestAnthropicToolCallsHaveIDs: a client answers a tool call by its id, so every tool call
// it sees has one, whole or streamed, as for Gemini. Found by FuzzResponseBody.
func TestAnthropicToolCallsHaveIDs(t *testing.T) {
	out, err := translator(t, ir.ProviderTypeAnthropic, false).Body([]byte(`{"content":[{"type":"tool_use","name":"f","input":{}},{"type":"tool_use","id":"toolu_1","name":"g","input":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	msg, _, _ := completion(t, out)
	if len(msg.ToolCalls) != 2 || msg.ToolCalls[0].ID != "call_0" || msg.ToolCalls[1].ID != "toolu_1" {
		t.Errorf("tool calls %+v, want ids call_0 and toolu_1", msg.ToolCalls)
	}
	s := parseStream(t, feedStream(t, ir.ProviderTypeAnthropic, []byte(
		`data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","name":"f","input":{}}}`+"\n\n"+
			`data: {"type":"message_stop"}`+"\n\n"), 0, false))
	if len(s.Calls) != 1 || s.Calls[0].ID != "call_0" {
		t.Errorf("streamed calls %+v, want id call_0", s.Calls)
	}
}

// TestAnthropicIterations: with usage.iterations (server-side compaction, an advisor), the
// top-level counts are only part of what ran; the usage is the sum of the iterations on the
// model asked (none named, or the one asked or answering), and the iterations on other models
// are reported apart, per model, whole and streamed alike (issue 26 item 11).
func TestAnthropicIterations(t *testing.T) {
	iterations := `"iterations":[` +
		`{"type":"compaction","input_tokens":100,"output_tokens":83,"cache_read_input_tokens":55096,"cache_creation_input_tokens":0},` +
		`{"type":"advisor_message","model":"claude-opus-4-8","input_tokens":2518,"output_tokens":22,"cache_read_input_tokens":7,"cache_creation_input_tokens":0},` +
		`{"type":"message","model":"claude-sonnet-4-6","input_tokens":40,"output_tokens":4,"cache_read_input_tokens":0,"cache_creation_input_tokens":3},` +
		`{"type":"advisor_message","model":"claude-opus-4-8","input_tokens":10,"output_tokens":1,"cache_read_input_tokens":0,"cache_creation_input_tokens":0},` +
		`{"type":"message","input_tokens":181,"output_tokens":8,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}]`
	// 100+55096+40+3+181 prompt, 55096 of it cached, 83+4+8 completion; opus: 2518+7+10, 7, 23.
	want := `"usage":{"prompt_tokens":55420,"completion_tokens":95,"total_tokens":55515,"prompt_tokens_details":{"cached_tokens":55096},` +
		`"other_models":[{"model":"claude-opus-4-8","prompt_tokens":2535,"completion_tokens":23,"total_tokens":2558,"prompt_tokens_details":{"cached_tokens":7}}]}`
	whole := `{"id":"msg_1","type":"message","model":"claude-sonnet-4-6","content":[{"type":"compaction","content":"Summary."},{"type":"text","text":"Hello!"}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":181,"output_tokens":8,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,` + iterations + `}}`
	out, err := newAnthropicResponse("claude-sonnet-4-6").Body([]byte(whole))
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("whole: %s %v\nwant %s", out, err, want)
	}
	stream := "event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_1","model":"claude-sonnet-4-6","content":[],"usage":{"input_tokens":100,"cache_read_input_tokens":55096,"output_tokens":7}}}` + "\n\n" +
		"event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null}}` + "\n\n" +
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"Summary."}}` + "\n\n" +
		"event: content_block_stop\ndata: " + `{"type":"content_block_stop","index":0}` + "\n\n" +
		"event: content_block_start\ndata: " + `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Hello!"}}` + "\n\n" +
		"event: content_block_stop\ndata: " + `{"type":"content_block_stop","index":1}` + "\n\n" +
		"event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":181,"cache_read_input_tokens":0,"output_tokens":8,` + iterations + `}}` + "\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	got, err := newAnthropicResponse("claude-sonnet-4-6").Chunk([]byte(stream), true)
	if err != nil || !strings.Contains(string(got), want) || strings.Count(string(got), `"usage"`) != 1 {
		t.Fatalf("stream: %s %v\nwant %s", got, err, want)
	}
	// Without iterations the top-level counts stand, as before.
	out, err = newAnthropicResponse("claude-sonnet-4-6").Body([]byte(`{"type":"message","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}`))
	if err != nil || !strings.Contains(string(out), `"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}}`) {
		t.Fatalf("no iterations: %s %v", out, err)
	}
}
