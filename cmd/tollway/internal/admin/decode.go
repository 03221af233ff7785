package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/xds/ir"
)

// Admin request bodies are decoded strictly and field by field, so every problem names its
// field: an unknown field (a typo must not silently do nothing), a wrong JSON type, a malformed
// amount. encoding/json alone stops at the first problem and cannot say which field a custom
// type's error (a decimal) belongs to.

const (
	maxAdminString    = 4096 // any string of a request; identifiers have tighter bounds of their own
	maxAdminList      = 256  // entries of any list or object in a request
	maxReportedFaults = 20   // problems listed in one answer
)

// fieldError is one wrong field of an admin request: where (a JSON path such as monthly_limit
// or providers[1].model; "body" for the document itself) and why, with the fix.
type fieldError struct {
	field, why string
	code       string // "" means invalid_request
}

func (e *fieldError) Error() string { return e.field + ": " + e.why }

func faultf(field, format string, args ...any) *fieldError {
	return &fieldError{field: field, why: fmt.Sprintf(format, args...)}
}

// readBody reads a request body, capped by adminGuard.
func readBody(r *http.Request) ([]byte, error) {
	raw, err := io.ReadAll(r.Body)
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		return nil, &adminRefusal{http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("the body is over %d bytes; the admin API takes small JSON documents", maxAdminBody)}
	}
	if err != nil {
		return nil, &fieldError{field: "body", why: "could not be read: " + err.Error(), code: "invalid_json"}
	}
	return raw, nil
}

// decoded reads r's body and decodes it with decode, one of the request decoders.
func decoded[T any](r *http.Request, decode func([]byte) (T, error)) (T, error) {
	raw, err := readBody(r)
	if err != nil {
		var zero T
		return zero, err
	}
	return decode(raw)
}

// decodeJSON decodes one JSON object into dst, reporting every wrong field at once.
func decodeJSON(raw []byte, dst any, example string) error {
	raw = bytes.TrimSpace(raw)
	body := func(why string) error {
		return &fieldError{field: "body", why: why + "; send a JSON object like " + example, code: "invalid_json"}
	}
	if len(raw) == 0 {
		return body("is empty")
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return body(fmt.Sprintf("is not valid JSON (%s, at byte %d)", se.Error(), se.Offset))
		}
		return body("is not valid JSON")
	}
	if raw[0] != '{' {
		return body("is " + jsonKind(raw) + ", not an object")
	}
	errs := decodeValue("", raw, reflect.ValueOf(dst).Elem())
	if n := len(errs); n > maxReportedFaults {
		errs = append(errs[:maxReportedFaults], faultf("body", "and %d more problems", n-maxReportedFaults))
	}
	return errors.Join(errs...)
}

var (
	decimalType    = reflect.TypeFor[decimal.Decimal]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

// decodeValue decodes raw (valid JSON) into v; path names v in messages. null leaves v unset.
func decodeValue(path string, raw []byte, v reflect.Value) []error {
	if string(raw) == "null" {
		return nil
	}
	t := v.Type()
	switch t {
	case decimalType:
		d, err := parseAmountJSON(raw)
		if err != nil {
			return []error{&fieldError{field: path, why: err.Error()}}
		}
		v.Set(reflect.ValueOf(d))
		return nil
	case rawMessageType:
		v.SetBytes(bytes.Clone(raw))
		return nil
	}
	want := func(what string) []error {
		return []error{faultf(path, "got %s, want %s", jsonKind(raw), what)}
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		errs := decodeValue(path, raw, p.Elem())
		v.Set(p)
		return errs
	case reflect.Struct:
		if raw[0] != '{' {
			return want("an object")
		}
		return decodeObject(path, raw, v)
	case reflect.Slice:
		var items []json.RawMessage
		if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
			return want("a list of " + plural(t.Elem()))
		}
		if len(items) > maxAdminList {
			return []error{faultf(path, "has %d entries, at most %d", len(items), maxAdminList)}
		}
		s := reflect.MakeSlice(t, len(items), len(items))
		var errs []error
		for i, item := range items {
			errs = append(errs, decodeValue(fmt.Sprintf("%s[%d]", path, i), item, s.Index(i))...)
		}
		v.Set(s)
		return errs
	case reflect.Map:
		var m map[string]json.RawMessage
		if raw[0] != '{' || t.Key().Kind() != reflect.String || json.Unmarshal(raw, &m) != nil {
			return want("an object")
		}
		if len(m) > maxAdminList {
			return []error{faultf(path, "has %d entries, at most %d", len(m), maxAdminList)}
		}
		out := reflect.MakeMapWithSize(t, len(m))
		var errs []error
		for _, k := range sortedKeys(m) {
			e := reflect.New(t.Elem()).Elem()
			errs = append(errs, decodeValue(memberPath(path, k), m[k], e)...)
			out.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
		}
		v.Set(out)
		return errs
	case reflect.String:
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return want("a string")
		}
		if len(s) > maxAdminString {
			return []error{faultf(path, "is %d bytes long, at most %d", len(s), maxAdminString)}
		}
		v.SetString(s)
		return nil
	case reflect.Bool:
		b, err := strconv.ParseBool(string(raw))
		if err != nil || (raw[0] != 't' && raw[0] != 'f') {
			return want("true or false")
		}
		v.SetBool(b)
		return nil
	case reflect.Interface: // any: the JSON as sent, for the field's own checks
		v.Set(reflect.ValueOf(json.RawMessage(bytes.Clone(raw))))
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || v.OverflowInt(n) {
			return want("a whole number")
		}
		v.SetInt(n)
		return nil
	}
	// A request type with a field kind this decoder does not know: a programming error that a
	// test of every request type catches.
	panic("admin decode: unsupported type " + t.String())
}

// decodeObject decodes a JSON object into a struct, naming unknown members.
func decodeObject(path string, raw []byte, v reflect.Value) []error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return []error{faultf(path, "got %s, want an object", jsonKind(raw))}
	}
	fields := jsonFields(v.Type())
	var errs []error
	for _, k := range sortedKeys(m) {
		i, ok := fields[k]
		if !ok {
			errs = append(errs, faultf(memberPath(path, k), "unknown field%s; the fields are %s", suggest(k, fields), strings.Join(sortedKeys(fields), ", ")))
			continue
		}
		errs = append(errs, decodeValue(memberPath(path, k), m[k], v.Field(i))...)
	}
	return errs
}

// jsonFields maps a struct's JSON member names to field indexes.
func jsonFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = i
	}
	return out
}

// suggest names the known field a typo most likely meant, as " (did you mean x?)".
func suggest(k string, fields map[string]int) string {
	best, bestD := "", 3
	for f := range fields {
		if d := editDistance(strings.ToLower(k), f); d < bestD || (d == bestD && f < best) {
			best, bestD = f, d
		}
	}
	if best == "" || len(k) > 64 {
		return ""
	}
	return " (did you mean " + best + "?)"
}

// editDistance is the Levenshtein distance, for short field names only.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

var plainMember = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// memberPath extends a JSON path by an object member, quoting members that are not plain names.
func memberPath(path, k string) string {
	if !plainMember.MatchString(k) {
		return path + "[" + ir.QuoteShort(k) + "]"
	}
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonKind describes a JSON value for messages.
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func plural(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "strings"
	case reflect.Struct, reflect.Map:
		return "objects"
	}
	return "values"
}

// parseAmountJSON reads an amount sent as a JSON string ("12.50") or number (12.50, taken
// exactly as written, never through a float).
func parseAmountJSON(raw []byte) (decimal.Decimal, error) {
	text := string(raw)
	switch {
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return decimal.Decimal{}, err
		}
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return decimal.Decimal{}, fmt.Errorf(`got %s, want a decimal amount in USD as a string like "5" or "12.50"`, jsonKind(raw))
	}
	d, err := adminapi.ParseAmount(text)
	if err != nil {
		return d, fmt.Errorf(`%w; send a string like "5" or "12.50"`, err)
	}
	return d, nil
}

// checkQuery refuses query parameters an endpoint does not know: a misspelt filter would
// otherwise answer for everything.
func checkQuery(r *http.Request, known ...string) error {
	var errs []error
	for _, k := range sortedKeys(r.URL.Query()) {
		if !slices.Contains(known, k) {
			errs = append(errs, faultf("query parameter "+ir.QuoteShort(k), "unknown; the parameters are %s", strings.Join(known, ", ")))
		}
		if len(errs) == maxReportedFaults {
			break
		}
	}
	return errors.Join(errs...)
}

// pathParam is a path segment bounded for use as a store key and in messages.
func pathParam(r *http.Request, name string, max int) (string, error) {
	v := r.PathValue(name)
	if len(v) > max {
		return "", faultf(name, "%s is longer than %d bytes", ir.QuoteShort(v), max)
	}
	return v, nil
}
