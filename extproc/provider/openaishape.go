package provider

// What the adapters share: reading the client's OpenAI request, writing OpenAI answers and
// stream chunks, and reading providers' event streams (framed by extproc/sse).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/sse"
)

// ErrBadRequest marks a request an adapter cannot translate because of what the client sent (a
// tool call whose arguments are not a JSON object, a content part the provider lacks): the
// client's mistake, a 400, not a gateway fault.
var ErrBadRequest = errors.New("request cannot be translated")

// now is the clock for "created"; tests pin it.
var now = time.Now

// partText is a text or refusal part's text.
func partText(p openai.Part) string {
	if p.Type == openai.PartRefusal {
		return p.Refusal
	}
	return p.Text
}

func decodeMessages(req Request) ([]openai.Message, error) {
	return decodeEach[openai.Message](req, "messages")
}

// decodeEach decodes the array field key one element at a time, so a refusal names the
// element (messages[3].tool_calls) and speaks JSON, not Go.
func decodeEach[T any](req Request, key string) ([]T, error) {
	raw := Field(req, key)
	if raw == nil {
		return nil, fmt.Errorf("%w: %s is required", ErrBadRequest, key)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadRequest, jsonMismatch(key, err))
	}
	out := make([]T, len(items))
	for i, item := range items {
		if err := json.Unmarshal(item, &out[i]); err != nil {
			return nil, fmt.Errorf("%w: %s", ErrBadRequest, jsonMismatch(fmt.Sprintf("%s[%d]", key, i), err))
		}
	}
	return out, nil
}

// jsonMismatch says why the client's value at where did not decode, in JSON terms: which field
// has which JSON type instead of which. encoding/json's own text names Go types.
func jsonMismatch(where string, err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		return where + " is not valid JSON"
	}
	if te.Field != "" {
		where += "." + te.Field
	}
	return fmt.Sprintf("%s must be %s, not a JSON %s", where, jsonKind(te.Type), te.Value)
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return "a number"
}

// contentParts reads message i's content: a string is one text part, null none.
func contentParts(raw json.RawMessage, i int) ([]openai.Part, error) {
	parts, err := openai.Parts(raw)
	switch {
	case errors.Is(err, openai.ErrContentString):
		return nil, fmt.Errorf("%w: messages[%d].content is not a valid JSON string", ErrBadRequest, i)
	case err != nil:
		return nil, fmt.Errorf("%w: messages[%d].content must be a string or an array of content parts", ErrBadRequest, i)
	}
	return parts, nil
}

// contentText reads the content of a system, developer or tool message, which can only be
// text; several parts are joined with newlines.
func contentText(raw json.RawMessage, i int) (string, error) {
	parts, err := contentParts(raw, i)
	if err != nil {
		return "", err
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("%w: messages[%d]: system, developer and tool messages take text only, not %q parts", ErrBadRequest, i, p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

func isHTTPURL(u string) bool {
	l := strings.ToLower(u[:min(len(u), 8)])
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}

// toolArguments parses the arguments of tool call j of message i, which providers want as an
// object. Empty arguments (some clients send "" for a call without parameters) mean {}.
func toolArguments(tc openai.ToolCall, i, j int) (json.RawMessage, error) {
	s := strings.TrimSpace(tc.Function.Arguments)
	if s == "" {
		return json.RawMessage("{}"), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil || buf.Bytes()[0] != '{' {
		return nil, fmt.Errorf("%w: messages[%d].tool_calls[%d] (%s): function.arguments must be a JSON object, got %q", ErrBadRequest, i, j, tc.Function.Name, Clip(s, 80))
	}
	return buf.Bytes(), nil
}

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

func boolField(req Request, key string) (bool, error) {
	var b bool
	if raw := Field(req, key); raw != nil && json.Unmarshal(raw, &b) != nil {
		return false, fmt.Errorf("%w: %s must be true or false", ErrBadRequest, key)
	}
	return b, nil
}

// maxTokens is the client's output cap, 0 if none; max_completion_tokens wins over max_tokens.
func maxTokens(req Request) (int64, error) {
	for _, f := range []string{"max_completion_tokens", "max_tokens"} {
		if raw := Field(req, f); raw != nil {
			var n int64
			if json.Unmarshal(raw, &n) != nil || n < 1 {
				return 0, fmt.Errorf("%w: %s must be a positive integer", ErrBadRequest, f)
			}
			return n, nil
		}
	}
	return 0, nil
}

// stopSequences reads stop, a string or an array of strings.
func stopSequences(req Request) ([]string, error) {
	raw := Field(req, "stop")
	if raw == nil {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%w: stop must be a string or an array of strings", ErrBadRequest)
	}
	return many, nil
}

// emptySchema stands in for a tool without parameters: providers want an object schema.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func decodeTools(req Request) ([]openai.FunctionDefinition, error) {
	if Field(req, "tools") == nil {
		return nil, nil
	}
	tools, err := decodeEach[openai.Tool](req, "tools")
	if err != nil {
		return nil, err
	}
	out := make([]openai.FunctionDefinition, len(tools))
	for i, t := range tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, fmt.Errorf("%w: tools[%d]: only function tools with a name are supported", ErrBadRequest, i)
		}
		out[i] = t.Function
		if p := bytes.TrimSpace(out[i].Parameters); len(p) == 0 || string(p) == "null" {
			out[i].Parameters = emptySchema
		}
	}
	return out, nil
}

// toolChoice is OpenAI's tool_choice: Mode auto, none, required or function (with Name), or ""
// when the client did not set it.
type toolChoice struct{ Mode, Name string }

func decodeToolChoice(req Request) (toolChoice, error) {
	raw := Field(req, "tool_choice")
	if raw == nil {
		return toolChoice{}, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil && slices.Contains(openai.ToolChoiceModes, mode) {
		return toolChoice{Mode: mode}, nil
	}
	var forced openai.NamedToolChoice
	if json.Unmarshal(raw, &forced) == nil && forced.Type == "function" && forced.Function.Name != "" {
		return toolChoice{Mode: "function", Name: forced.Function.Name}, nil
	}
	return toolChoice{}, fmt.Errorf(`%w: tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":...}}`, ErrBadRequest)
}

// addModelUsage adds u to model's entry of list, or appends one.
func addModelUsage(list []openai.ModelUsage, model string, u *openai.Usage) []openai.ModelUsage {
	for i := range list {
		if e := &list[i]; e.Model == model {
			e.PromptTokens = tokens(e.PromptTokens, u.PromptTokens)
			e.CompletionTokens = tokens(e.CompletionTokens, u.CompletionTokens)
			e.TotalTokens = tokens(e.PromptTokens, e.CompletionTokens)
			e.PromptTokensDetails.CachedTokens = tokens(e.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.CachedTokens)
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
		TotalTokens:         tokens(prompt, completion),
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

// tokens adds a provider's token counts. Usage is billed, so a bogus count can neither turn
// negative (it reads as 0) nor wrap around a huge sum (it saturates).
func tokens(counts ...int64) int64 {
	var sum int64
	for _, c := range counts {
		if c > 0 {
			sum += min(c, math.MaxInt64-sum)
		}
	}
	return sum
}

// chunkWriter renders chat.completion.chunk events for one stream.
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

func (w *chunkWriter) write(c openai.ChatCompletionChunk) {
	c.ID, c.Object, c.Created, c.Model = w.id, openai.ObjectChunk, w.created, w.model
	w.out = append(w.out, "data: "...)
	w.out = append(w.out, marshal(c)...)
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

// encodeJSON encodes v without Go's HTML escaping, so text reads the same as it was sent.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// marshal is encodeJSON for the answer shapes above, made of strings and numbers only, which
// always encode.
func marshal(v any) []byte {
	b, err := encodeJSON(v)
	if err != nil {
		panic(fmt.Sprintf("provider: marshal %T: %v", v, err))
	}
	return b
}

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
