package embeddings

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/golden"
	"github.com/tollway/tollway/xds/ir"
)

var (
	geminiP = &ir.Provider{Name: "g", Type: ir.ProviderTypeGemini, APIKey: "gk"}
	openaiP = &ir.Provider{Name: "o", Type: ir.ProviderTypeOpenAI, APIKey: "ok"}
)

func embed(t *testing.T, p *ir.Provider, model, body string) *provider.Upstream {
	t.Helper()
	req, err := provider.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	a, err := For(p.Type)
	if err != nil {
		t.Fatal(err)
	}
	up, err := a.Embed(p, model, req)
	if err != nil {
		t.Fatal(err)
	}
	return up
}

func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return append(buf.Bytes(), '\n')
}

// TestGeminiGolden pins the translation both ways: the client's request as batchEmbedContents,
// and Gemini's answer as OpenAI's list, in floats and in base64.
func TestGeminiGolden(t *testing.T) {
	up := embed(t, geminiP, "models/gemini-embedding-001", `{"model":"emb","input":["The food was delicious","and the waiter..."],"dimensions":3,"user":"u1","encoding_format":"float"}`)
	if up.Path != "/models/gemini-embedding-001:batchEmbedContents" || up.Headers["x-goog-api-key"] != "gk" || up.Headers["authorization"] != "" {
		t.Fatalf("path %s headers %v", up.Path, up.Headers)
	}
	golden.Compare(t, filepath.Join("testdata", "gemini.request.json"), indent(t, up.Body))
	answer := []byte(`{"embeddings":[{"values":[0.25,-0.5,1]},{"values":[0.1,0.2,-0.3]}]}`)
	out, err := up.Response.Body(answer)
	if err != nil {
		t.Fatal(err)
	}
	golden.Compare(t, filepath.Join("testdata", "gemini.answer.float.json"), indent(t, out))
	up = embed(t, geminiP, "gemini-embedding-001", `{"model":"emb","input":["The food was delicious","and the waiter..."],"encoding_format":"base64"}`)
	out, err = up.Response.Body(answer)
	if err != nil {
		t.Fatal(err)
	}
	golden.Compare(t, filepath.Join("testdata", "gemini.answer.base64.json"), indent(t, out))
}

func TestGeminiRefuses(t *testing.T) {
	req, _ := provider.ParseRequest([]byte(`{"model":"emb","input":[[1,2,3]]}`))
	if _, err := (toGemini{}).Embed(geminiP, "m", req); !errors.Is(err, provider.ErrBadRequest) {
		t.Fatalf("token arrays to Gemini: %v, want a bad request", err)
	}
	req, _ = provider.ParseRequest([]byte(`{"model":"emb","input":["x"` + strings.Repeat(`,"x"`, 100) + `]}`))
	if _, err := (toGemini{}).Embed(geminiP, "m", req); !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), "101 items") {
		t.Fatalf("101 inputs to Gemini (at most 100 a batch): %v, want a bad request", err)
	}
	up := embed(t, geminiP, "m", `{"model":"emb","input":["a","b"]}`)
	if _, err := up.Response.Body([]byte(`{"embeddings":[{"values":[1]}]}`)); err == nil {
		t.Fatal("one embedding for two inputs was accepted")
	}
	if _, err := up.Response.Body([]byte(`not json`)); err == nil {
		t.Fatal("a broken answer was accepted")
	}
	r, ok := up.Response.(interface{ RefusesCredential(int, []byte) bool })
	if !ok || !r.RefusesCredential(400, []byte(`{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}`)) {
		t.Fatal("Gemini's refusal of a bad key is not read as one")
	}
}

// TestOpenAIPassesAsIs: only the model is renamed, the credential set; nothing to translate back.
func TestOpenAIPassesAsIs(t *testing.T) {
	up := embed(t, openaiP, "text-embedding-3-small", `{"model":"emb","input":[[1,2],[3]],"dimensions":8,"encoding_format":"base64","user":"u","extra":{"x":1}}`)
	want := `{"dimensions":8,"encoding_format":"base64","extra":{"x":1},"input":[[1,2],[3]],"model":"text-embedding-3-small","user":"u"}`
	if string(up.Body) != want || up.Path != "/embeddings" || up.Headers["authorization"] != "Bearer ok" || up.Response != nil {
		t.Fatalf("body %s path %s headers %v", up.Body, up.Path, up.Headers)
	}
}

// TestBase64 is OpenAI's encoding: float32 little-endian, standard base64.
func TestBase64(t *testing.T) {
	if got := openai.EmbeddingBase64([]float32{1, -2, 0.5}); got != "AACAPwAAAMAAAAA/" {
		t.Fatalf("got %s", got)
	}
	if got := string(openai.EmbeddingVector([]float32{1, -2, 0.5}, "float")); got != "[1,-2,0.5]" {
		t.Fatalf("got %s", got)
	}
}

func TestForUnknown(t *testing.T) {
	if _, err := For(ir.ProviderTypeAnthropic); err == nil {
		t.Fatal("anthropic has an embeddings adapter")
	}
}
