package tasks

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"reflect"
	"strings"
	"testing"
)

func form(t testing.TB, fields [][2]string, file []byte) (string, []byte) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, f := range fields {
		_ = w.WriteField(f[0], f[1])
	}
	if file != nil {
		fw, _ := w.CreateFormFile("first_frame_image", "frame.png")
		fw.Write(file)
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// TestFormToJSON: what the OpenAI SDKs send as multipart (extra body flattened in brackets)
// reads back as the family's JSON object: numbers and booleans typed, strings kept where the
// family wants strings, arrays of objects rebuilt, a file as a data URL.
func TestFormToJSON(t *testing.T) {
	ct, body := form(t, [][2]string{
		{"model", "wan-t2v"}, {"prompt", "42"}, {"duration", "5"}, {"prompt_optimizer", "false"},
		{"input[prompt]", "a fox"}, {"input[media][][type]", "first_frame"}, {"input[media][][url]", "https://x/a.png"},
		{"input[media][][type]", "last_frame"}, {"input[media][][url]", "https://x/b.png"},
		{"parameters[seed]", "12"}, {"tags[]", "a"}, {"tags[]", "b"},
	}, []byte("\x89PNG\r\n\x1a\nrest"))
	got, err := FormToJSON(ct, body, 1<<20, func(p string) bool { return p == "prompt" || p == "duration" })
	if err != nil {
		t.Fatal(err)
	}
	var m, want map[string]any
	_ = json.Unmarshal(got, &m)
	_ = json.Unmarshal([]byte(`{"model":"wan-t2v","prompt":"42","duration":"5","prompt_optimizer":false,
		"input":{"prompt":"a fox","media":[{"type":"first_frame","url":"https://x/a.png"},{"type":"last_frame","url":"https://x/b.png"}]},
		"parameters":{"seed":12},"tags":["a","b"],"first_frame_image":"data:image/png;base64,iVBORw0KGgpyZXN0"}`), &want)
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got  %s", got)
	}
	for _, bad := range [][][2]string{{{"a", "1"}, {"a", "2"}}, {{"a", "1"}, {"a[b]", "2"}}, {{"a[b", "1"}}, {{"[]", "1"}}} {
		ct, body := form(t, bad, nil)
		if _, err := FormToJSON(ct, body, 1<<20, nil); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, err := FormToJSON("text/plain", body, 1<<20, nil); err == nil || !strings.Contains(err.Error(), "multipart/form-data") {
		t.Errorf("text/plain: %v", err)
	}
}

func FuzzFormToJSON(f *testing.F) {
	ct, body := form(f, [][2]string{{"input[media][][type]", "x"}, {"a[b][c]", "1"}}, []byte("x"))
	f.Add(body)
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := FormToJSON(ct, b, 1<<16, nil)
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
	})
}
