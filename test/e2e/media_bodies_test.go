package e2e

// Media bodies as clients write them, through the real Envoy (issue 27): the OpenAI SDKs'
// top-level prompt on V2, http image URLs, I2b's single-image parameters in a set, Gemini
// tooling's camelCase, a catalog that lists what each model takes, and refusals that speak
// JSON, never Go.

import (
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/fuzzcheck"
)

// startMediaMix runs a gateway with a model of each family that takes an image or an odd body:
// V1 on MiniMax, V2 (t2v, i2v), I2 and I2b on DashScope, I3 and a chat model on Gemini, all on
// one fake; and a key.
func startMediaMix(t *testing.T) (*gateway, *fakeupstream.Server, string) {
	t.Helper()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: ds, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: gem, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - {id: hailuo-02, family: V1, providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]}
  - {id: wan-t2v, family: V2, variant: t2v, providers: [{provider: ds, model: wan2.2-t2v-plus}]}
  - {id: wan-i2v, family: V2, variant: i2v, providers: [{provider: ds, model: wan2.2-i2v-plus}]}
  - {id: qwen-image-pro, family: I2, variant: pro, providers: [{provider: ds, model: qwen-image-max}]}
  - {id: wan-image, family: I2b, variant: standard, providers: [{provider: ds, model: wan2.7-image}]}
  - {id: nb-pro, family: I3, variant: pro, providers: [{provider: gem, model: gemini-3-pro-image-preview}]}
  - {id: gem-chat, providers: [{provider: gem, model: gemini-2.5-flash}]}
`, fake.MiniMaxURL(), fake.DashScopeURL(), fake.GeminiURL()), "FAKE_PROVIDER_KEY="+providerKey)
	return g, fake, g.newKey("acme")
}

// refused checks that body is a 400 whose message says want, before any provider call.
func refused(t *testing.T, g *gateway, fake *fakeupstream.Server, key, path, body, want string) string {
	t.Helper()
	before := fake.RequestCount()
	code, _, obj := g.call("POST", key, path, body)
	e, _ := obj["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if code != 400 || !strings.Contains(msg, want) || fake.RequestCount() != before {
		t.Errorf("%.120s: %d %v; want a 400 saying %q before any provider call", body, code, obj, want)
	}
	return msg
}

// lastBody is the last JSON body fake received at path.
func lastBody(t *testing.T, fake *fakeupstream.Server, path string) map[string]any {
	t.Helper()
	body, _ := lastSent(fake, path)
	if body == nil {
		t.Fatalf("no request at %s", path)
	}
	return body
}

// TestVideosTakeTheSDKPrompt: V2 reads the top-level prompt the OpenAI SDKs' videos.create
// requires as input.prompt, in JSON and in the SDKs' multipart form; DashScope gets
// input.prompt (its t2v models refuse a create without one); a prompt and an input.prompt that
// differ are refused.
func TestVideosTakeTheSDKPrompt(t *testing.T) {
	t.Parallel()
	g, fake, key := startMediaMix(t)
	const create = "/api/v1/services/aigc/video-generation/video-synthesis"
	code, _, obj := g.call("POST", key, "/videos", `{"model":"wan-t2v","prompt":"a fox in snow","parameters":{"duration":8}}`)
	if code != 200 || obj["status"] != "queued" {
		t.Fatalf("create: %d %v", code, obj)
	}
	sent := lastBody(t, fake, create)
	if in, _ := sent["input"].(map[string]any); in["prompt"] != "a fox in snow" || sent["prompt"] != nil || sent["parameters"].(map[string]any)["duration"] != float64(8) {
		t.Fatalf("DashScope got %v", sent)
	}
	g.postForm(key, "/videos", map[string]string{"model": "wan-i2v", "prompt": "42", "input[media][][type]": "first_frame", "input[media][][url]": "https://example.com/a.png"})
	if in, _ := lastBody(t, fake, create)["input"].(map[string]any); in["prompt"] != "42" || len(in["media"].([]any)) != 1 {
		t.Fatalf("DashScope got input %v from the form", in)
	}
	refused(t, g, fake, key, "/videos", `{"model":"wan-t2v","prompt":"a fox","input":{"prompt":"a cat"}}`, `prompt "a fox" and input.prompt "a cat" differ: send one of them`)
}

// TestImageURLsMayBeHTTP: an image given by URL is the provider's to fetch, so http is taken
// like https by every family (V1's first frame, I2 and I2b images, V2's media) and reaches the
// provider as sent; other schemes are refused before any provider call.
func TestImageURLsMayBeHTTP(t *testing.T) {
	t.Parallel()
	g, fake, key := startMediaMix(t)
	const img = "http://images.example.com/fox.png"
	code, _, obj := g.call("POST", key, "/videos", `{"model":"hailuo-02","first_frame_image":"`+img+`"}`)
	if code != 200 || lastBody(t, fake, "/v1/video_generation")["first_frame_image"] != img {
		t.Fatalf("V1: %d %v", code, obj)
	}
	parts := `[{"text":"a fox"},{"image":"` + img + `"}]`
	for _, c := range []struct{ model, path string }{
		{"qwen-image-pro", "/api/v1/services/aigc/multimodal-generation/generation"},
		{"wan-image", "/api/v1/services/aigc/image-generation/generation"},
	} {
		code, _, obj := g.call("POST", key, "/images", `{"model":"`+c.model+`","input":{"messages":[{"role":"user","content":`+parts+`}]}}`)
		msgs := lastBody(t, fake, c.path)["input"].(map[string]any)["messages"].([]any)
		if code != 200 || !strings.Contains(fmt.Sprint(msgs), img) {
			t.Fatalf("%s: %d %v; DashScope got %v", c.model, code, obj, msgs)
		}
	}
	if code, _, obj := g.call("POST", key, "/videos", `{"model":"wan-i2v","input":{"media":[{"type":"first_frame","url":"`+img+`"}]}}`); code != 200 {
		t.Fatalf("V2: %d %v", code, obj)
	}
	for _, body := range []struct{ path, body string }{
		{"/videos", `{"model":"hailuo-02","first_frame_image":"ftp://images.example.com/fox.png"}`},
		{"/videos", `{"model":"wan-i2v","input":{"media":[{"type":"first_frame","url":"file:///etc/passwd"}]}}`},
		{"/images", `{"model":"wan-image","input":{"messages":[{"role":"user","content":[{"text":"a fox"},{"image":"gopher://x/a.png"}]}]}}`},
	} {
		refused(t, g, fake, key, body.path, body.body, "must be an http or https URL with a host, or a base64 data URL")
	}
}

// TestWanSetLeavesOutSingleImageParameters: in an I2b image set (enable_sequential),
// thinking_mode and color_palette do not apply: the create is accepted, DashScope gets the
// parameters without them, and the answer names them in x-tollway-removed-params.
func TestWanSetLeavesOutSingleImageParameters(t *testing.T) {
	t.Parallel()
	g, fake, key := startMediaMix(t)
	palette := `[{"hex":"#112233","ratio":"50.00%"},{"hex":"#445566","ratio":"25.00%"},{"hex":"#778899","ratio":"25.00%"}]`
	code, h, obj := g.call("POST", key, "/images", `{"model":"wan-image","input":{"messages":[{"role":"user","content":[{"text":"a four-panel comic of a fox"}]}]},`+
		`"parameters":{"enable_sequential":true,"n":4,"thinking_mode":true,"color_palette":`+palette+`}}`)
	if code != 200 || obj["status"] != "queued" || h.Get("x-tollway-removed-params") != "parameters.color_palette,parameters.thinking_mode" {
		t.Fatalf("create: %d %v (x-tollway-removed-params %q)", code, obj, h.Get("x-tollway-removed-params"))
	}
	p := lastBody(t, fake, "/api/v1/services/aigc/image-generation/generation")["parameters"].(map[string]any)
	if p["enable_sequential"] != true || p["n"] != float64(4) || p["thinking_mode"] != nil || p["color_palette"] != nil {
		t.Fatalf("DashScope got parameters %v", p)
	}
	// Without a set they apply, and nothing is removed.
	code, h, _ = g.call("POST", key, "/images", `{"model":"wan-image","input":{"messages":[{"role":"user","content":[{"text":"a fox"}]}]},"parameters":{"thinking_mode":false}}`)
	p = lastBody(t, fake, "/api/v1/services/aigc/image-generation/generation")["parameters"].(map[string]any)
	if code != 200 || h.Get("x-tollway-removed-params") != "" || p["thinking_mode"] != false {
		t.Fatalf("single image: %d, removed %q, DashScope got %v", code, h.Get("x-tollway-removed-params"), p)
	}
}

// TestI3TakesGeminiToolingBodies: an I3 body in Gemini's own spelling (inlineData, mimeType,
// generation_config, googleSearch, imageConfig) creates the task Gemini gets in its form; a
// field sent both ways is refused.
func TestI3TakesGeminiToolingBodies(t *testing.T) {
	t.Parallel()
	g, fake, key := startMediaMix(t)
	body := `{"model":"nb-pro","contents":[{"role":"user","parts":[{"text":"make it snow"},{"inlineData":{"mimeType":"image/png","data":"` + pngB64(16, 16) + `"}}]}],` +
		`"generation_config":{"responseModalities":["TEXT","IMAGE"],"imageConfig":{"aspectRatio":"16:9","imageSize":"2K"}},"tools":[{"googleSearch":{}}]}`
	code, _, obj := g.call("POST", key, "/images", body)
	if code != 200 || obj["status"] != "completed" || len(imagesOf(obj)) != 1 {
		t.Fatalf("create: %d %v", code, obj)
	}
	_, sent := lastGenerate(t, fake)
	parts := sent["contents"].([]any)[0].(map[string]any)["parts"].([]any)
	ic, _ := sent["generationConfig"].(map[string]any)["imageConfig"].(map[string]any)
	if parts[1].(map[string]any)["inlineData"] == nil || ic["aspectRatio"] != "16:9" || ic["imageSize"] != "2K" || !strings.Contains(fmt.Sprint(sent["tools"]), "googleSearch") {
		t.Fatalf("Gemini got %v", sent)
	}
	refused(t, g, fake, key, "/images", `{"model":"nb-pro","contents":[{"parts":[{"text":"x"}]}],"generationConfig":{},"generation_config":{}}`,
		"generationConfig and generation_config are the same field")
}

// TestCatalogListsWhatModelsTake: GET /v1/models lists for each model what its requests may
// carry: an I3 model its chat parameters without n (it makes one answer: n 2 is refused), a
// media model its family's fields, every one of which a create takes.
func TestCatalogListsWhatModelsTake(t *testing.T) {
	t.Parallel()
	g, fake, key := startMediaMix(t)
	listed := func(id string) []string {
		_, m := g.do("GET", key, "/models/"+id, "")
		var out []string
		for _, p := range m["supported_sampling_parameters"].([]any) {
			out = append(out, p.(string))
		}
		return out
	}
	for id, want := range map[string]string{
		"nb-pro":    "frequency_penalty,max_completion_tokens,max_tokens,presence_penalty,seed,stop,temperature,top_p",
		"gem-chat":  "frequency_penalty,max_completion_tokens,max_tokens,presence_penalty,reasoning_effort,response_format,seed,stop,temperature,tool_choice,tools,top_p",
		"hailuo-02": "aigc_watermark,duration,fast_pretreatment,first_frame_image,prompt,prompt_optimizer,resolution",
		"wan-t2v":   "input.media,input.prompt,parameters.duration,parameters.ratio,parameters.resolution,parameters.seed,parameters.watermark,prompt",
		"wan-image": "input.messages,parameters.color_palette,parameters.enable_sequential,parameters.n,parameters.seed,parameters.size,parameters.thinking_mode,parameters.watermark",
	} {
		if got := strings.Join(listed(id), ","); got != want {
			t.Errorf("%s lists %s, want %s", id, got, want)
		}
	}
	for _, id := range []string{"nb-pro", "gem-chat"} {
		e := wantError(t, g.chat(context.Background(), key, `{"model":"`+id+`","n":2,"messages":[{"role":"user","content":"a fox"}]}`), 400, "invalid_request")
		if !strings.Contains(e.Error.Message, "n=2") || slices.Contains(listed(id), "n") {
			t.Errorf("%s: n 2: %q", id, e.Error.Message)
		}
	}
	// Every field hailuo-02 lists, set at once with values other than its defaults.
	if code, _, obj := g.call("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a fox","first_frame_image":"https://example.com/a.png","prompt_optimizer":false,`+
		`"fast_pretreatment":true,"duration":10,"resolution":"768P","aigc_watermark":true}`); code != 200 {
		t.Fatalf("hailuo-02 with every listed field: %d %v", code, obj)
	}
	if sent := lastBody(t, fake, "/v1/video_generation"); sent["aigc_watermark"] != true || sent["duration"] != float64(10) {
		t.Fatalf("MiniMax got %v", sent)
	}
}

// TestMediaRefusalsSpeakJSON: a value of the wrong JSON type is refused with the field, the
// type it must be, the type it is and the value, and a body that is not JSON with where it
// breaks: never Go's words (a Go struct, a package name).
func TestMediaRefusalsSpeakJSON(t *testing.T) {
	t.Parallel()
	g, fake, key := startMediaMix(t)
	for _, c := range []struct{ path, body, want string }{
		{"/videos", `{"model":"wan-t2v","input":"a fox"}`, `input must be an object, not a string (got "a fox")`},
		{"/videos", `{"model":"wan-t2v","input":{"prompt":["a fox"]}}`, `input.prompt must be a string, not an array (got ["a fox"])`},
		{"/videos", `{"model":"wan-t2v","input":{"prompt":"a fox"},"parameters":{"duration":"8"}}`, `parameters.duration must be an integer, not a string (got "8")`},
		{"/videos", `{"model":"hailuo-02","prompt":"a fox","prompt_optimizer":"no"}`, `prompt_optimizer must be true or false, not a string (got "no")`},
		{"/images", `{"model":"wan-image","input":{"messages":{"role":"user"}}}`, `input.messages must be an array of one user message, not an object (got {"role":"user"})`},
		{"/images", `{"model":"nb-pro","contents":[{"parts":[{"text":7}]}]}`, `contents[0].parts[0].text must be a string, not a number (got 7)`},
		{"/images", `{"model":"nb-pro","contents":"a fox"`, `the body must be one JSON object (it ends too early)`},
	} {
		msg := refused(t, g, fake, key, c.path, c.body, c.want)
		if leak := fuzzcheck.Leak(msg); leak != "" || strings.Contains(msg, "provider:") {
			t.Errorf("%s: Go in %q", c.body, msg)
		}
	}
	// A multipart body cut short.
	var b strings.Builder
	w := multipart.NewWriter(&b)
	_ = w.WriteField("model", "hailuo-02")
	req, _ := http.NewRequest("POST", g.BaseURL+"/videos", strings.NewReader(b.String())) // no closing boundary
	req.Header.Set("content-type", w.FormDataContentType())
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	e := wantError(t, resp, 400, "invalid_request")
	if !strings.Contains(e.Error.Message, "the multipart body is malformed: each part must follow") || strings.Contains(e.Error.Message, "NextPart") {
		t.Errorf("cut form: %q", e.Error.Message)
	}
}
