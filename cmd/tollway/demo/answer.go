package demo

// This file owns what the demo model says: its canned text and the arguments of its tool calls.

import (
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"
)

// Prefix starts every text answer, so nobody mistakes it for a language model's.
const Prefix = "Tollway demo model (offline, no LLM): "

// maxEcho bounds how much of the client's text an answer repeats.
const maxEcho = 200

// replyText is the canned answer: the tool result when the last message is one, else an echo of
// the last user message.
func replyText(req *ChatRequest) string {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		name := "the tool"
		for _, m := range req.Messages {
			for _, c := range m.ToolCalls {
				if c.ID == last.ToolCallID && c.Function.Name != "" {
					name = c.Function.Name
				}
			}
		}
		return Prefix + name + " returned " + quote(Text(last.Content)) + "."
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return Prefix + "you said " + quote(Text(req.Messages[i].Content)) + "."
		}
	}
	return Prefix + "there is no user message to answer."
}

// quote puts echo(s) in double quotes.
func quote(s string) string { return `"` + echo(s) + `"` }

// echo is s on one line, cut to maxEcho runes.
func echo(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxEcho {
		s = string([]rune(s)[:maxEcho]) + "..."
	}
	return s
}

// schema is the part of a JSON schema the demo reads to build plausible arguments.
type schema struct {
	Type       json.RawMessage            `json:"type"` // "string" or ["string","null"]
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
	Enum       []json.RawMessage          `json:"enum"`
	Const      json.RawMessage            `json:"const"`
	Default    json.RawMessage            `json:"default"`
	Examples   []json.RawMessage          `json:"examples"`
	Items      json.RawMessage            `json:"items"`
	AnyOf      []json.RawMessage          `json:"anyOf"`
	OneOf      []json.RawMessage          `json:"oneOf"`
	Format     string                     `json:"format"`
	Minimum    *float64                   `json:"minimum"`
}

// maxDepth bounds the walk through nested schemas.
const maxDepth = 8

// toolArguments builds a call's arguments from the function's parameter schema: an object with
// its required properties (every property when none is marked required), each given a
// plausible value.
func toolArguments(params json.RawMessage, req *ChatRequest) string {
	v := example(params, "", req, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{} // function arguments are always an object
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// example is a plausible value for schema raw, whose property name is name: a const, the
// first enum value, the default or first example, else one by type (strings by name and format).
func example(raw json.RawMessage, name string, req *ChatRequest, depth int) any {
	var s schema
	if depth > maxDepth || json.Unmarshal(raw, &s) != nil {
		return nil
	}
	for _, fixed := range [][]json.RawMessage{{s.Const}, s.Enum, {s.Default}, s.Examples} {
		if len(fixed) > 0 && len(fixed[0]) > 0 {
			return fixed[0]
		}
	}
	if alt := append(s.AnyOf, s.OneOf...); len(alt) > 0 {
		return example(alt[0], name, req, depth+1)
	}
	switch schemaType(s) {
	case "object":
		obj := map[string]any{}
		keys := s.Required
		if len(keys) == 0 {
			for k := range s.Properties {
				keys = append(keys, k)
			}
			sort.Strings(keys)
		}
		for _, k := range keys {
			obj[k] = example(s.Properties[k], k, req, depth+1)
		}
		return obj
	case "array":
		return []any{example(s.Items, name, req, depth+1)}
	case "integer":
		if s.Minimum != nil {
			return int64(*s.Minimum)
		}
		return 1
	case "number":
		if s.Minimum != nil {
			return *s.Minimum
		}
		return 1.5
	case "boolean":
		return true
	case "null":
		return nil
	}
	return exampleString(strings.ToLower(name), s.Format, req)
}

// schemaType is the schema's type (the first non-null one of a list); "object" when it has
// properties and no type.
func schemaType(s schema) string {
	var one string
	var many []string
	switch {
	case json.Unmarshal(s.Type, &one) == nil:
		return one
	case json.Unmarshal(s.Type, &many) == nil:
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
	case s.Properties != nil:
		return "object"
	}
	return "string"
}

// exampleString is a string that fits a property called name (lowercase) with format.
func exampleString(name, format string, req *ChatRequest) string {
	switch format {
	case "date":
		return "2026-01-15"
	case "date-time":
		return "2026-01-15T09:30:00Z"
	case "email":
		return "ada@example.com"
	case "uri", "url":
		return "https://example.com/"
	}
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(name, w) {
				return true
			}
		}
		return false
	}
	switch {
	case has("city", "location", "place", "town"):
		return "Paris"
	case has("country"):
		return "France"
	case has("email"):
		return "ada@example.com"
	case has("url", "link"):
		return "https://example.com/"
	case has("date", "day"):
		return "2026-01-15"
	case has("time"):
		return "09:30"
	case has("name", "user"):
		return "Ada"
	case name == "q" || has("query", "question", "search", "text", "prompt", "message"):
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if req.Messages[i].Role == "user" {
				if t := echo(Text(req.Messages[i].Content)); t != "" {
					return t
				}
			}
		}
	}
	return "example"
}

// argumentPieces splits a call's arguments into the few fragments a model streams them in,
// at rune boundaries: about 8 bytes each.
func argumentPieces(args string) []string {
	var out []string
	for len(args) > 0 {
		n := 0
		for n < len(args) && n < 8 {
			_, size := utf8.DecodeRuneInString(args[n:])
			n += size
		}
		out = append(out, args[:n])
		args = args[n:]
	}
	return out
}
