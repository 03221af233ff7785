// Package providertest holds what the chat and task adapters' tests share: requests from JSON,
// small images, and a Gemini image model's answer (I3's tasks and its chat answers read the
// same one).
package providertest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollway/tollway/extproc/provider"
)

// Body is a request body given as JSON, split into its top-level fields.
func Body(t testing.TB, body string) provider.Request {
	t.Helper()
	var r provider.Request
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return r
}

// PNG is a w x h PNG in base64.
func PNG(w, h int) string {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)))
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// GeminiImageAnswer is a generateContent answer of an image model with parts and usage.
func GeminiImageAnswer(parts, finish, usage string) []byte {
	return []byte(`{"candidates":[{"content":{"role":"model","parts":[` + parts + `]},"finishReason":"` + finish + `","index":0}],"usageMetadata":` + usage + `,"modelVersion":"gemini-2.5-flash-image","responseId":"r1"}`)
}

// ClipsWhole fails t unless err refuses value quoting it clipped to whole characters: the
// message is UTF-8 without a \x escape of half a character, and value is not in it whole.
func ClipsWhole(t testing.TB, err error, value string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	if !utf8.ValidString(msg) || strings.Contains(msg, `\x`) {
		t.Errorf("the clipped value is not whole characters: %s", msg)
	}
	if strings.Contains(msg, value) {
		t.Errorf("the value was not clipped: %s", msg)
	}
	if !strings.Contains(strconv.Quote(value), string([]rune(value)[len([]rune(value))-1])) {
		t.Fatal("strconv.Quote escapes the value's characters: the test would not see a split")
	}
}
