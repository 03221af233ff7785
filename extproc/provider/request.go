package provider

// Request-side rules the translating adapters (anthropic, gemini) share: which OpenAI values a
// provider cannot express (refused with ErrBadRequest, a 400 naming the field and the fix),
// which nested fields it has no place for (dropped openly: listed in Upstream.Removed), and
// the normalisations that keep a valid OpenAI value from failing upstream.

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

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
func numberField(req Request, key string) (v float64, ok bool, err error) {
	raw := Field(req, key)
	if raw == nil {
		return 0, false, nil
	}
	if json.Unmarshal(raw, &v) != nil {
		return 0, false, fmt.Errorf("%w: %s must be a number", ErrBadRequest, key)
	}
	return v, true, nil
}

// oneAnswer refuses n above 1: the translating providers' answers are read as one choice
// (Anthropic has no n at all). n=1, the default, is honoured as it is.
func oneAnswer(req Request, provider string) error {
	raw := Field(req, "n")
	if raw == nil {
		return nil
	}
	var n int64
	if json.Unmarshal(raw, &n) != nil || n < 1 {
		return fmt.Errorf("%w: n must be a positive integer", ErrBadRequest)
	}
	if n > 1 {
		return fmt.Errorf("%w: n=%d: %s answers one choice per request through this gateway; send n=1 (or leave it out) and repeat the request for more answers", ErrBadRequest, n, provider)
	}
	return nil
}

// responseFormat is OpenAI's response_format: Type text, json_object or json_schema (with
// Schema, nil when the client gave none), or "" when absent.
type responseFormat struct {
	Type   string
	Schema json.RawMessage
}

func decodeResponseFormat(req Request) (responseFormat, error) {
	raw := Field(req, "response_format")
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
		return responseFormat{}, fmt.Errorf(`%w: response_format must be {"type": "text" | "json_object" | "json_schema", ...}`, ErrBadRequest)
	}
	out := responseFormat{Type: in.Type}
	switch in.Type {
	case "text", "json_object":
	case "json_schema":
		if in.JSONSchema != nil {
			out.Schema = Field(Request{"schema": in.JSONSchema.Schema}, "schema") // nil if null
		}
	default:
		return responseFormat{}, fmt.Errorf(`%w: response_format.type must be "text", "json_object" or "json_schema", not %q`, ErrBadRequest, in.Type)
	}
	return out, nil
}

// imageMediaType normalises a data URL's image type for a provider: lower case, and
// image/jpg (common, but not a registered type) as image/jpeg. A type outside allowed is
// refused naming the ones the provider takes.
func imageMediaType(mt, provider string, allowed []string, i int) (string, error) {
	mt = strings.ToLower(strings.TrimSpace(mt))
	if mt == "image/jpg" || mt == "image/pjpeg" {
		mt = "image/jpeg"
	}
	if !slices.Contains(allowed, mt) {
		return "", fmt.Errorf("%w: messages[%d]: %s takes images as %s, not %q; convert the image to one of those", ErrBadRequest, i, provider, strings.Join(allowed, ", "), mt)
	}
	return mt, nil
}

// int32Field reads an integer top-level field that the provider keeps in 32 bits.
func int32Field(req Request, key, provider string) (*int64, error) {
	raw := Field(req, key)
	if raw == nil {
		return nil, nil
	}
	var v int64
	if json.Unmarshal(raw, &v) != nil {
		return nil, fmt.Errorf("%w: %s must be an integer", ErrBadRequest, key)
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %s must be from %d to %d for %s, not %d", ErrBadRequest, key, math.MinInt32, math.MaxInt32, provider, v)
	}
	return &v, nil
}
