package embeddings

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseRefusals(t *testing.T) {
	many := `"` + strings.Repeat(`a","`, 2048) + `a"`
	cases := []struct {
		name, body, code, says string
	}{
		{"not an object", `[1]`, "invalid_json", "not a JSON object"},
		{"no model", `{"input":"hi"}`, "missing_model", "model is required"},
		{"model not a string", `{"model":3,"input":"hi"}`, "missing_model", "model is required"},
		{"no input", `{"model":"e"}`, "missing_input", "input is required"},
		{"null input", `{"model":"e","input":null}`, "missing_input", "input is required"},
		{"empty string", `{"model":"e","input":""}`, "invalid_request", "input is an empty string"},
		{"empty array", `{"model":"e","input":[]}`, "invalid_request", "input is an empty array"},
		{"empty item", `{"model":"e","input":["a",""]}`, "invalid_request", "input[1] is an empty string"},
		{"too many", `{"model":"e","input":[` + many + `]}`, "invalid_request", "input has 2049 items; at most 2048"},
		{"number", `{"model":"e","input":3}`, "invalid_request", "input must be a string, an array of strings, an array of token ids, or an array of token-id arrays; it is a number"},
		{"object", `{"model":"e","input":{"text":"hi"}}`, "invalid_request", "it is an object"},
		{"mixed", `{"model":"e","input":["a",1]}`, "invalid_request", "input[1] is a number where input[0] is a string"},
		{"negative token", `{"model":"e","input":[1,-2]}`, "invalid_request", "input[1] is -2, not a token id"},
		{"fractional token", `{"model":"e","input":[1.5]}`, "invalid_request", "token ids are integers"},
		{"empty token array", `{"model":"e","input":[[1],[]]}`, "invalid_request", "input[1] is an empty token array"},
		{"dimensions zero", `{"model":"e","input":"hi","dimensions":0}`, "invalid_request", "dimensions must be a positive integer"},
		{"dimensions string", `{"model":"e","input":"hi","dimensions":"256"}`, "invalid_request", "dimensions must be a positive integer"},
		{"encoding", `{"model":"e","input":"hi","encoding_format":"int8"}`, "invalid_request", `encoding_format must be "float" or "base64"`},
		{"user control", `{"model":"e","input":"hi","user":"a\nb"}`, "invalid_request", "user must be a plain string"},
		{"route provider empty", `{"model":"e","input":"hi","route":{"provider":""}}`, "invalid_request", "route.provider must name a provider"},
		{"route mode", `{"model":"e","input":"hi","route_mode":"turbo"}`, "invalid_route_mode", "route_mode must be one of"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, e := parse([]byte(c.body))
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Status != 400 || e.Code != c.code || !strings.Contains(e.Message, c.says) {
				t.Fatalf("got %d %s %q, want 400 %s saying %q", e.Status, e.Code, e.Message, c.code, c.says)
			}
		})
	}
}

func TestParseShapes(t *testing.T) {
	cases := []struct {
		body          string
		texts, tokens int
		bound         int64
	}{
		// A text's bound is its UTF-8 length, a token array's its length, each with the
		// special tokens a provider may add to an input.
		{`{"model":"e","input":"héllo"}`, 1, 0, 6 + specialTokens},
		{`{"model":"e","input":["ab","cde"]}`, 2, 0, 5 + 2*specialTokens},
		{`{"model":"e","input":[1,2,3]}`, 0, 1, 3 + specialTokens},
		{`{"model":"e","input":[[1,2],[3]],"dimensions":8,"encoding_format":"base64","user":"u1","route":{"provider":"p"},"route_mode":"fast"}`, 0, 2, 3 + 2*specialTokens},
		{`{"model":"e","input":"x","dimensions":null,"encoding_format":null}`, 1, 0, 1 + specialTokens},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r, e := parse([]byte(c.body))
			if e != nil {
				t.Fatal(e.Message)
			}
			if len(r.texts) != c.texts || len(r.tokens) != c.tokens || r.bound != c.bound {
				t.Fatalf("texts %d tokens %d bound %d, want %d %d %d", len(r.texts), len(r.tokens), r.bound, c.texts, c.tokens, c.bound)
			}
		})
	}
	r, _ := parse([]byte(`{"model":"route:r","input":"x","route":{"provider":"p"},"route_mode":"fast"}`))
	if r.model != "route:r" || r.routeProvider != "p" || r.routeMode != "fast" {
		t.Fatalf("read %+v", r)
	}
}
