package provider

// The JSON readers every adapter shares. Values are subslices of the request (Object, Array):
// a 20 MiB image is not copied until it is decoded. A refusal names the field, the JSON type it
// must be, the type it is and the value received (never a Go type).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Shown bounds a client's value quoted in a refusal (bytes).
const Shown = 60

// Field is a member of a JSON object, nil when it is absent or null.
func Field(obj Request, key string) json.RawMessage {
	raw := bytes.TrimSpace(obj[key])
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// ReadString reads the string at field; ok is false when raw is absent or null.
func ReadString(field string, raw json.RawMessage) (s string, ok bool, err error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", true, WrongType(field, "a string", raw)
	}
	return s, true, nil
}

// ReadInt reads the integer at field; ok is false when raw is absent or null.
func ReadInt(field string, raw json.RawMessage) (n int64, ok bool, err error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	if json.Unmarshal(raw, &n) != nil {
		return 0, true, WrongType(field, "an integer", raw)
	}
	return n, true, nil
}

// ReadBool reads the boolean at field; ok is false when raw is absent or null.
func ReadBool(field string, raw json.RawMessage) (b, ok bool, err error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return false, false, nil
	}
	if json.Unmarshal(raw, &b) != nil {
		return false, true, WrongType(field, "true or false", raw)
	}
	return b, true, nil
}

// WrongType refuses the value raw at field: what it must be, what it is, and the value.
func WrongType(field, want string, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	return fmt.Errorf("%w: %s must be %s, not %s (got %s)", ErrBadRequest, field, want, typeOf(raw), Clip(string(raw), Shown))
}

// typeOf names the JSON type of a value, as a client wrote it.
func typeOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// Object reads the JSON object at field into its members; absent (nil) is an empty object.
func Object(field string, raw json.RawMessage) (Request, error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 {
		return Request{}, nil
	}
	if raw[0] != '{' {
		return nil, WrongType(field, "an object", raw)
	}
	obj, err := ParseRequest(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not valid JSON", ErrBadRequest, field)
	}
	return obj, nil
}

// How a refusal of an unknown member lists the members an object takes.
const (
	ItsFields = "its fields are"
	ItTakes   = "it takes"
)

// OnlyMembers refuses a member of field's object outside known (empty: none is allowed), the
// members listed after lists (ItsFields, ItTakes); unlisted members are allowed too (the
// gateway's own, which no provider gets).
func OnlyMembers(field string, obj Request, known []string, lists string, unlisted ...string) error {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, k) && !slices.Contains(unlisted, k) {
			allowed := "none"
			if len(known) > 0 {
				allowed = strings.Join(known, ", ")
			}
			return fmt.Errorf("%w: %s does not take field %q; %s %s", ErrBadRequest, field, Clip(k, Shown), lists, allowed)
		}
	}
	return nil
}

// Array reads the array at field into its elements, each a subslice of raw; want says what the
// value must be.
func Array(field string, raw json.RawMessage, want string) ([]json.RawMessage, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw)) // a Buffer is parsed in place
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '[' {
		got := bytes.TrimSpace(raw)
		if len(got) == 0 {
			got = json.RawMessage("null")
		}
		return nil, WrongType(field, want, got)
	}
	var out []json.RawMessage
	for dec.PeekKind() != ']' {
		v, err := dec.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not valid JSON", ErrBadRequest, field)
		}
		end := int(dec.InputOffset())
		out = append(out, raw[end-len(v):end:end])
	}
	return out, nil
}
