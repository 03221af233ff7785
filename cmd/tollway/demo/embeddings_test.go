package demo

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

// TestVector: the same seed always gets the same unit vector of the length asked for, and
// different seeds different ones.
func TestVector(t *testing.T) {
	a, b := Vector("hello", 0), Vector("hello", 0)
	if len(a) != DefaultDimensions {
		t.Fatalf("length %d", len(a))
	}
	var norm float64
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("not deterministic")
		}
		norm += float64(a[i]) * float64(a[i])
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Fatalf("norm² %v, want 1", norm)
	}
	if c := Vector("hellp", 0); c[0] == a[0] && c[1] == a[1] {
		t.Fatal("another text got the same vector")
	}
	if len(Vector("hello", 7)) != 7 {
		t.Fatal("dimensions not honoured")
	}
}

// TestEmbeddingsEndpoint: the demo answers OpenAI's shape offline, labelled, with the encoding
// and dimensions asked for, and refuses what OpenAI refuses.
func TestEmbeddingsEndpoint(t *testing.T) {
	s := start(t, Options{})
	postEmb := func(body string) *http.Response {
		resp, err := http.Post("http://"+s.Addr()+"/v1/embeddings", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := postEmb(`{"model":"demo-embed","input":["two words","x"],"dimensions":4,"encoding_format":"base64"}`)
	raw, _ := io.ReadAll(resp.Body)
	var a struct {
		openai.EmbeddingsResponse
		Demo string
	}
	if err := json.Unmarshal(raw, &a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if a.Demo != EmbeddingsLabel || a.Model != "demo-embed" || len(a.Data) != 2 || a.Usage.PromptTokens != 3 {
		t.Fatalf("answer %s", raw)
	}
	if got, want := string(a.Data[1].Embedding), `"`+openai.EmbeddingBase64(Vector("x", 4))+`"`; got != want {
		t.Fatalf("embedding %s, want %s", got, want)
	}
	wantError(t, postEmb(`{"model":"m"}`), 400, "missing_required_parameter")
	wantError(t, postEmb(`{"model":"m","input":"x","encoding_format":"int8"}`), 400, "invalid_value")
}
