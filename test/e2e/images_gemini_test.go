package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/test/fakeupstream"
)

// i3Model is one I3 model of i3Config: its catalog id, Gemini's name for it, and its prices.
type i3Model struct {
	id, upstream, variant              string
	request, image, prompt, completion string
}

var i3Models = []i3Model{
	{"nb-pro", "gemini-3-pro-image-preview", "pro", "0.02", "0.134", "0.000002", "0.000012"},
	{"nb-2", "gemini-3.1-flash-image-preview", "flash-3.1", "0", "0.067", "0.0000005", "0.000003"},
	{"nb", "gemini-2.5-flash-image", "flash-2.5", "0.01", "0.039", "0.0000003", "0.0000025"},
}

// cost is what an answer of m with these counts costs, exact.
func (m i3Model) cost(prompt, completion, images int64) decimal.Decimal {
	d := decimal.RequireFromString
	return d(m.request).Add(d(m.image).Mul(decimal.NewFromInt(images))).
		Add(d(m.prompt).Mul(decimal.NewFromInt(prompt))).Add(d(m.completion).Mul(decimal.NewFromInt(completion)))
}

// i3Config is a billed gateway whose I3 models are served by two Gemini providers, gem-a
// (first) and gem-b, both with the fake's key; extra goes on top.
func i3Config(a, b *fakeupstream.Server, extra string) string {
	var models strings.Builder
	for _, m := range i3Models {
		fmt.Fprintf(&models, `  - id: %s
    family: I3
    variant: %s
    providers: [{provider: gem-a, model: %s}, {provider: gem-b, model: %s}]
    pricing: {request: "%s", image: "%s", prompt: "%s", completion: "%s"}
`, m.id, m.variant, m.upstream, m.upstream, m.request, m.image, m.prompt, m.completion)
	}
	return extra + fmt.Sprintf(`billing: {enabled: true}
providers:
  - {name: gem-a, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: gem-b, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
`, a.GeminiURL(), b.GeminiURL()) + models.String()
}

// startI3 starts two Gemini fakes and a gateway serving i3Models, with account acme holding
// $10 and its key.
func startI3(t *testing.T, extra string) (g *gateway, a, b *fakeupstream.Server, key string) {
	t.Helper()
	a = fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	b = fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g = startGateway(t, i3Config(a, b, extra), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	return g, a, b, g.newKey("acme")
}

// i3Create is an I3 create body: model, one user turn of prompt, and extra members.
func i3Create(model, prompt, extra string) string {
	p, _ := json.Marshal(prompt)
	body := `{"model":"` + model + `","contents":[{"role":"user","parts":[{"text":` + string(p) + `}]}]`
	if extra != "" {
		body += "," + extra
	}
	return body + "}"
}

func words(s string) int64 { return int64(len(strings.Fields(s))) }

// lastGenerate is the body of the last generateContent request fake received.
func lastGenerate(t *testing.T, fake *fakeupstream.Server) (fakeupstream.Recorded, map[string]any) {
	t.Helper()
	reqs := fake.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if strings.HasSuffix(reqs[i].Path, ":generateContent") {
			var body map[string]any
			if err := json.Unmarshal(reqs[i].Body, &body); err != nil {
				t.Fatal(err)
			}
			return reqs[i], body
		}
	}
	t.Fatal("no generateContent request")
	return fakeupstream.Recorded{}, nil
}

// TestGeminiImageVariants: per variant, an image task through the real Envoy is born
// completed: the fake got Gemini's imageConfig (not the spec's responseFormat) with the
// provider's key, the image comes back as b64_json byte for byte (also from GET), the text
// beside it as result.text, thoughts left out; the cost is request + image + tokens to the
// digit, one usage record, the balance debited by exactly that.
func TestGeminiImageVariants(t *testing.T) {
	t.Parallel()
	g, a, _, key := startI3(t, "")
	spent := decimal.Zero
	for i, c := range []struct {
		m                 i3Model
		ratio, size, gen  string
		withText, thought bool
	}{
		{i3Models[0], "21:9", "4K", `"generationConfig":{"responseModalities":["TEXT","IMAGE"],"responseFormat":{"image":{"aspectRatio":"21:9","imageSize":"4K"}}},"tools":[{"google_search":{}}]`, true, true},
		{i3Models[1], "8:1", "512", `"generationConfig":{"responseFormat":{"image":{"aspectRatio":"8:1","imageSize":"512"}}}`, true, false},
		{i3Models[2], "16:9", "", `"generationConfig":{"responseModalities":["IMAGE"],"responseFormat":{"image":{"aspectRatio":"16:9"}}}`, false, false},
	} {
		prompt := "a red fox in the snow for " + c.m.id
		code, obj := g.do("POST", key, "/images", i3Create(c.m.id, prompt, c.gen))
		id, _ := obj["id"].(string)
		if code != 200 || !strings.HasPrefix(id, "image_") || obj["object"] != "image" || obj["status"] != "completed" || obj["provider"] != "gem-a" ||
			obj["model"] != c.m.id || obj["progress"] != float64(100) || obj["completed_at"] == nil || obj["provider_status"] != "STOP" {
			t.Fatalf("%s create: %d %v", c.m.id, code, obj)
		}
		rec, sent := lastGenerate(t, a)
		gc, _ := sent["generationConfig"].(map[string]any)
		ic, _ := gc["imageConfig"].(map[string]any)
		if rec.Path != "/v1beta/models/"+c.m.upstream+":generateContent" || rec.Header.Get("X-Goog-Api-Key") != providerKey || rec.Header.Get("Authorization") != "" ||
			ic["aspectRatio"] != c.ratio || fmt.Sprint(ic["imageSize"]) != map[bool]string{true: c.size, false: "<nil>"}[c.size != ""] ||
			gc["responseFormat"] != nil || sent["model"] != nil || sent["callback_url"] != nil {
			t.Fatalf("%s: Gemini got %s %v %s", c.m.id, rec.Path, rec.Header, rec.Body)
		}
		want, _ := fakeupstream.GeminiImageFor(prompt, c.ratio, c.size, 0)
		cfg, _ := png.DecodeConfig(bytes.NewReader(want))
		for _, o := range []map[string]any{obj, getObject(t, g, key, id)} {
			res, _ := o["result"].(map[string]any)
			ims, _ := res["images"].([]any)
			if len(ims) != 1 {
				t.Fatalf("%s: images %v", c.m.id, o)
			}
			im := ims[0].(map[string]any)
			got, _ := base64.StdEncoding.DecodeString(fmt.Sprint(im["b64_json"]))
			if !bytes.Equal(got, want) || im["mime_type"] != "image/png" || im["width"] != float64(cfg.Width) || im["height"] != float64(cfg.Height) || im["expires_at"] == nil {
				t.Fatalf("%s: image %v (want %dx%d, %d bytes)", c.m.id, im["mime_type"], cfg.Width, cfg.Height, len(want))
			}
			if text := "Here is your image: " + prompt; (res["text"] == text) != c.withText {
				t.Fatalf("%s: text %q", c.m.id, res["text"])
			}
		}
		// The fake counts words: the prompt, and the text it wrote (+37 thinking on pro).
		completion := int64(0)
		if c.withText {
			completion = words("Here is your image: " + prompt)
		}
		if c.thought {
			completion += 37
		}
		cost := c.m.cost(words(prompt), completion, 1)
		if obj["cost"] != cost.String() {
			t.Fatalf("%s: cost %v, want %s", c.m.id, obj["cost"], cost)
		}
		spent = spent.Add(cost)
		var r usageRecord
		for _, rec := range g.waitRecords("acme", i+1) {
			if rec.Model == c.m.id {
				r = rec
			}
		}
		// The record counts every output token, the image's too (the fake lists only the IMAGE
		// entry by modality, as Gemini does); the image's are billed per image, not as tokens.
		if imageTokens := int64(fakeupstream.GeminiImageTokens(c.m.upstream, c.size)); !r.Cost.Equal(cost) || r.Provider != "gem-a" ||
			r.PromptTokens != words(prompt) || r.CompletionTokens != completion+imageTokens || r.Estimated {
			t.Fatalf("%s: usage record %+v", c.m.id, r)
		}
		waitFor(t, "the debit", 10*time.Second, func() bool { return g.balance("acme").Equal(decimal.NewFromInt(10).Sub(spent)) })
	}
	_, m := g.do("GET", key, "/models/nb", "")
	if !strings.Contains(fmt.Sprint(m["output_modalities"]), "image") {
		t.Fatalf("catalog entry %v", m)
	}
}

// getObject reads a task by GET /v1/images/{id}.
func getObject(t *testing.T, g *gateway, key, id string) map[string]any {
	t.Helper()
	code, obj := g.do("GET", key, "/images/"+id, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %v", id, code, obj)
	}
	return obj
}

// TestGeminiImageRefusals: every I3 rule refused with a 400 naming the field, the value and
// what is allowed, before any provider call; and on chat completions, what an image model
// cannot do (streaming, tools, audio) before any provider call too.
func TestGeminiImageRefusals(t *testing.T) {
	t.Parallel()
	g, a, b, key := startI3(t, "")
	gen := func(ratio, size string) string {
		return `"generationConfig":{"responseFormat":{"image":{"aspectRatio":"` + ratio + `","imageSize":"` + size + `"}}}`
	}
	png16 := pngB64(16, 16)
	for _, c := range []struct{ body, want string }{
		{i3Create("nb-pro", "x", gen("8:1", "1K")), `aspectRatio "8:1" is not allowed for nb-pro (variant pro)`},
		{i3Create("nb", "x", gen("1:4", "")), "1:4 is for flash-3.1 models only"},
		{i3Create("nb-2", "x", gen("5:1", "1K")), `aspectRatio "5:1" is not allowed`},
		{i3Create("nb-pro", "x", gen("1:1", "512")), "512 is for flash-3.1 models only"},
		{i3Create("nb", "x", gen("1:1", "1K")), "imageSize is not taken by nb (variant flash-2.5)"},
		{i3Create("nb-2", "x", gen("1:1", "8K")), `imageSize "8K" is not allowed for nb-2 (variant flash-3.1): use one of 512, 1K, 2K, 4K`},
		{i3Create("nb", "x", `"tools":[{"google_search":{}}]`), "google_search is for pro and flash-3.1 models"},
		{i3Create("nb-pro", "x", `"tools":[{"code_execution":{}}]`), `tools[0] does not take field "code_execution"`},
		{i3Create("nb-pro", "x", `"generationConfig":{"responseModalities":["TEXT"]}`), `responseModalities ["TEXT"] is not allowed`},
		{i3Create("nb-pro", "x", `"generationConfig":{"temperature":1}`), `generationConfig does not take field "temperature"`},
		{i3Create("nb-pro", "x", `"prompt":"x"`), `I3 does not take field "prompt"; its fields are contents, generationConfig, tools`},
		{`{"model":"nb-pro"}`, "contents is required"},
		{`{"model":"nb-pro","contents":[{"role":"model","parts":[{"text":"x"}]}]}`, `contents[0].role "model" is not allowed`},
		{`{"model":"nb-pro","contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"` + png16 + `"}}]}]}`, "contents has no text part"},
		{`{"model":"nb-pro","contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/gif","data":"R0lGODlhAQABAAAAACw="}}]}]}`, `mime_type "image/gif" is not allowed`},
		{`{"model":"nb-pro","contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/png","data":"@@@@"}}]}]}`, "data is not valid base64"},
		{`{"model":"nb-pro","contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/jpeg","data":"` + png16 + `"}}]}]}`, `is not a image/jpeg image (its bytes say "png")`},
		{i3Create("nb-pro", "x", `"callback_url":"http://10.0.0.8/cb"`), "private address"},
	} {
		before := a.RequestCount() + b.RequestCount()
		code, obj := g.do("POST", key, "/images", c.body)
		e, _ := obj["error"].(map[string]any)
		if code != 400 || !strings.Contains(fmt.Sprint(e["message"]), c.want) || e["request_id"] == "" || a.RequestCount()+b.RequestCount() != before {
			t.Errorf("%.100s: %d %v; want a 400 saying %q before any provider call", c.body, code, obj, c.want)
		}
	}
	for _, c := range []struct{ body, want string }{
		{`{"model":"nb","stream":true,"messages":[{"role":"user","content":"x"}]}`, `stream is not supported for image model "nb"`},
		{`{"model":"nb","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`, "takes no function tools"},
		{`{"model":"nb","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`, `"input_audio" is not supported by image models`},
		{`{"model":"nb","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, "response_format json_object is not taken"},
	} {
		resp := g.chat(context.Background(), key, c.body)
		e := wantError(t, resp, 400, "invalid_request")
		if !strings.Contains(e.Error.Message, c.want) || a.RequestCount()+b.RequestCount() != 0 {
			t.Errorf("chat %s: %q; want %q before any provider call", c.body, e.Error.Message, c.want)
		}
	}
	if b := g.balance("acme"); !b.Equal(decimal.NewFromInt(10)) {
		t.Fatalf("balance %s after refusals", b)
	}
}

// TestGeminiImageFailures: a blocked prompt, NO_IMAGE and IMAGE_SAFETY are failed tasks with
// a clear code, billed the tokens Gemini reported and no image; a request Gemini refuses
// (400 INVALID_ARGUMENT) is the client's 400, billed nothing, and not passed to the next
// provider.
func TestGeminiImageFailures(t *testing.T) {
	t.Parallel()
	g, a, b, key := startI3(t, "")
	m := i3Models[2]
	spent := decimal.Zero
	for _, c := range []struct {
		prompt, code, status string
		completion           int64
	}{
		{"a fox " + fakeupstream.GeminiBlockTrigger, "content_filter", "blockReason SAFETY", 0},
		{"a fox " + fakeupstream.GeminiNoImageTrigger, "no_image", "NO_IMAGE", words("I can describe it, but I did not draw it.")},
		{"a fox " + fakeupstream.GeminiImageSafetyTrigger, "content_filter", "IMAGE_SAFETY", 0},
	} {
		code, obj := g.do("POST", key, "/images", i3Create(m.id, c.prompt, ""))
		e, _ := obj["error"].(map[string]any)
		want := m.cost(words(c.prompt), c.completion, 0).Sub(decimal.RequireFromString(m.request))
		if code != 200 || obj["status"] != "failed" || e["code"] != c.code || obj["provider_status"] != c.status || obj["cost"] != want.String() {
			t.Fatalf("%s: %d %v; want failed %s costing %s", c.prompt, code, obj, c.code, want)
		}
		if res, _ := obj["result"].(map[string]any); res["images"] != nil {
			t.Fatalf("%s: images in a failed task: %v", c.prompt, res)
		}
		spent = spent.Add(want)
	}
	waitFor(t, "the token charges", 10*time.Second, func() bool { return g.balance("acme").Equal(decimal.NewFromInt(10).Sub(spent)) })
	if n := len(g.records("account=acme")); n != 3 {
		t.Fatalf("%d usage records, want 3", n)
	}
	code, obj := g.do("POST", key, "/images", i3Create(m.id, "a fox "+fakeupstream.GeminiInvalidTrigger, ""))
	if e, _ := obj["error"].(map[string]any); code != 400 || e["code"] != "invalid_request" || !strings.Contains(fmt.Sprint(e["message"]), "INVALID_ARGUMENT") || b.RequestCount() != 0 {
		t.Fatalf("invalid argument: %d %v (second provider asked %d times)", code, obj, b.RequestCount())
	}
	if !g.balance("acme").Equal(decimal.NewFromInt(10).Sub(spent)) || a.RequestCount() != 4 {
		t.Fatalf("balance %s, %d provider calls", g.balance("acme"), a.RequestCount())
	}
}

// TestGeminiImageFallback: a create that fails before Gemini answered (503, 429) goes to the
// model's next provider; when every provider fails the client gets 503 and nothing is held.
func TestGeminiImageFallback(t *testing.T) {
	t.Parallel()
	g, a, b, key := startI3(t, "")
	for _, status := range []int{503, 429} {
		a.FailNext(status, "")
		code, obj := g.do("POST", key, "/images", i3Create("nb", "a fox", ""))
		if code != 200 || obj["status"] != "completed" || obj["provider"] != "gem-b" {
			t.Fatalf("after a %d: %d %v", status, code, obj)
		}
	}
	a.FailNext(500, "")
	b.FailNext(503, "")
	code, obj := g.do("POST", key, "/images", i3Create("nb", "a fox", ""))
	if e, _ := obj["error"].(map[string]any); code != 503 || e["code"] != "upstream_unavailable" {
		t.Fatalf("every provider failing: %d %v", code, obj)
	}
	want := decimal.NewFromInt(10).Sub(i3Models[2].cost(words("a fox"), words("Here is your image: a fox"), 1).Mul(decimal.NewFromInt(2)))
	waitFor(t, "the two debits", 10*time.Second, func() bool { return g.balance("acme").Equal(want) })
}

// TestGeminiImageCallback: a task born completed with a callback_url gets exactly one
// callback, signed with the account's secret, carrying the object without the image bytes.
func TestGeminiImageCallback(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies, sigs []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, sigs = append(bodies, string(b)), append(sigs, r.Header.Get(tasks.SignatureHeader))
		mu.Unlock()
	}))
	defer hook.Close()
	g, _, _, key := startI3(t, "callbacks: {allow_private: [127.0.0.1]}\n")
	code, obj := g.do("POST", key, "/images", i3Create("nb-2", "a fox", `"callback_url":"`+hook.URL+`/i"`))
	if code != 200 || obj["status"] != "completed" {
		t.Fatalf("create: %d %v", code, obj)
	}
	waitFor(t, "the callback", 15*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) == 1 })
	time.Sleep(2500 * time.Millisecond) // the outbox runs every second: a second delivery would have come
	_, accounts := g.adminJSON("GET", "/admin/v1/accounts", nil)
	var secret string
	for _, ac := range accounts["data"].([]any) {
		if m := ac.(map[string]any); m["id"] == "acme" {
			secret, _ = m["callback_secret"].(string)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var cb map[string]any
	_ = json.Unmarshal([]byte(bodies[0]), &cb)
	if len(bodies) != 1 || cb["id"] != obj["id"] || cb["status"] != "completed" || cb["cost"] != obj["cost"] || strings.Contains(bodies[0], "b64_json") {
		t.Fatalf("callbacks %d: %s", len(bodies), bodies[0])
	}
	if err := tasks.Verify(secret, sigs[0], []byte(bodies[0]), time.Now(), 5*time.Minute); err != nil || secret == "" {
		t.Fatalf("signature %s: %v", sigs[0], err)
	}
}

// pngB64 is a w x h PNG in base64.
func pngB64(w, h int) string {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)))
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// paddedPNG is a PNG padded with zeros to exactly n bytes (its header still decodes).
func paddedPNG(n int) string {
	raw, _ := base64.StdEncoding.DecodeString(pngB64(64, 64))
	return base64.StdEncoding.EncodeToString(append(raw, make([]byte, n-len(raw))...))
}

// TestGeminiImageLargeInput: a 20 MiB inline image goes through to Gemini and 20 MiB + 1 byte
// is refused before any provider call, on POST /v1/images and as a data URL on chat
// completions.
func TestGeminiImageLargeInput(t *testing.T) {
	// Runs alone (no t.Parallel): it moves 28 MB JSON bodies through the race-built gateway,
	// whose translation of them under the other tests' load outlasted an attempt now and then.
	g, a, _, key := startI3(t, "")
	body := func(data string) string {
		return `{"model":"nb","contents":[{"role":"user","parts":[{"text":"make it blue"},{"inline_data":{"mime_type":"image/png","data":"` + data + `"}}]}]}`
	}
	big := paddedPNG(20 << 20)
	code, obj := g.do("POST", key, "/images", body(big))
	if code != 200 || obj["status"] != "completed" {
		t.Fatalf("20 MiB input: %d %v", code, obj)
	}
	reqs := a.Requests() // the body is not decoded: 28 MB of JSON is slow under -race
	if rec := reqs[len(reqs)-1]; !bytes.Contains(rec.Body, []byte(`"inlineData":{"mimeType":"image/png","data":"`+big+`"}`)) {
		t.Fatalf("Gemini got %d bytes", len(rec.Body))
	}
	before := a.RequestCount()
	code, obj = g.do("POST", key, "/images", body(paddedPNG(20<<20+1)))
	if e, _ := obj["error"].(map[string]any); code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "at most 20 MiB") || a.RequestCount() != before {
		t.Fatalf("20 MiB + 1 input: %d %v", code, obj)
	}
	chatBig := `{"model":"nb","messages":[{"role":"user","content":[{"type":"text","text":"make it blue"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + big + `"}}]}]}`
	resp := g.chat(context.Background(), key, chatBig)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(chatImages(t, raw)) != 1 {
		t.Fatalf("20 MiB input on chat: %d %.300s", resp.StatusCode, raw)
	}
	before = a.RequestCount()
	over := strings.Replace(chatBig, big, paddedPNG(20<<20+1), 1)
	if e := wantError(t, g.chat(context.Background(), key, over), 400, "invalid_request"); !strings.Contains(e.Error.Message, "at most 20 MiB") || a.RequestCount() != before {
		t.Fatalf("20 MiB + 1 input on chat: %q", e.Error.Message)
	}
	// Each answer: request + one image + tokens (the input image is 258 prompt tokens here).
	for _, r := range g.waitRecords("acme", 2) {
		if r.PromptTokens < 258 || r.Cost.LessThan(decimal.RequireFromString("0.049")) {
			t.Fatalf("record %+v", r)
		}
	}
}

// TestGeminiImageLargeAnswer: a 4 MiB image answer (5.6 MB of base64) comes back whole through
// Envoy, as b64_json from POST and GET /v1/images and as a data URL from chat completions
// (through the per-attempt translation and the router-level metering), and is billed.
func TestGeminiImageLargeAnswer(t *testing.T) {
	t.Parallel()
	g, _, _, key := startI3(t, "")
	large := fakeupstream.GeminiLargeImage()
	if len(large) < 4<<20 {
		t.Fatalf("the fake's large image is %d bytes", len(large))
	}
	prompt := "a fox " + fakeupstream.GeminiLargeImageTrigger
	// Chat first, three times: large answers through the per-attempt filter were what crashed
	// Envoy while its connection to ext_proc had a 1 MiB buffer.
	for range 3 {
		resp := g.chat(context.Background(), key, `{"model":"nb","messages":[{"role":"user","content":"`+prompt+`"}]}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("4 MiB answer on chat: %d %.300s", resp.StatusCode, raw)
		}
		if got := chatImages(t, raw); len(got) != 1 || !bytes.Equal(got[0], large) {
			t.Fatalf("4 MiB answer on chat: %d images", len(got))
		}
	}
	code, obj := g.do("POST", key, "/images", i3Create("nb", prompt, ""))
	if code != 200 || obj["status"] != "completed" {
		t.Fatalf("4 MiB answer: %d %.300v", code, obj)
	}
	for _, o := range []map[string]any{obj, getObject(t, g, key, obj["id"].(string))} {
		im := o["result"].(map[string]any)["images"].([]any)[0].(map[string]any)
		if got, _ := base64.StdEncoding.DecodeString(im["b64_json"].(string)); !bytes.Equal(got, large) || im["width"] != float64(1024) {
			t.Fatalf("4 MiB answer: %d bytes back, want %d", len(got), len(large))
		}
	}
	want := i3Models[2].cost(words(prompt), words("Here is your image: "+prompt), 1)
	for _, r := range g.waitRecords("acme", 4) {
		if !r.Cost.Equal(want) || r.Estimated {
			t.Fatalf("record %+v, want %s", r, want)
		}
	}
}

// chatImages decodes the image parts of a chat answer's message.
func chatImages(t *testing.T, raw []byte) [][]byte {
	t.Helper()
	var c struct {
		Choices []struct {
			Message struct {
				Content []struct {
					Type     string
					Text     string
					ImageURL struct{ URL string } `json:"image_url"`
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("answer %.300s: %v", raw, err)
	}
	var out [][]byte
	for _, p := range c.Choices[0].Message.Content {
		if p.Type == "image_url" {
			data, ok := strings.CutPrefix(p.ImageURL.URL, "data:image/png;base64,")
			b, err := base64.StdEncoding.DecodeString(data)
			if !ok || err != nil {
				t.Fatalf("image part %.80s", p.ImageURL.URL)
			}
			out = append(out, b)
		}
	}
	return out
}

// TestGeminiImageSlowCreate: Gemini taking longer than Envoy's ext_proc message timeout (5 s)
// to answer does not fail the create: the gateway extends the timeout for it.
func TestGeminiImageSlowCreate(t *testing.T) {
	t.Parallel()
	g, _, _, key := startI3(t, "")
	start := time.Now()
	code, obj := g.do("POST", key, "/images", i3Create("nb-2", "a slow fox "+fakeupstream.GeminiSlowTrigger+"7s", ""))
	if code != 200 || obj["status"] != "completed" || time.Since(start) < 7*time.Second {
		t.Fatalf("slow create: %d %v after %s", code, obj, time.Since(start))
	}
}

// TestGeminiImageChat: an I3 model on chat completions (docs/api.md, Provider APIs: Gemini image
// models) with text and image_url parts: Gemini is asked for text and images with the input image
// inline, and the answer's message content is text and image_url parts (the image as a data URL,
// byte for byte), its usage text only, billed request + image + tokens to the digit.
func TestGeminiImageChat(t *testing.T) {
	t.Parallel()
	g, a, _, key := startI3(t, "")
	in := pngB64(20, 10)
	body := `{"model":"nb-pro","messages":[{"role":"user","content":[{"type":"text","text":"add a hat ` + fakeupstream.GeminiTwoImagesTrigger + `"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + in + `"}}]}]}`
	resp := g.chat(context.Background(), key, body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-tollway-provider") != "gem-a" || resp.Header.Get("x-tollway-model") != "nb-pro" {
		t.Fatalf("%d %v %.300s", resp.StatusCode, resp.Header, raw)
	}
	var ans struct {
		Model   string
		Choices []struct {
			Message struct {
				Role    string
				Content []map[string]any
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens            int64 `json:"prompt_tokens"`
			CompletionTokens        int64 `json:"completion_tokens"`
			CompletionTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
				ImageTokens     int64 `json:"image_tokens"`
			} `json:"completion_tokens_details"`
		}
	}
	if err := json.Unmarshal(raw, &ans); err != nil || ans.Model != "nb-pro" || ans.Choices[0].FinishReason != "stop" || len(ans.Choices[0].Message.Content) != 4 {
		t.Fatalf("answer %.400s: %v", raw, err)
	}
	prompt := "add a hat " + fakeupstream.GeminiTwoImagesTrigger
	types := []string{}
	for _, p := range ans.Choices[0].Message.Content {
		types = append(types, fmt.Sprint(p["type"]))
	}
	if strings.Join(types, ",") != "text,image_url,text,image_url" || ans.Choices[0].Message.Content[0]["text"] != "Here is your image: "+prompt {
		t.Fatalf("content %v", types)
	}
	for i, got := range chatImages(t, raw) {
		if want, _ := fakeupstream.GeminiImageFor(prompt, "", "", i); !bytes.Equal(got, want) {
			t.Fatalf("image %d differs from the fake's", i)
		}
	}
	_, sent := lastGenerate(t, a)
	if gc := sent["generationConfig"].(map[string]any); fmt.Sprint(gc["responseModalities"]) != "[TEXT IMAGE]" || !strings.Contains(fmt.Sprint(sent["contents"]), in) {
		t.Fatalf("Gemini got %v", sent["generationConfig"])
	}
	// Prompt: the words plus the input image (258); completion: the two texts, 37 thinking and
	// the two images (1,120 each), which are billed per image, not as tokens.
	promptTokens, completion := words(prompt)+258, words("Here is your image: "+prompt)+words("And another one.")+37
	imageTokens := int64(2 * fakeupstream.GeminiImageTokens(i3Models[0].upstream, ""))
	if u := ans.Usage; u.PromptTokens != promptTokens || u.CompletionTokens != completion+imageTokens ||
		u.CompletionTokensDetails.ImageTokens != imageTokens || u.CompletionTokensDetails.ReasoningTokens != 37 {
		t.Fatalf("usage %+v, want %d %d (%d of the images)", ans.Usage, promptTokens, completion+imageTokens, imageTokens)
	}
	want := i3Models[0].cost(promptTokens, completion, 2)
	if r := g.waitRecords("acme", 1)[0]; !r.Cost.Equal(want) || r.Model != "nb-pro" || r.Estimated {
		t.Fatalf("record %+v, want cost %s", r, want)
	}
	waitFor(t, "the debit", 10*time.Second, func() bool { return g.balance("acme").Equal(decimal.NewFromInt(10).Sub(want)) })
}

// TestGeminiImageChatSDKs: I3 through chat completions with the official OpenAI Python and
// Node SDKs: the image parts in the message, the usage, and the stream refusal as an SDK error.
func TestGeminiImageChatSDKs(t *testing.T) {
	t.Parallel()
	python, dir := sdkClients()
	for _, p := range []string{python, filepath.Join(dir, "node_modules", "openai")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("an SDK client is not installed (%v): run `make clients`", err)
		}
	}
	g, _, _, _ := startI3(t, "")
	want, _ := fakeupstream.GeminiImageFor("a red fox in snow", "", "", 0)
	sum := sha256.Sum256(want)
	env := func(account string) []string {
		if err := g.NewAccount(context.Background(), account, "5"); err != nil {
			t.Fatal(err)
		}
		return append(os.Environ(), "TOLLWAY_BASE_URL="+g.BaseURL, "TOLLWAY_API_KEY="+g.newKey(account), "TOLLWAY_MODEL=nb",
			"TOLLWAY_IMAGE_SHA256="+hex.EncodeToString(sum[:]), "TOLLWAY_INPUT_IMAGE="+pngB64(8, 8))
	}
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(repoRoot, "test", "clients", "python-images"))
	cmd.Env = env("py")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil || !strings.Contains(string(out), "3 passed") {
		t.Fatalf("OpenAI Python SDK image chat suite failed: %v", err)
	}
	cmd = exec.Command("node", "--test", "images-chat-sdk.mjs")
	cmd.Dir, cmd.Env = dir, env("node")
	out, err = cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil || !strings.Contains(string(out), "# pass 3") || !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("OpenAI Node SDK image chat suite failed: %v", err)
	}
	// Each SDK's image answer was billed: request $0.01 + image $0.039 + tokens.
	for _, acct := range []string{"py", "node"} {
		if recs := g.waitRecords(acct, 2); recs[0].Cost.LessThan(decimal.RequireFromString("0.049")) {
			t.Fatalf("%s: records %+v", acct, recs)
		}
	}
}
