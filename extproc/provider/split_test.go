package provider

import (
	"bytes"
	"strings"
	"testing"
)

var splitCases = []string{
	`{"model":"m","messages":[{"role":"user","content":"a \"quoted\" \\ \\\" }] text"}],"stream":true,"n":2,"x":null,"t":-1.5e3,"o":{"a":[1,{"b":"}"}]}}`,
	` { "a" : "b" , "c":[ ] ,"d":{}} `,
	`{}`,
	`{"img":"data:image/png;base64,` + strings.Repeat("A", 1<<16) + `"}`,
	`{"k\u00e9y":"v","esc\"aped":1}`,
}

// TestSplitValidatedMatchesParseRequest: the fast split gives the same fields, byte for byte.
func TestSplitValidatedMatchesParseRequest(t *testing.T) {
	for _, c := range splitCases {
		fast, ok := split([]byte(c))
		slow, err := ParseRequest([]byte(c))
		if !ok || err != nil || !sameRequest(fast, slow) {
			t.Errorf("%.80s: split ok=%v %v; ParseRequest %v %v", c, ok, fast, slow, err)
		}
	}
	for _, bad := range []string{`[]`, `{"a":1,}`, `{"a" 1}`, `{"a":"x`, `{"a":1}x`, `{"a":1,"a":2}`, `{"a":}`, ``} {
		if _, ok := split([]byte(bad)); ok {
			t.Errorf("split(%q) accepted", bad)
		}
	}
}

func sameRequest(a, b Request) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// FuzzSplitValidated: whenever ParseRequest (the full tokenizer) accepts a body, the fast split
// agrees with it exactly.
func FuzzSplitValidated(f *testing.F) {
	for _, c := range splitCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		slow, err := ParseRequest(body)
		if err != nil {
			return
		}
		if fast, ok := split(body); ok && !sameRequest(fast, slow) {
			t.Fatalf("split %v, ParseRequest %v", fast, slow)
		}
		if fast, err := SplitValidated(body); err != nil || !sameRequest(fast, slow) {
			t.Fatalf("SplitValidated %v %v, ParseRequest %v", fast, err, slow)
		}
	})
}
