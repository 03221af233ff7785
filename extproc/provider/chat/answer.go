package chat

// What the translating adapters share of the answer side: writing OpenAI answers and stream
// chunks with their usage, and reading providers' event streams (framed by extproc/sse).

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strings"
	"time"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/sse"
)

// now is the clock for "created"; tests pin it.
var now = time.Now

// compactArgs renders a provider's tool input as OpenAI's arguments string.
func compactArgs(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// addModelUsage adds u to model's entry of list, or appends one.
func addModelUsage(list []openai.ModelUsage, model string, u *openai.Usage) []openai.ModelUsage {
	for i := range list {
		if e := &list[i]; e.Model == model {
			e.PromptTokens = provider.Tokens(e.PromptTokens, u.PromptTokens)
			e.CompletionTokens = provider.Tokens(e.CompletionTokens, u.CompletionTokens)
			e.TotalTokens = provider.Tokens(e.PromptTokens, e.CompletionTokens)
			e.PromptTokensDetails.CachedTokens = provider.Tokens(e.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.CachedTokens)
			return list
		}
	}
	return append(list, openai.ModelUsage{Model: model, Usage: *u})
}

// newUsage is OpenAI usage from token counts; cached tokens are part of the prompt, reasoning
// tokens part of the completion (both providers bill thinking as output).
func newUsage(prompt, completion, cached, reasoning int64) *openai.Usage {
	u := &openai.Usage{
		PromptTokens:        prompt,
		CompletionTokens:    completion,
		TotalTokens:         provider.Tokens(prompt, completion),
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: min(cached, prompt)},
	}
	if reasoning > 0 {
		u.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: min(reasoning, completion)}
	}
	return u
}

// imageTokens names the part of the completion that was images.
func imageTokens(u *openai.Usage, n int64) {
	if n <= 0 {
		return
	}
	if u.CompletionTokensDetails == nil {
		u.CompletionTokensDetails = &openai.CompletionTokensDetails{}
	}
	u.CompletionTokensDetails.ImageTokens = min(n, u.CompletionTokens)
}

type chunkWriter struct {
	id, model string
	created   int64
	started   bool // the role chunk went out
	out       []byte
}

// start sends the role chunk that opens every OpenAI stream, once.
func (w *chunkWriter) start() {
	if !w.started {
		w.started = true
		w.write(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: openai.Delta{Role: "assistant", Content: ptr("")}}}})
	}
}

// chunk sends one delta, and finish_reason when finish is set.
func (w *chunkWriter) chunk(d openai.Delta, finish string) {
	w.start()
	c := openai.ChunkChoice{Delta: d}
	if finish != "" {
		c.FinishReason = &finish
	}
	w.write(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{c}})
}

// usage sends the usage-only chunk that precedes [DONE].
func (w *chunkWriter) usage(u *openai.Usage) {
	w.start()
	w.write(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{}, Usage: u})
}

// header heads an answer object: the provider's id and model when it named them, else the
// stream's.
func (w *chunkWriter) header(object, id, model string) openai.Header {
	return openai.Header{ID: cmp.Or(id, w.id), Object: object, Created: w.created, Model: cmp.Or(model, w.model)}
}

func (w *chunkWriter) write(c openai.ChatCompletionChunk) {
	c.Header = w.header(openai.ObjectChunk, "", "")
	w.out = append(w.out, "data: "...)
	w.out = append(w.out, provider.Marshal(c)...)
	w.out = append(w.out, "\n\n"...)
}

func (w *chunkWriter) doneMarker() { w.out = append(w.out, "data: [DONE]\n\n"...) }

// take returns what was written since the last take.
func (w *chunkWriter) take() []byte {
	out := w.out
	w.out = nil
	return out
}

// sseReader reads a provider's event stream with the gateway's one SSE framer.
type sseReader struct{ f sse.Framer }

// feed adds b and calls fn with the data of each complete event (events without data are
// skipped). With end, a last event lacking its blank line is used if its data is whole JSON; a
// cut one is dropped.
func (r *sseReader) feed(b []byte, end bool, fn func(data []byte) error) error {
	return r.f.Feed(b, end, func(ev []byte) error {
		data := sse.Data(ev)
		if len(bytes.TrimSpace(data)) == 0 {
			// A bare JSON value without "data:" is no SSE event, but Gemini writes its
			// mid-stream errors that way ({"error": ...} after the last event): read it, or the
			// failure would pass as a quiet end.
			raw := bytes.TrimSpace(ev)
			if len(raw) == 0 || (raw[0] != '{' && raw[0] != '[') {
				return nil
			}
			data = raw
		}
		if end && !endsEvent(ev) && !json.Valid(data) {
			return nil
		}
		return fn(data)
	})
}

// endsEvent reports whether ev ends with its blank line: a line end (LF, CR or CRLF) right
// after another. CR then LF is one CRLF, so "\r\n" alone is not one.
func endsEvent(ev []byte) bool {
	for _, end := range blankLineEnds {
		if bytes.HasSuffix(ev, end) {
			return true
		}
	}
	return false
}

var blankLineEnds = [][]byte{[]byte("\n\n"), []byte("\n\r"), []byte("\r\r"), []byte("\n\r\n"), []byte("\r\r\n")}

func ptr[T any](v T) *T { return &v }

// tokenTally collects text a provider bills without counting it for us (Anthropic's thinking),
// to estimate its tokens once at the end of the answer.
type tokenTally struct{ text strings.Builder }

func (t *tokenTally) add(s string) { t.text.WriteString(s) }

func (t *tokenTally) count() int64 {
	if t.text.Len() == 0 {
		return 0
	}
	return int64(billing.CountText(t.text.String()))
}
