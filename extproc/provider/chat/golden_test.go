package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
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
func chat(t *testing.T, kind, model, body string) (*provider.Upstream, error) {
	t.Helper()
	a, err := For(kind, "")
	if err != nil {
		t.Fatal(err)
	}
	var req provider.Request
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("request fixture: %v", err)
	}
	return a.Chat(testProvider(kind), nil, model, req)
}

// goldenRequests translates every shared request in testdata/chat into
// testdata/<kind>/request/<case>.out.json: the path, the headers, the body and the nested
// fields dropped.
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
				Removed []string          `json:"removed,omitempty"`
			}{up.Path, up.Headers, up.Body, up.Removed}); err != nil {
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
		got = withFailure(got, err)
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

type (
	streamCall    = fuzzcheck.Call
	streamSummary = fuzzcheck.Stream
)

// parseStream checks an OpenAI chunk stream as the fuzz targets do (fuzzcheck.CheckStream:
// role first, one id, tool-call fragments by index, at most one finish, nothing after [DONE]
// or an error) and, stricter for recorded answers, that every tool call is named and a
// complete stream carries its usage chunk.
func parseStream(t *testing.T, out []byte) streamSummary {
	t.Helper()
	s, err := fuzzcheck.CheckStream(out)
	if err != nil {
		t.Fatalf("%v\nstream:\n%s", err, out)
	}
	for i, c := range s.Calls {
		if c.Name == "" {
			t.Errorf("tool call %d has no name: %s", i, out)
		}
	}
	if s.Done && s.Usage == nil {
		t.Errorf("a complete stream needs a usage chunk: %+v", s)
	}
	return s
}

// completion decodes a translated chat.completion and checks its envelope.
func completion(t *testing.T, b []byte) (openai.ResponseMessage, string, *openai.Usage) {
	t.Helper()
	var c openai.ChatCompletion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if c.ID == "" || c.Object != "chat.completion" || c.Created == 0 || c.Model == "" || len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" {
		t.Fatalf("bad completion: %s", b)
	}
	return c.Choices[0].Message, c.Choices[0].FinishReason, c.Usage
}

// withFailure is what the client gets from one Chunk call: its events and, when it failed, the
// error event the upstream ext_proc adds (without the request id the router adds later).
func withFailure(out []byte, err error) []byte {
	if err == nil {
		return out
	}
	code := "upstream_error"
	var failed *provider.UpstreamFailure
	var blocked *provider.BlockedError
	switch {
	case errors.As(err, &failed):
		code = failed.Code
	case errors.As(err, &blocked):
		code = "content_filter"
	}
	b, _ := json.Marshal(map[string]map[string]string{"error": {"message": err.Error(), "code": code}})
	return append(append(append(out, "data: "...), b...), "\n\n"...)
}
