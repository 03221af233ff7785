package task

// Media bodies as clients write them (issue 27): the OpenAI SDK's top-level prompt on V2, http
// image URLs, I2b's single-image parameters in a set, Gemini tooling's camelCase, and refusals
// that name the field, the JSON type it must be and the value received, never a Go type.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

var (
	v2t2v = &ir.Model{ID: "wan-t2v", Family: "V2", Variant: "t2v"}
	v2i2v = &ir.Model{ID: "wan-i2v", Family: "V2", Variant: "i2v"}
)

// TestV2TakesTopLevelPrompt: the OpenAI SDKs' videos.create requires prompt and sends it at the
// top level; V2 reads it as input.prompt when input.prompt is absent, refuses the two when they
// differ, and DashScope gets input.prompt only.
func TestV2TakesTopLevelPrompt(t *testing.T) {
	frame := `"media":[{"type":"first_frame","url":"https://example.com/a.png"}]`
	for _, c := range []struct {
		m          *ir.Model
		body, want string // want: DashScope's body, or the refusal
	}{
		{v2t2v, `{"model":"wan-t2v","prompt":"a fox"}`, `{"input":{"prompt":"a fox"},"model":"wan2.2-t2v-plus"}`},
		{v2t2v, `{"prompt":"a fox","parameters":{"duration":8}}`, `{"input":{"prompt":"a fox"},"model":"wan2.2-t2v-plus","parameters":{"duration":8}}`},
		{v2t2v, `{"prompt":"a fox","input":{"prompt":"a fox"}}`, `{"input":{"prompt":"a fox"},"model":"wan2.2-t2v-plus"}`},
		{v2t2v, `{"prompt":"","input":{"prompt":"a fox"}}`, `{"input":{"prompt":"a fox"},"model":"wan2.2-t2v-plus"}`},
		{v2i2v, `{"prompt":"a fox runs","input":{` + frame + `}}`, `{"input":{"media":[{"type":"first_frame","url":"https://example.com/a.png"}],"prompt":"a fox runs"},"model":"wan2.2-t2v-plus"}`},
		{v2t2v, `{"prompt":"a fox","input":{"prompt":"a cat"}}`, `prompt "a fox" and input.prompt "a cat" differ`},
		{v2t2v, `{"prompt":7}`, `prompt must be a string, not a number (got 7)`},
		{v2t2v, `{"prompt":""}`, "input.prompt is required"},
	} {
		r := taskReq(t, c.body)
		_, err := dashscopeVideo{}.Validate(c.m, r)
		if !strings.HasPrefix(c.want, "{") {
			if err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v; want a refusal saying %q", c.body, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		up, err := dashscopeVideo{}.Create(&ir.Provider{APIKey: "k"}, c.m, "wan2.2-t2v-plus", r)
		if err != nil || string(up.Body) != c.want {
			t.Errorf("%s: DashScope got %s (%v), want %s", c.body, up.Body, err, c.want)
		}
	}
}

// TestPublicImageURLs: an image given by URL is the provider's to fetch, so http and https
// are taken alike by every family that takes one; other schemes are refused by name.
func TestPublicImageURLs(t *testing.T) {
	type check func(url string) error
	checks := map[string]check{
		"V1 first_frame_image": func(u string) error {
			_, err := minimax{}.Validate(&ir.Model{Family: "V1"}, taskReq(t, `{"first_frame_image":"`+u+`"}`))
			return err
		},
		"V2 input.media[0].url": func(u string) error {
			_, err := dashscopeVideo{}.Validate(v2i2v, taskReq(t, `{"input":{"media":[{"type":"first_frame","url":"`+u+`"}]}}`))
			return err
		},
		"I2 image": func(u string) error {
			_, err := dashscopeImage{family: "I2"}.Validate(qwenPro, taskReq(t, dsBody(`{"text":"a fox"},{"image":"`+u+`"}`, "")))
			return err
		},
		"I2b image": func(u string) error {
			_, err := dashscopeImage{family: "I2b"}.Validate(wanStd, taskReq(t, dsBody(`{"text":"a fox"},{"image":"`+u+`"}`, "")))
			return err
		},
	}
	for name, c := range checks {
		for _, u := range []string{"http://example.com/a.png", "https://example.com/a.png", "HTTP://example.com/a.png?x=1"} {
			if err := c(u); err != nil {
				t.Errorf("%s %s: %v", name, u, err)
			}
		}
		for _, u := range []string{"ftp://example.com/a.png", "file:///etc/passwd", "http://", "https:///a.png", "example.com/a.png", "gopher://x/a.png"} {
			err := c(u)
			if err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), "an http or https URL") {
				t.Errorf("%s %s: %v; want a refusal naming http and https", name, u, err)
			}
		}
	}
}

// TestWanSetDropsSingleImageParameters: with enable_sequential, thinking_mode and color_palette do
// not apply (docs/media.md#image-families): the body is accepted, DashScope does not get them, and
// the task says they were removed; without it they pass.
func TestWanSetDropsSingleImageParameters(t *testing.T) {
	palette := `[{"hex":"#112233","ratio":"50.00%"},{"hex":"#445566","ratio":"25.00%"},{"hex":"#778899","ratio":"25.00%"}]`
	d := dashscopeImage{family: "I2b"}
	for _, c := range []struct {
		params  string
		removed []string
		sent    string
	}{
		{`{"enable_sequential":true,"n":4,"thinking_mode":true,"color_palette":` + palette + `}`, []string{"parameters.color_palette", "parameters.thinking_mode"}, `{"enable_sequential":true,"n":4}`},
		{`{"enable_sequential":true,"thinking_mode":false}`, []string{"parameters.thinking_mode"}, `{"enable_sequential":true}`},
		{`{"enable_sequential":false,"thinking_mode":true,"color_palette":` + palette + `}`, nil, `{"enable_sequential":false,"thinking_mode":true,"color_palette":` + palette + `}`},
	} {
		r := taskReq(t, dsBody(`{"text":"a fox"}`, c.params))
		tr, err := d.Validate(wanStd, r)
		if err != nil || !slices.Equal(tr.Removed, c.removed) {
			t.Errorf("%s: removed %v (%v), want %v", c.params, tr.Removed, err, c.removed)
			continue
		}
		up, err := d.Create(&ir.Provider{APIKey: "k"}, wanStd, "wan2.7-image", r)
		var sent struct{ Parameters json.RawMessage }
		if err != nil || json.Unmarshal(up.Body, &sent) != nil || !sameJSON(sent.Parameters, c.sent) {
			t.Errorf("%s: DashScope got %s (%v), want parameters %s", c.params, up.Body, err, c.sent)
		}
	}
	// Their values are still checked: a set cannot hide a malformed one.
	if _, err := d.Validate(wanStd, taskReq(t, dsBody(`{"text":"a fox"}`, `{"enable_sequential":true,"thinking_mode":"yes"}`))); err == nil {
		t.Error("thinking_mode \"yes\" was accepted in a set")
	}
}

func sameJSON(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// TestI3TakesCamelCase: Gemini's API reads proto JSON, field names in lowerCamelCase or as
// declared (snake_case), so bodies written by Gemini tooling (inlineData, mimeType,
// generation_config, googleSearch, imageConfig) are taken like the spec's; Gemini gets the same
// request either way; a field sent both ways is refused.
func TestI3TakesCamelCase(t *testing.T) {
	img := b64PNG(8, 8)
	m := i3Models["pro"]
	spec := `{"contents":[{"role":"user","parts":[{"text":"edit"},{"inline_data":{"mime_type":"image/png","data":"` + img + `"}}]}],` +
		`"generationConfig":{"responseModalities":["IMAGE"],"responseFormat":{"image":{"aspectRatio":"16:9","imageSize":"2K"}}},"tools":[{"google_search":{}}]}`
	want, err := geminiImage{}.Create(&ir.Provider{APIKey: "k"}, m, "gemini-3-pro-image-preview", taskReq(t, spec))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"contents":[{"role":"user","parts":[{"text":"edit"},{"inlineData":{"mimeType":"image/png","data":"` + img + `"}}]}],` +
			`"generationConfig":{"responseModalities":["IMAGE"],"responseFormat":{"image":{"aspectRatio":"16:9","imageSize":"2K"}}},"tools":[{"googleSearch":{}}]}`,
		`{"contents":[{"role":"user","parts":[{"text":"edit"},{"inline_data":{"mimeType":"image/png","data":"` + img + `"}}]}],` +
			`"generation_config":{"response_modalities":["IMAGE"],"response_format":{"image":{"aspect_ratio":"16:9","image_size":"2K"}}},"tools":[{"google_search":{}}]}`,
		`{"contents":[{"parts":[{"text":"edit"},{"inlineData":{"mime_type":"image/png","data":"` + img + `"}}]}],` +
			`"generationConfig":{"responseModalities":["IMAGE"],"imageConfig":{"aspectRatio":"16:9","imageSize":"2K"}},"tools":[{"googleSearch":{}}]}`,
	} {
		r := taskReq(t, body)
		if _, err := (geminiImage{}).Validate(m, r); err != nil {
			t.Errorf("%.120s: %v", body, err)
			continue
		}
		up, err := geminiImage{}.Create(&ir.Provider{APIKey: "k"}, m, "gemini-3-pro-image-preview", r)
		if err != nil || !bytes.Equal(up.Body, want.Body) {
			t.Errorf("%.120s: Gemini got\n%.300s\nwant\n%.300s (%v)", body, up.Body, want.Body, err)
		}
	}
	for body, refusal := range map[string]string{
		`{"contents":[{"parts":[{"text":"a"},{"inline_data":{"mime_type":"image/png","data":"` + img + `"},"inlineData":{"mimeType":"image/png","data":"` + img + `"}}]}]}`: "inline_data and inlineData",
		`{"contents":[{"parts":[{"text":"a"}]}],"generationConfig":{},"generation_config":{}}`:                                                                              "generationConfig and generation_config",
		`{"contents":[{"parts":[{"text":"a"}]}],"generationConfig":{"responseFormat":{"image":{}},"imageConfig":{}}}`:                                                       "responseFormat.image and generationConfig.imageConfig",
	} {
		if _, err := (geminiImage{}).Validate(m, taskReq(t, body)); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("%.100s: %v; want a refusal naming %s", body, err, refusal)
		}
	}
}

// goVocabulary is Go's own text in a message: fuzzcheck's words and the rest of encoding/json's.
var goVocabulary = regexp.MustCompile(`(?i)\bstruct\b|\bgo\b|unmarshal|field of type|map\[|\[\]interface|interface ?\{|jsontext|\bint64\b|\bfloat64\b`)

// familyBodies are a valid body per family, with every field the family takes set.
func familyBodies() []struct {
	m    *ir.Model
	a    Adapter
	body string
} {
	palette := `[{"hex":"#112233","ratio":"50.00%"},{"hex":"#445566","ratio":"25.00%"},{"hex":"#778899","ratio":"25.00%"}]`
	return []struct {
		m    *ir.Model
		a    Adapter
		body string
	}{
		{&ir.Model{ID: "hailuo", Family: "V1"}, minimax{}, `{"prompt":"a fox","first_frame_image":"https://example.com/a.png","prompt_optimizer":true,"fast_pretreatment":false,"duration":6,"resolution":"768P","aigc_watermark":false,"callback_url":"https://h.example/cb"}`},
		{v2i2v, dashscopeVideo{}, `{"prompt":"a fox","input":{"prompt":"a fox","media":[{"type":"first_frame","url":"https://example.com/a.png"}]},"parameters":{"resolution":"720P","ratio":"16:9","duration":5,"watermark":true,"seed":1}}`},
		{&ir.Model{ID: "kling", Family: "V3"}, kling{}, `{"prompt":"a fox","negative_prompt":"blur","cfg_scale":0.5,"mode":"std","duration":"5","aspect_ratio":"16:9"}`},
		{&ir.Model{ID: "kling-image", Family: "I1"}, klingImage{}, `{"prompt":"a fox","negative_prompt":"blur","n":2,"aspect_ratio":"1:1","cfg_scale":0.5,"mode":"pro","duration":"10"}`},
		{qwenStd, dashscopeImage{family: "I2"}, dsBody(`{"text":"a fox"},{"image":"https://example.com/a.png"}`, `{"n":1,"size":"1328*1328","seed":1,"watermark":false,"negative_prompt":"blur","prompt_extend":true}`)},
		{wanPro, dashscopeImage{family: "I2b"}, dsBody(`{"text":"a fox"}`, `{"n":2,"size":"2K","seed":1,"watermark":false,"enable_sequential":false,"thinking_mode":true,"color_palette":`+palette+`}`)},
		{i3Models["pro"], geminiImage{}, `{"contents":[{"role":"user","parts":[{"text":"a fox"},{"inline_data":{"mime_type":"image/png","data":"` + b64PNG(8, 8) + `"}}]}],` +
			`"generationConfig":{"responseModalities":["TEXT","IMAGE"],"responseFormat":{"image":{"aspectRatio":"1:1","imageSize":"1K"}}},"tools":[{"google_search":{}}]}`},
	}
}

// TestMediaRefusalsSpeakJSON: every value of every family's body, replaced by a value of each
// other JSON type, is refused as the client's fault with a message that names where the value
// is and speaks JSON (the type it must be, the type it is, the value), never Go.
func TestMediaRefusalsSpeakJSON(t *testing.T) {
	others := []string{`"text"`, `7`, `2.5`, `true`, `[1]`, `{"k":1}`}
	checked := 0
	defer func() {
		if checked < 300 {
			t.Errorf("%d replaced values checked; the walk missed the bodies' fields", checked)
		}
	}()
	for _, f := range familyBodies() {
		var doc any
		dec := json.NewDecoder(strings.NewReader(f.body))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if _, err := f.a.Validate(f.m, taskReq(t, f.body)); err != nil {
			t.Fatalf("%s: the valid body is refused: %v", f.m.Family, err)
		}
		for _, path := range jsonPaths(doc, "") {
			if path == "model" {
				continue // the gateway's own, checked before the family's rules
			}
			for _, v := range others {
				was, now := jsonKindName(valueAt(doc, path)), jsonKindName(mustAny(v))
				if was == now {
					continue
				}
				body := replaced(t, doc, path, v)
				checked++
				_, err := f.a.Validate(f.m, taskReq(t, body))
				if err == nil {
					t.Errorf("%s %s = %s: accepted", f.m.Family, path, v)
					continue
				}
				msg := err.Error()
				switch {
				case !errors.Is(err, provider.ErrBadRequest):
					t.Errorf("%s %s = %s: not the client's fault: %v", f.m.Family, path, v, err)
				case goVocabulary.MatchString(msg) || fuzzcheck.Leak(msg) != "":
					t.Errorf("%s %s = %s: Go in %q", f.m.Family, path, v, msg)
				case !strings.Contains(msg, strings.Split(strings.Split(path, ".")[0], "[")[0]):
					t.Errorf("%s %s = %s: %q does not say where", f.m.Family, path, v, msg)
				case !strings.Contains(msg, v):
					t.Errorf("%s %s = %s: %q does not show the value received", f.m.Family, path, v, msg)
				case jsonType(was) != jsonType(now) && !strings.Contains(msg, "not "+jsonType(now)):
					t.Errorf("%s %s = %s: %q does not say the value is %s", f.m.Family, path, v, msg, jsonType(now))
				}
			}
		}
	}
}

// jsonPaths lists every value's path in doc: a.b[2].c.
func jsonPaths(doc any, at string) []string {
	var out []string
	switch d := doc.(type) {
	case map[string]any:
		for k, v := range d {
			p := strings.TrimPrefix(at+"."+k, ".")
			out = append(append(out, p), jsonPaths(v, p)...)
		}
	case []any:
		for i, v := range d {
			p := fmt.Sprintf("%s[%d]", at, i)
			out = append(append(out, p), jsonPaths(v, p)...)
		}
	}
	slices.Sort(out)
	return out
}

var pathStep = regexp.MustCompile(`[^.\[\]]+|\[\d+\]`)

func valueAt(doc any, path string) any {
	for _, s := range pathStep.FindAllString(path, -1) {
		if strings.HasPrefix(s, "[") {
			var i int
			fmt.Sscanf(s, "[%d]", &i)
			doc = doc.([]any)[i]
		} else {
			doc = doc.(map[string]any)[s]
		}
	}
	return doc
}

// replaced is doc with the value at path replaced by v (JSON).
func replaced(t *testing.T, doc any, path, v string) string {
	b, _ := json.Marshal(doc)
	var cp any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	_ = dec.Decode(&cp)
	steps := pathStep.FindAllString(path, -1)
	parent := valueAt(cp, strings.Join(steps[:len(steps)-1], "."))
	last := steps[len(steps)-1]
	if strings.HasPrefix(last, "[") {
		var i int
		fmt.Sscanf(last, "[%d]", &i)
		parent.([]any)[i] = mustAny(v)
	} else {
		parent.(map[string]any)[last] = mustAny(v)
	}
	out, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func mustAny(v string) any {
	var out any
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber()
	_ = dec.Decode(&out)
	return out
}

// jsonType is how a message names a JSON type (integers are numbers).
func jsonType(kind string) string {
	return map[string]string{"string": "a string", "integer": "a number", "number": "a number", "boolean": "a boolean",
		"array": "an array", "object": "an object"}[kind]
}

// jsonKindName is a decoded value's JSON type (integers and other numbers apart).
func jsonKindName(v any) string {
	switch x := v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "number"
	}
	return "null"
}

// TestTaskFieldsAreTheBodysFields: what the catalog lists for a media model (FieldsOf) is
// the family's fields: each is taken (the family's full body sets every one and is valid), and
// each field the body may carry is listed, except the gateway's own and those taken only at
// their default or not sent (I2's n; I1's video fields, checked and kept here).
func TestTaskFieldsAreTheBodysFields(t *testing.T) {
	unlisted := map[string][]string{"I2": {"parameters.n"}, "I1": {"cfg_scale", "mode", "duration"}}
	for _, f := range familyBodies() {
		listed := FieldsOf(f.m)
		if f.m.Family == "I3" {
			if listed != nil {
				t.Errorf("I3 lists %v: its catalog entry lists its chat parameters", listed)
			}
			continue
		}
		var set []string
		for k, v := range taskReq(t, f.body) {
			switch {
			case k == "callback_url" || k == "model":
			case k == "parameters" || k == "input":
				for sub := range taskReq(t, string(v)) {
					set = append(set, k+"."+sub)
				}
			default:
				set = append(set, k)
			}
		}
		set = slices.DeleteFunc(set, func(p string) bool { return slices.Contains(unlisted[f.m.Family], p) })
		slices.Sort(set)
		if !slices.Equal(set, listed) {
			t.Errorf("%s lists %v; its body carries %v", f.m.Family, listed, set)
		}
	}
}
