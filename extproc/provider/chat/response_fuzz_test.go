package chat

// Fuzz targets of answer translation (ResponseTranslator Body and Chunk) for the providers
// that speak another API than OpenAI's.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

// translating are the kinds whose answers are translated.
var translating = []string{ir.ProviderTypeAnthropic, ir.ProviderTypeGemini}

func translator(t testing.TB, kind string, stream bool) provider.ResponseTranslator {
	a, err := For(kind, "")
	if err != nil {
		t.Fatal(err)
	}
	up, err := a.Chat(testProvider(kind), nil, "fuzz-model", provider.Request{
		"stream":   json.RawMessage(fmt.Sprint(stream)),
		"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return up.Response
}

// addFiles seeds f with every file matching pattern under testdata/<kind>/, for each
// translating kind (the kind's index first), plus extra arguments.
func addFiles(f *testing.F, pattern string, extra ...any) {
	for k, kind := range translating {
		paths, _ := filepath.Glob(filepath.Join("testdata", kind, pattern))
		if len(paths) == 0 {
			f.Fatalf("no seeds match testdata/%s/%s", kind, pattern)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(append([]any{uint8(k), b}, extra...)...)
		}
	}
}

var finishes = map[string]bool{"stop": true, "length": true, "tool_calls": true, "content_filter": true}

// FuzzResponseBody translates arbitrary whole answers: the result is an error and nothing
// else, or one complete chat.completion whose tool calls carry JSON arguments and whose usage
// adds up.
func FuzzResponseBody(f *testing.F) {
	addFiles(f, "response/*.in.json")
	f.Fuzz(func(t *testing.T, k uint8, in []byte) {
		kind := translating[int(k)%len(translating)]
		out, err := translator(t, kind, false).Body(in)
		if err != nil {
			if out != nil {
				t.Fatalf("%s: an error and a half-translated answer: %s", kind, out)
			}
			if leak := fuzzcheck.Leak(err.Error()); leak != "" {
				t.Fatalf("%s: the client's 502 would show Go vocabulary %q: %v", kind, leak, err)
			}
			return
		}
		var c openai.ChatCompletion
		if err := json.Unmarshal(out, &c); err != nil {
			t.Fatalf("%s answer is not JSON: %v: %s", kind, err, out)
		}
		if c.ID == "" || c.Object != "chat.completion" || c.Created == 0 || c.Model == "" || len(c.Choices) != 1 {
			t.Fatalf("%s answer envelope: %s", kind, out)
		}
		ch := c.Choices[0]
		if ch.Message.Role != "assistant" || !finishes[ch.FinishReason] {
			t.Fatalf("%s answer role %q, finish_reason %q: %s", kind, ch.Message.Role, ch.FinishReason, out)
		}
		for i, tc := range ch.Message.ToolCalls {
			if tc.ID == "" || tc.Type != "function" || !json.Valid([]byte(tc.Function.Arguments)) {
				t.Fatalf("%s tool call %d lacks an id or JSON arguments: %s", kind, i, out)
			}
		}
		if u := c.Usage; u != nil && !(fuzzcheck.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}).AddsUp() {
			t.Fatalf("%s usage is negative or does not add up: %s", kind, out)
		}
	})
}

// randomIDs are the ids a translator makes up for an answer that carries none.
var randomIDs = regexp.MustCompile(`chatcmpl-[A-Z2-7]{26}`)

// FuzzResponseStream translates arbitrary SSE answers fed whole, byte by byte and in fuzzed
// pieces (cuts), with the end flagged on the last piece or alone. The answer is in, followed
// by the events mix picks from the kind's recorded streams (a byte per event), so the fuzzer
// also reorders real events. The client's stream is the same however the answer was cut, is
// well formed (fuzzcheck.CheckStream: whole events, one id, one finish, tool call arguments
// that parse as JSON when the stream ends) and ends at an error.
func FuzzResponseStream(f *testing.F) {
	addFiles(f, "stream/*.in.sse", []byte(nil), []byte{3, 0, 7}, false)
	vocab := map[string][][]byte{}
	for k, kind := range translating {
		paths, _ := filepath.Glob(filepath.Join("testdata", kind, "stream", "*.in.sse"))
		for _, p := range paths {
			b, _ := os.ReadFile(p)
			// The same stream with CRLF line ends, and its events shuffled.
			f.Add(uint8(k), bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")), []byte(nil), []byte{1, 14}, true)
			for ev := range bytes.SplitSeq(b, []byte("\n\n")) {
				if len(bytes.TrimSpace(ev)) > 0 {
					vocab[kind] = append(vocab[kind], append(ev, "\n\n"...))
				}
			}
		}
		f.Add(uint8(k), []byte(nil), []byte{0, 5, 3, 9, 1, 2, 40, 7, 4}, []byte{2}, false)
	}
	f.Fuzz(func(t *testing.T, k uint8, in, mix, cuts []byte, endAlone bool) {
		if len(in)+len(mix) > 8<<10 {
			return // keeps executions fast
		}
		kind := translating[int(k)%len(translating)]
		for _, b := range mix {
			in = append(in, vocab[kind][int(b)%len(vocab[kind])]...)
		}
		whole := feedPieces(t, kind, [][]byte{in}, endAlone)
		splits := [][][]byte{fuzzcheck.Pieces(in, cuts)}
		if len(in) <= 2<<10 {
			splits = append(splits, fuzzcheck.Pieces(in, nil)) // byte by byte
		}
		for _, pieces := range splits {
			// An answer without its own id (Gemini's responseId) gets a random one per translator.
			if got := feedPieces(t, kind, pieces, endAlone); !bytes.Equal(randomIDs.ReplaceAll(got, nil), randomIDs.ReplaceAll(whole, nil)) {
				t.Fatalf("%s: cut into %d pieces the client's stream differs:\n%s\nwhole:\n%s", kind, len(pieces), got, whole)
			}
		}
		if _, err := fuzzcheck.CheckStream(whole); err != nil {
			t.Fatalf("%s: %v\nclient stream:\n%s", kind, err, whole)
		}
	})
}

// feedPieces translates a stream the way the upstream ext_proc does: piece by piece, then
// (endAlone) an empty last body. A translation error ends the client's stream with an error
// event; the translator must then stay silent.
func feedPieces(t *testing.T, kind string, pieces [][]byte, endAlone bool) []byte {
	t.Helper()
	tr := translator(t, kind, true)
	if endAlone || len(pieces) == 0 {
		pieces = append(pieces, nil)
	}
	var out []byte
	failed := false
	for i, p := range pieces {
		got, err := tr.Chunk(p, i == len(pieces)-1)
		if failed && (len(got) > 0 || err != nil) {
			t.Fatalf("%s: after an error the translator went on: %q, %v", kind, got, err)
		}
		if len(got) > 0 && (!bytes.HasPrefix(got, []byte("data: ")) || !bytes.HasSuffix(got, []byte("\n\n"))) {
			t.Fatalf("%s: Chunk returned a partial event: %q", kind, got)
		}
		out = append(out, got...)
		if err != nil {
			if leak := fuzzcheck.Leak(err.Error()); leak != "" {
				t.Fatalf("%s: the client's error event would show Go vocabulary %q: %v", kind, leak, err)
			}
			out = append(out, `data: {"error":{"message":"translation failed","code":"upstream_error"}}`+"\n\n"...)
			failed = true
		}
	}
	return out
}

// TestStreamErrorEndsTranslation: an answer that cannot be translated midway ends the stream
// with one error, in words without Go type names; what follows it is not translated (the
// client already got an error event). Found by FuzzResponseStream.
func TestStreamErrorEndsTranslation(t *testing.T) {
	first := map[string]string{
		ir.ProviderTypeAnthropic: `{"type":"message_start","message":{"id":"m1","model":"claude","usage":{"input_tokens":3}}}`,
		ir.ProviderTypeGemini:    `{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"responseId":"r1","modelVersion":"g"}`,
	}
	for _, kind := range translating {
		wrongType := map[string]string{ir.ProviderTypeAnthropic: `{"type":{}}`, ir.ProviderTypeGemini: `{"candidates":"x"}`}[kind]
		for _, bad := range []string{`7`, `not json`, wrongType} {
			tr := translator(t, kind, true)
			out, err := tr.Chunk([]byte("data: "+first[kind]+"\n\ndata: "+bad+"\n\n"), false)
			if err == nil || !bytes.Contains(out, []byte(`"role":"assistant"`)) {
				t.Fatalf("%s %s: out %q, err %v; want the first event's chunk and an error", kind, bad, out, err)
			}
			if leak := fuzzcheck.Leak(err.Error()); leak != "" {
				t.Errorf("%s %s: error %q shows Go vocabulary %q", kind, bad, err, leak)
			}
			more, err := tr.Chunk([]byte("data: "+first[kind]+"\n\n"), true)
			if len(more) > 0 || err != nil {
				t.Errorf("%s %s: after the error the translator went on: %q, %v", kind, bad, more, err)
			}
		}
	}
}

// TestUsageNeverNegative: a provider's usage block with negative or huge counts gives usage
// that is never negative and adds up (sums saturate instead of wrapping), so a bogus block
// cannot make a request free. The property FuzzResponseBody checks.
func TestUsageNeverNegative(t *testing.T) {
	const huge = "9223372036854775807"
	answers := map[string][]string{
		ir.ProviderTypeAnthropic: {`{"usage":{"input_tokens":-5,"output_tokens":3,"cache_read_input_tokens":2}}`,
			`{"usage":{"input_tokens":` + huge + `,"output_tokens":` + huge + `,"cache_read_input_tokens":` + huge + `}}`},
		ir.ProviderTypeGemini: {`{"candidates":[{}],"usageMetadata":{"promptTokenCount":-4,"candidatesTokenCount":2}}`,
			`{"candidates":[{}],"usageMetadata":{"promptTokenCount":` + huge + `,"candidatesTokenCount":` + huge + `,"thoughtsTokenCount":5,"toolUsePromptTokenCount":7}}`},
	}
	for kind, ins := range answers {
		for _, in := range ins {
			out, err := translator(t, kind, false).Body([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			var c openai.ChatCompletion
			if err := json.Unmarshal(out, &c); err != nil || c.Usage == nil {
				t.Fatalf("%s: %v %s", kind, err, out)
			}
			u := c.Usage
			if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < u.PromptTokens || u.TotalTokens < u.CompletionTokens ||
				u.PromptTokensDetails.CachedTokens < 0 || u.PromptTokensDetails.CachedTokens > u.PromptTokens {
				t.Errorf("%s %s: usage %+v", kind, in, *u)
			}
		}
	}
}
