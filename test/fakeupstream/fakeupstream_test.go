package fakeupstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

const weatherTool = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`

func post(t *testing.T, s *Server, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL()+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func wantError(t *testing.T, resp *http.Response, status int, code string) apiError {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d", resp.StatusCode, status)
	}
	e := decode[apiError](t, resp)
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("error lacks message or type: %+v", e)
	}
	got := ""
	if e.Error.Code != nil {
		got = *e.Error.Code
	}
	if got != code {
		t.Errorf("code = %q, want %q", got, code)
	}
	return e
}

type completionOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

func TestCompletion(t *testing.T) {
	s := Start(t, Options{Name: "up", APIKey: "sk-test"})
	body := `{"model":"gpt-x","user":"u1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:,"}},{"type":"text","text":"there"}]}]}`
	resp := post(t, s, "sk-test", body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_") {
		t.Fatalf("status %d, x-request-id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	c := decode[completionOut](t, resp)
	if !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion" || c.Model != "gpt-x" || len(c.Choices) != 1 {
		t.Fatalf("bad completion: %+v", c)
	}
	ch := c.Choices[0]
	if want := "Hello from up/gpt-x: hi [image] there"; ch.Message.Content == nil || *ch.Message.Content != want {
		t.Errorf("content = %v, want %q", ch.Message.Content, want)
	}
	if ch.Message.Role != "assistant" || ch.FinishReason != "stop" {
		t.Errorf("role %q finish %q", ch.Message.Role, ch.FinishReason)
	}
	// prompt: "be brief" + "hi [image] there"; completion: 6 words.
	if u := c.Usage; u == nil || !reflect.DeepEqual(*u, openai.Usage{PromptTokens: 5, CompletionTokens: 6, TotalTokens: 11}) {
		t.Errorf("usage = %+v", c.Usage)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].Path != "/v1/chat/completions" ||
		string(reqs[0].Body) != body || reqs[0].Header.Get("Authorization") != "Bearer sk-test" {
		t.Errorf("recorded %+v", reqs)
	}
}

func TestMaxTokens(t *testing.T) {
	s := Start(t, Options{})
	c := decode[completionOut](t, post(t, s, "", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"a b c"}]}`))
	if got := *c.Choices[0].Message.Content; got != "Hello from " || c.Choices[0].FinishReason != "length" {
		t.Errorf("content %q finish %q", got, c.Choices[0].FinishReason)
	}
}

func TestToolCalls(t *testing.T) {
	s := Start(t, Options{})
	msgs := `"messages":[{"role":"user","content":"weather?"}]`
	for _, tc := range []struct{ choice, want string }{
		{`"auto"`, "get_weather"},
		{`"required"`, "get_weather"},
		{`{"type":"function","function":{"name":"other"}}`, "other"},
		{`"none"`, ""},
	} {
		c := decode[completionOut](t, post(t, s, "", `{"model":"m",`+msgs+`,"tools":`+weatherTool+`,"tool_choice":`+tc.choice+`}`))
		m := c.Choices[0].Message
		if tc.want == "" {
			if len(m.ToolCalls) != 0 || m.Content == nil || c.Choices[0].FinishReason != "stop" {
				t.Errorf("%s: want a text reply, got %+v", tc.choice, c.Choices[0])
			}
			continue
		}
		if c.Choices[0].FinishReason != "tool_calls" || m.Content != nil || len(m.ToolCalls) != 1 {
			t.Fatalf("%s: want one tool call, got %+v", tc.choice, c.Choices[0])
		}
		call := m.ToolCalls[0]
		if !strings.HasPrefix(call.ID, "call_") || call.Type != "function" || call.Function.Name != tc.want || call.Function.Arguments != `{"city":"Paris"}` {
			t.Errorf("%s: tool call %+v", tc.choice, call)
		}
	}

	// The second step of the loop: the tool's result comes back as text.
	c := decode[completionOut](t, post(t, s, "", `{"model":"m","tools":`+weatherTool+`,"messages":[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"22C and sunny"}]}`))
	if got := *c.Choices[0].Message.Content; got != "Tool said: 22C and sunny" {
		t.Errorf("content = %q", got)
	}
}

type chunkOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string  `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

// readSSE returns the data payloads of a stream, and the read error that
// ended it early (nil after a clean end).
func readSSE(t *testing.T, resp *http.Response) ([]string, error) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q", ct)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				t.Fatalf("unexpected line %q", line)
			}
			events = append(events, data)
		}
	}
	return events, sc.Err()
}

func chunks(t *testing.T, events []string) []chunkOut {
	t.Helper()
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	out := make([]chunkOut, len(events)-1)
	for i, e := range events[:len(events)-1] {
		if err := json.Unmarshal([]byte(e), &out[i]); err != nil {
			t.Fatalf("chunk %d: %v: %s", i, err, e)
		}
		if out[i].Object != "chat.completion.chunk" || out[i].ID != out[0].ID {
			t.Errorf("chunk %d: %s", i, e)
		}
	}
	return out
}

func TestStreamText(t *testing.T) {
	s := Start(t, Options{Name: "up", ChunkDelay: 5 * time.Millisecond})
	start := time.Now()
	events, err := readSSE(t, post(t, s, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"one two three"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cs := chunks(t, events)
	if d := time.Since(start); d < time.Duration(len(events)-1)*5*time.Millisecond {
		t.Errorf("stream took %v, ChunkDelay not applied", d)
	}
	if cs[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk has no role: %+v", cs[0])
	}
	var text strings.Builder
	pieces := 0
	for i, c := range cs {
		if c.Usage != nil || len(c.Choices) != 1 {
			t.Fatalf("chunk %d: %+v", i, c)
		}
		ch := c.Choices[0]
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			text.WriteString(*ch.Delta.Content)
			pieces++
		}
		if last := i == len(cs)-1; last != (ch.FinishReason != nil) {
			t.Errorf("chunk %d: finish_reason %v", i, ch.FinishReason)
		}
	}
	if want := "Hello from up/m: one two three"; text.String() != want || pieces != 6 {
		t.Errorf("assembled %q in %d pieces, want %q in 6", text.String(), pieces, want)
	}
	if fr := *cs[len(cs)-1].Choices[0].FinishReason; fr != "stop" {
		t.Errorf("finish_reason %q", fr)
	}
}

func TestStreamToolCallWithUsage(t *testing.T) {
	s := Start(t, Options{})
	events, err := readSSE(t, post(t, s, "", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"tools":`+weatherTool+`,"messages":[{"role":"user","content":"weather in Paris?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cs := chunks(t, events)

	// The usage chunk comes last, with no choices.
	uc := cs[len(cs)-1]
	if len(uc.Choices) != 0 || uc.Usage == nil || uc.Usage.PromptTokens != 3 || uc.Usage.TotalTokens != uc.Usage.PromptTokens+uc.Usage.CompletionTokens {
		t.Fatalf("usage chunk: %+v", uc)
	}
	cs = cs[:len(cs)-1]

	// Assemble tool calls by index, the way SDK users do.
	type call struct{ id, typ, name, args string }
	var calls []call
	for _, c := range cs {
		for _, tc := range c.Choices[0].Delta.ToolCalls {
			if tc.Index == len(calls) {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments == nil || *tc.Function.Arguments != "" {
					t.Errorf("first fragment lacks id/type/name/empty arguments: %+v", tc)
				}
				calls = append(calls, call{tc.ID, tc.Type, tc.Function.Name, ""})
			} else if tc.ID != "" || tc.Function.Name != "" {
				t.Errorf("later fragment repeats id or name: %+v", tc)
			}
			calls[tc.Index].args += *tc.Function.Arguments
		}
	}
	if len(calls) != 1 || calls[0].name != "get_weather" {
		t.Fatalf("calls: %+v", calls)
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(calls[0].args), &args); err != nil || args["city"] != "Paris" {
		t.Errorf("arguments %q: %v", calls[0].args, err)
	}
	if fr := cs[len(cs)-1].Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Errorf("finish_reason %v", fr)
	}
}

func TestAuth(t *testing.T) {
	s := Start(t, Options{APIKey: "sk-right"})
	body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	wantError(t, post(t, s, "", body), 401, "invalid_api_key")
	e := wantError(t, post(t, s, "sk-wrong-key-123", body), 401, "invalid_api_key")
	if e.Error.Type != "invalid_request_error" || e.Error.Param != nil || strings.Contains(e.Error.Message, "sk-wrong-key-123") {
		t.Errorf("error %+v", e)
	}
	if resp := post(t, s, "sk-right", body); resp.StatusCode != 200 {
		t.Errorf("right key: status %d", resp.StatusCode)
	}
	if n := len(s.Requests()); n != 3 {
		t.Errorf("recorded %d requests, want 3 (rejected ones too)", n)
	}
}

func TestBadRequests(t *testing.T) {
	s := Start(t, Options{})
	for _, tc := range []struct{ body, code string }{
		{`{"model":`, ""},
		{`{"messages":[{"role":"user","content":"x"}]}`, ""},
		{`{"model":"m"}`, "missing_required_parameter"},
		{`{"model":"m","messages":[]}`, "empty_array"},
		{`{"model":"m","messages":"hi"}`, "invalid_type"},
	} {
		t.Run(tc.body, func(t *testing.T) { wantError(t, post(t, s, "", tc.body), 400, tc.code) })
	}
	resp, err := http.Get(s.URL() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantError(t, resp, 404, "")
}

func TestScriptedFailures(t *testing.T) {
	s := Start(t, Options{})
	body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	s.FailNext(429, "")
	s.FailNext(500, "boom")
	s.Script(Fault{Status: 503, Body: `{"oops":1}`, Header: http.Header{"Retry-After": {"0"}}})
	if n := s.PendingFaults(); n != 3 {
		t.Fatalf("pending %d", n)
	}
	e := wantError(t, post(t, s, "", body), 429, "rate_limit_exceeded")
	if e.Error.Type != "requests" {
		t.Errorf("429 type %q", e.Error.Type)
	}
	if e := wantError(t, post(t, s, "", body), 500, ""); e.Error.Message != "boom" || e.Error.Type != "server_error" {
		t.Errorf("500 error %+v", e)
	}
	resp := post(t, s, "", body)
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || string(raw) != `{"oops":1}` || resp.Header.Get("Retry-After") != "0" {
		t.Errorf("raw fault: %d %q %v", resp.StatusCode, raw, resp.Header)
	}
	if resp := post(t, s, "", body); resp.StatusCode != 200 {
		t.Errorf("after faults: status %d", resp.StatusCode)
	}
}

func TestCutStream(t *testing.T) {
	s := Start(t, Options{})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"a b c d e"}]}`
	s.CutStreamAfter(3)
	events, err := readSSE(t, post(t, s, "", body))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(events) != 3 {
		t.Fatalf("got %d events, err %v; want 3 and unexpected EOF", len(events), err)
	}

	// A non-streamed reply is cut halfway through its body.
	s.CutStreamAfter(0)
	resp := post(t, s, "", strings.Replace(body, `"stream":true`, `"stream":false`, 1))
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("non-stream cut: err %v", err)
	}

	// The server is fine afterwards.
	if events, err := readSSE(t, post(t, s, "", body)); err != nil || events[len(events)-1] != "[DONE]" {
		t.Fatalf("after cut: %v %q", err, events)
	}
}

func TestFaultDelay(t *testing.T) {
	s := Start(t, Options{})
	s.Script(Fault{Delay: 50 * time.Millisecond})
	start := time.Now()
	if resp := post(t, s, "", `{"model":"m","messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("replied after %v", d)
	}
}

func TestModels(t *testing.T) {
	s := Start(t, Options{Name: "prov", Models: []string{"a", "b"}})
	resp, err := http.Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	list := decode[struct {
		Object string `json:"object"`
		Data   []struct{ ID, Object, OwnedBy string }
	}](t, resp)
	if list.Object != "list" || len(list.Data) != 2 || list.Data[1].ID != "b" || list.Data[0].Object != "model" {
		t.Errorf("list %+v", list)
	}
}

func TestHTTP2(t *testing.T) {
	s := Start(t, Options{})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(s.URL()+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("proto %s", resp.Proto)
	}
	if events, err := readSSE(t, resp); err != nil || events[len(events)-1] != "[DONE]" {
		t.Fatalf("%v %q", err, events)
	}
}

func TestConcurrentAndClose(t *testing.T) {
	s, err := New(Options{NoRecord: true, ChunkDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				events, err := readSSE(t, post(t, s, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x y"}]}`))
				if err != nil || events[len(events)-1] != "[DONE]" {
					t.Errorf("%v %q", err, events)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, r := s.RequestCount(), len(s.Requests()); n != 160 || r != 0 {
		t.Errorf("count %d, recorded %d", n, r)
	}

	// Close ends a stream still in progress and waits for its handler.
	slow, _ := New(Options{ChunkDelay: time.Hour})
	resp := post(t, slow, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first chunk arrived
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { slow.Close(); s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
}

// BenchmarkCompletion shows the fake is far from being the bottleneck of a gateway benchmark.
func BenchmarkCompletion(b *testing.B) {
	for _, stream := range []string{"false", "true"} {
		b.Run("stream="+stream, func(b *testing.B) {
			s := Start(b, Options{NoRecord: true})
			body := `{"model":"gpt-4o-mini","stream":` + stream + `,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Tell me about the weather in Paris today"}]}`
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// TestHoldAfter: a held stream sends HoldAfter events, then waits for one release.
func TestHoldAfter(t *testing.T) {
	hold := make(chan struct{})
	s := Start(t, Options{Name: "up", Hold: hold, HoldAfter: 3})
	resp := post(t, s, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"one two three four five"}]}`)
	sc := bufio.NewScanner(resp.Body)
	got := make(chan int)
	go func() {
		n := 0
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				n++
				got <- n
			}
		}
		close(got)
	}()
	for want := 1; want <= 3; want++ {
		if n := <-got; n != want {
			t.Fatalf("event %d arrived as %d", want, n)
		}
	}
	select {
	case n := <-got:
		t.Fatalf("event %d arrived before the release", n)
	case <-time.After(100 * time.Millisecond):
	}
	hold <- struct{}{}
	n := 3
	for m := range got {
		n = m
	}
	if n < 8 { // the rest of the words, the finish and [DONE]
		t.Errorf("the stream ended after %d events", n)
	}
}

// TestOpenHeldAndRelease: OpenHeld opens many held streams at once and Release lets them all
// finish at a bounded pace.
func TestOpenHeldAndRelease(t *testing.T) {
	const n = 100
	hold := make(chan struct{})
	s := Start(t, Options{Name: "up", Hold: hold})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	results, ok := OpenHeld(ctx, n, func(openedOnce func()) error {
		var once sync.Once
		opened := func() { once.Do(openedOnce) }
		defer opened() // a stream that fails still counts as settled
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		if !sc.Scan() { // the first event: the stream is open and held
			return errors.New("no first event")
		}
		opened()
		for sc.Scan() {
			if sc.Text() == "data: [DONE]" {
				return nil
			}
		}
		return errors.New("no [DONE]")
	})
	if !ok {
		t.Fatal("not all streams opened")
	}
	select {
	case err := <-results:
		t.Fatalf("a stream ended before the release: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	go Release(ctx, hold, n, 10, time.Millisecond)
	for range n {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
}

// TestDashScopeCancel: like DashScope's API, a task is cancelled while it is PENDING (and then
// queried as CANCELED); a running or unknown task cannot be.
func TestDashScopeCancel(t *testing.T) {
	s := Start(t, Options{APIKey: "k"})
	call := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, s.DashScopeURL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("X-DashScope-Async", "enable")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	create := func() string {
		_, out := call("POST", "/api/v1/services/aigc/video-generation/video-synthesis", `{"model":"wan2.2-t2v-plus","input":{"prompt":"a fox"}}`)
		return out["output"].(map[string]any)["task_id"].(string)
	}
	id := create()
	if code, out := call("POST", "/api/v1/tasks/"+id+"/cancel", ""); code != 200 || out["request_id"] == nil {
		t.Fatalf("cancel a pending task: %d %v", code, out)
	}
	if _, out := call("GET", "/api/v1/tasks/"+id, ""); out["output"].(map[string]any)["task_status"] != "CANCELED" {
		t.Fatalf("a cancelled task queried: %v", out)
	}
	running := create()
	call("GET", "/api/v1/tasks/"+running, "")
	for _, id := range []string{id, running, "ds-task-none"} {
		if code, out := call("POST", "/api/v1/tasks/"+id+"/cancel", ""); code != 400 || out["code"] != "UnsupportedOperation" {
			t.Fatalf("cancel %s: %d %v, want 400 UnsupportedOperation", id, code, out)
		}
	}
}

// TestStreamReasoning: a reasoning model's answer streams its thinking first, under the name its
// server uses, and bills it as completion tokens; a whole answer carries it in the message.
func TestStreamReasoning(t *testing.T) {
	s := Start(t, Options{Name: "up"})
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"one two"}]}`
	for _, field := range []string{"", "reasoning_content", "reasoning"} {
		s.Script(Fault{Reasoning: "Hmm, let me see.", ReasoningField: field})
		events, err := readSSE(t, post(t, s, "", body))
		if err != nil {
			t.Fatal(err)
		}
		var thought, text strings.Builder
		var usage *openai.Usage
		for _, e := range events[:len(events)-1] {
			var c struct {
				Choices []struct{ Delta openai.Delta }
				Usage   *openai.Usage
			}
			if err := json.Unmarshal([]byte(e), &c); err != nil {
				t.Fatal(err)
			}
			if c.Usage != nil {
				usage = c.Usage
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					if *ch.Delta.Content != "" && thought.Len() < len("Hmm, let me see.") {
						t.Fatalf("%q: the answer's text came before its reasoning ended: %s", field, e)
					}
					text.WriteString(*ch.Delta.Content)
				}
				if (ch.Delta.ReasoningContent != nil) == (field == "reasoning") && ch.Delta.ReasoningFields.Text() != "" {
					t.Errorf("%q: reasoning under the other name: %s", field, e)
				}
				thought.WriteString(ch.Delta.ReasoningFields.Text())
				if field == "reasoning" && ch.Delta.Reasoning != nil && !strings.Contains(e, `"reasoning_details":[{"type":"reasoning.text","text":`) {
					t.Errorf("OpenRouter repeats the reasoning in reasoning_details: %s", e)
				}
			}
		}
		if thought.String() != "Hmm, let me see." || text.String() != "Hello from up/m: one two" {
			t.Errorf("%q: reasoning %q, answer %q", field, thought.String(), text.String())
		}
		if usage == nil || usage.CompletionTokens != 4+5 || usage.CompletionTokensDetails == nil || usage.CompletionTokensDetails.ReasoningTokens != 4 {
			t.Errorf("%q: usage %+v: want 4 reasoning tokens in 9 completion tokens", field, usage)
		}
	}
	s.Script(Fault{Reasoning: "Hmm."})
	c := decode[struct {
		Choices []struct{ Message openai.ResponseMessage }
	}](t, post(t, s, "", strings.Replace(body, `"stream":true`, `"stream":false`, 1)))
	if len(c.Choices) != 1 || c.Choices[0].Message.ReasoningContent == nil || *c.Choices[0].Message.ReasoningContent != "Hmm." {
		t.Errorf("whole answer %+v: want reasoning_content Hmm.", c)
	}
}
