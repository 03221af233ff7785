package tasks

// The OpenAI SDKs send videos.create as multipart/form-data (it can carry a file), with the
// extra body's nested objects flattened in bracket notation: input[prompt]=...,
// parameters[duration]=5, input[media][][type]=first_frame. FormToJSON turns such a form back
// into the JSON object the family adapters validate.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"strings"
)

const (
	maxFormFields = 256
	maxFormDepth  = 4
)

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// errMalformedForm is a multipart body that does not parse (mime/multipart's own words name
// its functions).
var errMalformedForm = errors.New("the multipart body is malformed: each part must follow the content-type's boundary and the body must end with the closing boundary")

// FormToJSON reads a multipart/form-data body (contentType carries its boundary) into a JSON
// object. Values that read as JSON numbers or true/false become those, unless str(path) says
// the field is a string (a prompt of "42", Kling's duration "5"). A file part becomes a data
// URL of its content type. Bad forms are errors that name the problem.
func FormToJSON(contentType string, body []byte, maxBytes int64, str func(path string) bool) ([]byte, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, errors.New("content-type must be application/json or multipart/form-data with a boundary")
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	root := map[string]any{}
	for n := 0; ; n++ {
		part, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, errMalformedForm
		}
		if n == maxFormFields {
			return nil, fmt.Errorf("the form has more than %d fields", maxFormFields)
		}
		name := part.FormName()
		if name == "" {
			return nil, errors.New("a form part has no name")
		}
		raw, err := io.ReadAll(io.LimitReader(part, maxBytes+1))
		switch {
		case err != nil:
			return nil, errMalformedForm
		case int64(len(raw)) > maxBytes:
			return nil, fmt.Errorf("form field %q is over %d bytes", name, maxBytes)
		}
		var v any
		if part.FileName() != "" {
			ct := part.Header.Get("Content-Type")
			if ct == "" || ct == "application/octet-stream" {
				ct = http.DetectContentType(raw)
			}
			v = "data:" + ct + ";base64," + base64.StdEncoding.EncodeToString(raw)
		} else {
			v = scalar(string(raw), strings.NewReplacer("[]", "", "[", ".", "]", "").Replace(name), str)
		}
		path, err := formPath(name)
		if err != nil {
			return nil, err
		}
		if err := place(root, path, v); err != nil {
			return nil, fmt.Errorf("form field %q: %v", name, err)
		}
	}
	return json.Marshal(root)
}

// scalar reads one form value; dotted is the field's path without array marks (input.prompt).
func scalar(s, dotted string, str func(string) bool) any {
	if str != nil && str(dotted) {
		return s
	}
	switch {
	case s == "true":
		return true
	case s == "false":
		return false
	case jsonNumber.MatchString(s):
		return json.Number(s)
	}
	return s
}

// formPath splits a[b][][c] into a, b, "" (an array element), c.
func formPath(name string) ([]string, error) {
	key, rest, _ := strings.Cut(name, "[")
	path := []string{key}
	if rest != "" {
		rest = "[" + rest
	}
	for rest != "" {
		end := strings.IndexByte(rest, ']')
		if rest[0] != '[' || end < 0 {
			return nil, fmt.Errorf("form field name %q is not key[sub][...] notation", name)
		}
		path, rest = append(path, rest[1:end]), rest[end+1:]
	}
	if key == "" || len(path) > maxFormDepth+1 {
		return nil, fmt.Errorf("form field name %q is empty or nested too deeply", name)
	}
	return path, nil
}

// place sets v at path under root. An empty step is an array: a scalar is appended; for
// objects in arrays, a key the last element already has starts a new element.
func place(root map[string]any, path []string, v any) error {
	cur := root
	for i, k := range path {
		last := i == len(path)-1
		if k == "" {
			return errors.New("an array must be the value of a named key")
		}
		if !last && path[i+1] == "" {
			arr, _ := cur[k].([]any)
			if cur[k] != nil && arr == nil {
				return errors.New("given both as a value and as an array")
			}
			if i+1 == len(path)-1 {
				cur[k] = append(arr, v)
				return nil
			}
			next := path[i+2]
			var el map[string]any
			if n := len(arr); n > 0 {
				el, _ = arr[n-1].(map[string]any)
			}
			if el == nil || el[next] != nil {
				el = map[string]any{}
				arr = append(arr, el)
			}
			cur[k] = arr
			return place(el, path[i+2:], v)
		}
		if last {
			if cur[k] != nil {
				return errors.New("given twice")
			}
			cur[k] = v
			return nil
		}
		next, ok := cur[k].(map[string]any)
		if !ok {
			if cur[k] != nil {
				return errors.New("given both as a value and as an object")
			}
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	return nil
}
