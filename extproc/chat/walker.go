package chat

// The reading half of request validation: typed reads over a JSON tokenizer that explain, in
// the client's terms, what a field must be.

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/billing"

	"github.com/tollway/tollway/extproc/core"
)

// walker reads a JSON document value by value. Each method consumes exactly one value (or
// fails); syntax errors come back as the tokenizer's own errors, client mistakes as *fieldError.
type walker struct {
	dec   *jsontext.Decoder
	bound *billing.PromptBounder // the prompt's token bound, added up as the request is read
}

// found names the kind of the next value, for messages.
func (w *walker) found() string {
	switch w.dec.PeekKind() {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "something that is not JSON"
}

// mismatch reports that the next value is not what path must be; a syntax error wins.
func (w *walker) mismatch(path, want string) error {
	if w.dec.PeekKind() == 0 {
		_, err := w.dec.ReadToken()
		return err
	}
	return invalid(path, "must be %s, not %s", want, w.found())
}

// null consumes a null and reports whether there was one.
func (w *walker) null() bool {
	if w.dec.PeekKind() != 'n' {
		return false
	}
	_, err := w.dec.ReadToken()
	return err == nil
}

func (w *walker) skip() error { return w.dec.SkipValue() }

// str reads a string of at most max bytes (0: no bound).
func (w *walker) str(path string, max int) (string, error) {
	if w.dec.PeekKind() != '"' {
		return "", w.mismatch(path, "a string")
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return "", err
	}
	s := tok.String()
	if max > 0 && len(s) > max {
		return "", invalid(path, "is too long (%d bytes): at most %d", len(s), max)
	}
	return s, nil
}

// present reads a string without copying it and returns the length of its encoding between
// the quotes (0 for ""): for values that may be megabytes long (base64 images, audio, files).
func (w *walker) present(path string) (int, error) {
	if w.dec.PeekKind() != '"' {
		return 0, w.mismatch(path, "a string")
	}
	v, err := w.dec.ReadValue()
	return max(len(v)-2, 0), err
}

// span reads one value with read and returns the length of its encoding.
func (w *walker) span(read func() error) (int, error) {
	start := w.dec.InputOffset()
	err := read()
	return int(w.dec.InputOffset() - start), err
}

func (w *walker) boolean(path string) (bool, error) {
	switch w.dec.PeekKind() {
	case 't', 'f':
		tok, err := w.dec.ReadToken()
		return err == nil && tok.Bool(), err
	}
	return false, w.mismatch(path, "true or false")
}

// number reads a number in [lo, hi].
func (w *walker) number(path string, lo, hi float64) (float64, error) {
	// The wanted range is spelled out only for an error: most values are valid.
	want := func() string { return fmt.Sprintf("a number from %s to %s", fmtNum(lo), fmtNum(hi)) }
	if w.dec.PeekKind() != '0' {
		return 0, w.mismatch(path, want())
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return 0, err
	}
	f, err := tok.Float()
	if err != nil || f < lo || f > hi {
		return 0, invalid(path, "must be %s (got %s)", want(), core.Clip(tok.String()))
	}
	return f, nil
}

// integer reads an integer in [lo, hi].
func (w *walker) integer(path string, lo, hi int64) (int64, error) {
	want := func() string {
		switch {
		case lo == 1 && hi == 1<<31-1:
			return "a positive integer"
		case lo > -1<<63 || hi < 1<<63-1:
			return fmt.Sprintf("an integer from %d to %d", lo, hi)
		}
		return "an integer"
	}
	if w.dec.PeekKind() != '0' {
		return 0, w.mismatch(path, want())
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return 0, err
	}
	n, err := tok.Int()
	if err != nil || n < lo || n > hi {
		return 0, invalid(path, "must be %s (got %s)", want(), core.Clip(tok.String()))
	}
	return n, nil
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// object reads an object, calling fn with each member's name; fn consumes the member's value.
// Duplicate names are refused by the tokenizer: a provider might read the other one.
func (w *walker) object(path string, fn func(name string) error) error {
	if w.dec.PeekKind() != '{' {
		if path == "" {
			path = "the request body"
		}
		return w.mismatch(path, "an object")
	}
	if _, err := w.dec.ReadToken(); err != nil {
		return err
	}
	for w.dec.PeekKind() == '"' {
		tok, err := w.dec.ReadToken()
		if err != nil {
			return err
		}
		if err := fn(tok.String()); err != nil {
			return err
		}
	}
	_, err := w.dec.ReadToken() // '}', or the syntax error that stopped the loop
	return err
}

// array reads an array, calling fn with each element's index; fn consumes the element.
func (w *walker) array(path string, fn func(i int) error) error {
	if w.dec.PeekKind() != '[' {
		return w.mismatch(path, "an array")
	}
	if _, err := w.dec.ReadToken(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		switch w.dec.PeekKind() {
		case ']':
			_, err := w.dec.ReadToken()
			return err
		case 0:
			_, err := w.dec.ReadToken()
			return err
		}
		if err := fn(i); err != nil {
			return err
		}
	}
}

// oneOf reads a string that must be one of values.
func (w *walker) oneOf(path string, values ...string) (string, error) {
	s, err := w.str(path, 0)
	var fe *fieldError
	if errors.As(err, &fe) {
		return "", invalid(path, "must be %s", quoteList(values))
	}
	if err != nil {
		return "", err
	}
	for _, v := range values {
		if s == v {
			return s, nil
		}
	}
	return "", invalid(path, "must be %s (got %q)", quoteList(values), core.Clip(s))
}

func quoteList(values []string) string {
	out := ""
	for i, v := range values {
		switch {
		case i == 0:
		case i == len(values)-1:
			out += " or "
		default:
			out += ", "
		}
		out += strconv.Quote(v)
	}
	return out
}

// functionName is OpenAI's rule for function names.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// functionNameAt reads a function name.
func (w *walker) functionNameAt(path string) (string, error) {
	s, err := w.str(path, maxNameLen)
	if err == nil && !functionName.MatchString(s) {
		return "", invalid(path, "must be 1 to %d letters, digits, underscores or dashes (got %q)", maxNameLen, core.Clip(s))
	}
	return s, err
}
