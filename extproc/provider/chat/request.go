package chat

// The request side the translating adapters (anthropic, gemini) share: reading the client's
// OpenAI request, field by field, with refusals in JSON terms; which OpenAI values a provider
// cannot express (refused with ErrBadRequest, a 400 naming the field and the fix),
// which nested fields it has no place for (dropped openly: listed in Upstream.Removed), and
// the normalisations that keep a valid OpenAI value from failing upstream.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
)

// partText is a text or refusal part's text.
func partText(p openai.Part) string {
	if p.Type == openai.PartRefusal {
		return p.Refusal
	}
	return p.Text
}

func decodeMessages(req provider.Request) ([]openai.Message, error) {
	return decodeEach[openai.Message](req, "messages")
}

// decodeEach decodes the array field key one element at a time, so a refusal names the
// element (messages[3].tool_calls) and speaks JSON, not Go.
func decodeEach[T any](req provider.Request, key string) ([]T, error) {
	raw := provider.Field(req, key)
	if raw == nil {
		return nil, fmt.Errorf("%w: %s is required", provider.ErrBadRequest, key)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%w: %s", provider.ErrBadRequest, jsonMismatch(key, err))
	}
	out := make([]T, len(items))
	for i, item := range items {
		if err := json.Unmarshal(item, &out[i]); err != nil {
			return nil, fmt.Errorf("%w: %s", provider.ErrBadRequest, jsonMismatch(fmt.Sprintf("%s[%d]", key, i), err))
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
		return nil, fmt.Errorf("%w: messages[%d].content is not a valid JSON string", provider.ErrBadRequest, i)
	case err != nil:
		return nil, fmt.Errorf("%w: messages[%d].content must be a string or an array of content parts", provider.ErrBadRequest, i)
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
			return "", fmt.Errorf("%w: messages[%d]: system, developer and tool messages take text only, not %q parts", provider.ErrBadRequest, i, p.Type)
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
		return nil, fmt.Errorf("%w: messages[%d].tool_calls[%d] (%s): function.arguments must be a JSON object, got %q", provider.ErrBadRequest, i, j, tc.Function.Name, provider.Clip(s, 80))
	}
	return buf.Bytes(), nil
}

func boolField(req provider.Request, key string) (bool, error) {
	var b bool
	if raw := provider.Field(req, key); raw != nil && json.Unmarshal(raw, &b) != nil {
		return false, fmt.Errorf("%w: %s must be true or false", provider.ErrBadRequest, key)
	}
	return b, nil
}

// maxTokens is the client's output cap, 0 if none; max_completion_tokens wins over max_tokens.
func maxTokens(req provider.Request) (int64, error) {
	for _, f := range []string{"max_completion_tokens", "max_tokens"} {
		if raw := provider.Field(req, f); raw != nil {
			var n int64
			if json.Unmarshal(raw, &n) != nil || n < 1 {
				return 0, fmt.Errorf("%w: %s must be a positive integer", provider.ErrBadRequest, f)
			}
			return n, nil
		}
	}
	return 0, nil
}

// stopSequences reads stop, a string or an array of strings.
func stopSequences(req provider.Request) ([]string, error) {
	raw := provider.Field(req, "stop")
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
		return nil, fmt.Errorf("%w: stop must be a string or an array of strings", provider.ErrBadRequest)
	}
	return many, nil
}

// emptySchema stands in for a tool without parameters: providers want an object schema.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

func decodeTools(req provider.Request) ([]openai.FunctionDefinition, error) {
	if provider.Field(req, "tools") == nil {
		return nil, nil
	}
	tools, err := decodeEach[openai.Tool](req, "tools")
	if err != nil {
		return nil, err
	}
	out := make([]openai.FunctionDefinition, len(tools))
	for i, t := range tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, fmt.Errorf("%w: tools[%d]: only function tools with a name are supported", provider.ErrBadRequest, i)
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

func decodeToolChoice(req provider.Request) (toolChoice, error) {
	raw := provider.Field(req, "tool_choice")
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
	return toolChoice{}, fmt.Errorf(`%w: tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":...}}`, provider.ErrBadRequest)
}

// Nested field paths an adapter may drop, as listed in x-tollway-removed-params.
const (
	removedName   = "messages[].name"
	removedDetail = "messages[].content[].image_url.detail"
	removedStrict = "tools[].function.strict"
)

// removals collects the nested fields an adapter dropped.
type removals map[string]bool

// list returns the paths sorted, nil when none.
func (r removals) list() []string {
	if len(r) == 0 {
		return nil
	}
	out := make([]string, 0, len(r))
	for p := range r {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// message notes what of message m neither provider API has a place for: its name (a
// participant name; OpenAI uses it to tell speakers of one role apart) and an image detail
// other than auto (a resolution hint).
func (r removals) message(m openai.Message, parts []openai.Part) {
	if m.Name != "" {
		r[removedName] = true
	}
	for _, p := range parts {
		if p.Type == "image_url" && p.ImageURL.Detail != "" && p.ImageURL.Detail != "auto" {
			r[removedDetail] = true
		}
	}
}

// numberField reads a numeric top-level field; ok is false when it is absent.
func numberField(req provider.Request, key string) (v float64, ok bool, err error) {
	raw := provider.Field(req, key)
	if raw == nil {
		return 0, false, nil
	}
	if json.Unmarshal(raw, &v) != nil {
		return 0, false, fmt.Errorf("%w: %s must be a number", provider.ErrBadRequest, key)
	}
	return v, true, nil
}

// oneAnswer refuses n above 1: the translating providers' answers are read as one choice
// (Anthropic has no n at all). n=1, the default, is honoured as it is.
func oneAnswer(req provider.Request, api string) error {
	raw := provider.Field(req, "n")
	if raw == nil {
		return nil
	}
	var n int64
	if json.Unmarshal(raw, &n) != nil || n < 1 {
		return fmt.Errorf("%w: n must be a positive integer", provider.ErrBadRequest)
	}
	if n > 1 {
		return fmt.Errorf("%w: n=%d: %s answers one choice per request through this gateway; send n=1 (or leave it out) and repeat the request for more answers", provider.ErrBadRequest, n, api)
	}
	return nil
}

// responseFormat is OpenAI's response_format: Type text, json_object or json_schema (with
// Schema, nil when the client gave none), or "" when absent.
type responseFormat struct {
	Type   string
	Schema json.RawMessage
}

func decodeResponseFormat(req provider.Request) (responseFormat, error) {
	raw := provider.Field(req, "response_format")
	if raw == nil {
		return responseFormat{}, nil
	}
	var in struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &in) != nil {
		return responseFormat{}, fmt.Errorf(`%w: response_format must be {"type": "text" | "json_object" | "json_schema", ...}`, provider.ErrBadRequest)
	}
	out := responseFormat{Type: in.Type}
	switch in.Type {
	case "text", "json_object":
	case "json_schema":
		if in.JSONSchema != nil {
			out.Schema = provider.Field(provider.Request{"schema": in.JSONSchema.Schema}, "schema") // nil if null
		}
	default:
		return responseFormat{}, fmt.Errorf(`%w: response_format.type must be "text", "json_object" or "json_schema", not %q`, provider.ErrBadRequest, in.Type)
	}
	return out, nil
}

// imageMediaType normalises a data URL's image type for a provider: lower case, and
// image/jpg (common, but not a registered type) as image/jpeg. A type outside allowed is
// refused naming the ones the provider takes.
func imageMediaType(mt, api string, allowed []string, i int) (string, error) {
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "image/jpg" || mt == "image/pjpeg" {
		mt = "image/jpeg"
	}
	if !slices.Contains(allowed, mt) {
		return "", fmt.Errorf("%w: messages[%d]: %s takes images as %s, not %q; convert the image to one of those", provider.ErrBadRequest, i, api, strings.Join(allowed, ", "), mt)
	}
	return mt, nil
}

// int32Field reads an integer top-level field that the provider keeps in 32 bits.
func int32Field(req provider.Request, key, api string) (*int64, error) {
	raw := provider.Field(req, key)
	if raw == nil {
		return nil, nil
	}
	var v int64
	if json.Unmarshal(raw, &v) != nil {
		return nil, fmt.Errorf("%w: %s must be an integer", provider.ErrBadRequest, key)
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %s must be from %d to %d for %s, not %d", provider.ErrBadRequest, key, math.MinInt32, math.MaxInt32, api, v)
	}
	return &v, nil
}
