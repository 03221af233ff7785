package provider

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/golden"
	"github.com/tollway/tollway/xds/ir"
)

// Golden answers must not depend on the clock.
func init() { now = func() time.Time { return time.Unix(1767225600, 0) } }

// compareGolden fails t when got differs from the file at path, or rewrites it (make testdata).
func compareGolden(t *testing.T, path string, got []byte) { t.Helper(); golden.Compare(t, path, got) }

type fixture struct {
	path string
	data []byte
}

// fixtures reads the files matching pattern, in name order; a pattern that matches nothing is
// a broken test.
func fixtures(t *testing.T, pattern string) []fixture {
	t.Helper()
	paths, err := filepath.Glob(pattern) // sorted
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures match %s (%v)", pattern, err)
	}
	out := make([]fixture, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = fixture{p, b}
	}
	return out
}

// caseName is a fixture's base name without extensions: testdata/x/text.in.sse -> text.
func caseName(path string) string {
	base := filepath.Base(path)
	return base[:strings.IndexByte(base, '.')]
}

func indentJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func testProvider(kind string) *ir.Provider {
	return &ir.Provider{Name: "up-" + kind, Type: kind, NeedsKey: true, APIKey: "test-key"}
}

// chat runs a request given as JSON through kind's adapter.
func chat(t *testing.T, kind, model, body string) (*Upstream, error) {
	t.Helper()
	a, err := For(kind)
	if err != nil {
		t.Fatal(err)
	}
	var req Request
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("request fixture: %v", err)
	}
	return a.Chat(testProvider(kind), model, req)
}

// goldenRequests translates every shared request in testdata/chat into
// testdata/<kind>/request/<case>.out.json: the path, the headers and the body.
func goldenRequests(t *testing.T, kind, model string) {
	for _, f := range fixtures(t, "testdata/chat/*.json") {
		name, in := caseName(f.path), f.data
		t.Run(name, func(t *testing.T) {
			up, err := chat(t, kind, model, string(in))
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if !json.Valid(up.Body) {
				t.Fatalf("body is not JSON: %s", up.Body)
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(struct {
				Path    string            `json:"path"`
				Headers map[string]string `json:"headers"`
				Body    json.RawMessage   `json:"body"`
			}{up.Path, up.Headers, up.Body}); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", kind, "request", name+".out.json"), buf.Bytes())
		})
	}
}

// goldenResponses translates every testdata/<kind>/response/<case>.in.json answer.
func goldenResponses(t *testing.T, kind, model string) {
	for _, f := range fixtures(t, filepath.Join("testdata", kind, "response", "*.in.json")) {
		name, in := caseName(f.path), f.data
		t.Run(name, func(t *testing.T) {
			up, err := chat(t, kind, model, `{"messages":[{"role":"user","content":"hi"}]}`)
			if err != nil {
				t.Fatal(err)
			}
			out, err := up.Response.Body(in)
			if err != nil {
				t.Fatalf("Body: %v", err)
			}
			compareGolden(t, filepath.Join("testdata", kind, "response", name+".out.json"), indentJSON(t, out))
		})
	}
}

// feedStream translates a whole stream handed over in pieces of size bytes (0: all at once).
// With endAlone the end is signalled by an extra empty call, otherwise with the last piece.
func feedStream(t *testing.T, kind string, in []byte, size int, endAlone bool) []byte {
	t.Helper()
	up, err := chat(t, kind, "fallback-model", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if size <= 0 {
		size = len(in)
	}
	var out []byte
	emit := func(b []byte, end bool) {
		got, err := up.Response.Chunk(b, end)
		if err != nil {
			t.Fatalf("Chunk: %v", err)
		}
		// The contract: whole "data: ...\n\n" events only, whatever the input split.
		if len(got) > 0 && (!bytes.HasPrefix(got, []byte("data: ")) || !bytes.HasSuffix(got, []byte("\n\n"))) {
			t.Fatalf("Chunk returned a partial event: %q", got)
		}
		out = append(out, got...)
	}
	for i := 0; i < len(in); i += size {
		j := min(i+size, len(in))
		emit(in[i:j], j == len(in) && !endAlone)
	}
	if endAlone || len(in) == 0 {
		emit(nil, true)
	}
	return out
}

// goldenStreams translates every testdata/<kind>/stream/<case>.in.sse stream, checks that
// the input split does not matter, that the output is a well-formed OpenAI stream and that
// it carries what the input did (expect reads the input's text and tool calls).
func goldenStreams(t *testing.T, kind string, expect func(t *testing.T, in []byte) streamSummary) {
	for _, f := range fixtures(t, filepath.Join("testdata", kind, "stream", "*.in.sse")) {
		name, in := caseName(f.path), f.data
		t.Run(name, func(t *testing.T) {
			whole := feedStream(t, kind, in, 0, false)
			for _, size := range []int{1, 2, 3, 7, 64} {
				for _, endAlone := range []bool{false, true} {
					if got := feedStream(t, kind, in, size, endAlone); !bytes.Equal(got, whole) {
						t.Fatalf("fed in %d-byte pieces (end alone %v), the output differs:\n%s\nwhole:\n%s", size, endAlone, got, whole)
					}
				}
			}
			compareGolden(t, filepath.Join("testdata", kind, "stream", name+".out.sse"), whole)
			got, want := parseStream(t, whole), expect(t, in)
			if got.Text != want.Text {
				t.Errorf("text %q, want %q", got.Text, want.Text)
			}
			if len(got.Calls) != len(want.Calls) {
				t.Fatalf("calls %+v, want %+v", got.Calls, want.Calls)
			}
			for i := range want.Calls {
				g, w := got.Calls[i], want.Calls[i]
				if g.Name != w.Name || g.Args != w.Args || (w.ID != "" && g.ID != w.ID) {
					t.Errorf("call %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

type streamCall struct{ ID, Name, Args string }

// streamSummary is what a stream said, assembled the way OpenAI SDKs do.
type streamSummary struct {
	Text   string
	Calls  []streamCall
	Finish string
	Usage  *chatUsage
	Error  string
	Done   bool
}

// parseStream checks an OpenAI chunk stream and assembles it: role first, one id, tool-call
// fragments by index (the first with id, type and name, later ones arguments only), at most
// one finish, the usage-only chunk right before [DONE], nothing after [DONE] or an error.
func parseStream(t *testing.T, out []byte) streamSummary {
	t.Helper()
	var s streamSummary
	events := strings.Split(string(out), "\n\n")
	if events[len(events)-1] != "" {
		t.Fatalf("stream does not end with a blank line: %q", out)
	}
	events = events[:len(events)-1]
	var id string
	for i, ev := range events {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("event %d is not one data line: %q", i, ev)
		}
		if s.Done || s.Error != "" {
			t.Fatalf("event %d after the end: %q", i, ev)
		}
		if data == "[DONE]" {
			s.Done = true
			continue
		}
		if s.Usage != nil {
			t.Fatalf("event %d after the usage chunk: %q", i, ev)
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			Model   string `json:"model"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role      string     `json:"role"`
					Content   *string    `json:"content"`
					ToolCalls []toolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, data)
		}
		if c.Error != nil {
			if c.Error.Message == "" || c.Error.Code == "" {
				t.Errorf("error event lacks message or code: %s", data)
			}
			s.Error = c.Error.Message
			continue
		}
		if id == "" {
			id = c.ID
		}
		if c.ID == "" || c.ID != id || c.Object != "chat.completion.chunk" || c.Created == 0 || c.Model == "" {
			t.Errorf("event %d: bad envelope: %s", i, data)
		}
		if c.Choices == nil {
			t.Fatalf("event %d: choices missing: %s", i, data)
		}
		if len(c.Choices) == 0 {
			if c.Usage == nil {
				t.Fatalf("event %d: neither choices nor usage: %s", i, data)
			}
			s.Usage = c.Usage
			continue
		}
		if c.Usage != nil {
			t.Errorf("event %d: usage on a content chunk: %s", i, data)
		}
		ch := c.Choices[0]
		if (i == 0) != (ch.Delta.Role == "assistant") {
			t.Errorf("event %d: role %q; only the first chunk has it", i, ch.Delta.Role)
		}
		if ch.Delta.Content != nil {
			s.Text += *ch.Delta.Content
		}
		for _, tc := range ch.Delta.ToolCalls {
			switch {
			case tc.Index == nil:
				t.Fatalf("event %d: tool call without index: %s", i, data)
			case *tc.Index == len(s.Calls):
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments == nil {
					t.Errorf("event %d: first fragment lacks id, type, name or arguments: %s", i, data)
				}
				s.Calls = append(s.Calls, streamCall{ID: tc.ID, Name: tc.Function.Name})
			case *tc.Index > len(s.Calls):
				t.Fatalf("event %d: tool call index %d skips ahead: %s", i, *tc.Index, data)
			case tc.ID != "" || tc.Function.Name != "":
				t.Errorf("event %d: a later fragment repeats id or name: %s", i, data)
			}
			if tc.Function.Arguments != nil {
				s.Calls[*tc.Index].Args += *tc.Function.Arguments
			}
		}
		if ch.FinishReason != nil {
			if s.Finish != "" {
				t.Errorf("event %d: a second finish_reason", i)
			}
			s.Finish = *ch.FinishReason
		}
	}
	if s.Done && (s.Usage == nil || s.Finish == "") {
		t.Errorf("a complete stream needs a finish_reason and a usage chunk: %+v", s)
	}
	return s
}

// completion decodes a translated chat.completion and checks its envelope.
func completion(t *testing.T, b []byte) (completionMessage, string, *chatUsage) {
	t.Helper()
	var c chatCompletion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if c.ID == "" || c.Object != "chat.completion" || c.Created == 0 || c.Model == "" || len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" {
		t.Fatalf("bad completion: %s", b)
	}
	return c.Choices[0].Message, c.Choices[0].FinishReason, c.Usage
}
