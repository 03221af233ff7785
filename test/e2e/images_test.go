package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/test/fakeupstream"
)

// callbackSink receives a gateway's callbacks and keeps them with their signatures and
// delivery ids.
type callbackSink struct {
	*httptest.Server
	mu                sync.Mutex
	bodies, sigs, ids []string
}

func newCallbackSink(t *testing.T) *callbackSink {
	c := &callbackSink{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.bodies, c.sigs = append(c.bodies, string(b)), append(c.sigs, r.Header.Get(tasks.SignatureHeader))
		c.ids = append(c.ids, r.Header.Get(tasks.DeliveryHeader))
		c.mu.Unlock()
	}))
	t.Cleanup(c.Close)
	return c
}

// statuses lists the statuses task id's callbacks said, in delivery order.
func (c *callbackSink) statuses(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, b := range c.bodies {
		var o struct{ ID, Status string }
		if json.Unmarshal([]byte(b), &o) == nil && o.ID == id {
			out = append(out, o.Status)
		}
	}
	return out
}

// verify checks every delivery's signature with the account's callback secret.
func (c *callbackSink) verify(t *testing.T, secret string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if secret == "" || len(c.bodies) == 0 {
		t.Fatalf("no secret (%q) or no callbacks (%d)", secret, len(c.bodies))
	}
	for i, sig := range c.sigs {
		if err := tasks.Verify(secret, sig, []byte(c.bodies[i]), time.Now(), 5*time.Minute); err != nil {
			t.Errorf("callback %d (%s): %v", i, sig, err)
		}
		if err := tasks.Verify(secret+"x", sig, []byte(c.bodies[i]), time.Now(), 5*time.Minute); err == nil {
			t.Errorf("callback %d verifies with another secret", i)
		}
	}
}

func (g *gateway) callbackSecret(account string) string {
	g.t.Helper()
	_, accounts := g.adminJSON("GET", "/admin/v1/accounts", nil)
	for _, a := range accounts["data"].([]any) {
		if m := a.(map[string]any); m["id"] == account {
			s, _ := m["callback_secret"].(string)
			return s
		}
	}
	return ""
}

// waitImage polls an image task until it ends and returns its object.
func (g *gateway) waitImage(key, id string) map[string]any {
	g.t.Helper()
	var obj map[string]any
	waitFor(g.t, "image task "+id+" to end", 45*time.Second, func() bool {
		_, obj = g.do("GET", key, "/images/"+id, "")
		return obj["status"] == "completed" || obj["status"] == "failed"
	})
	return obj
}

// imagesOf is a task object's result.images.
func imagesOf(obj map[string]any) []map[string]any {
	res, _ := obj["result"].(map[string]any)
	list, _ := res["images"].([]any)
	var out []map[string]any
	for _, im := range list {
		out = append(out, im.(map[string]any))
	}
	return out
}

// fetchImage downloads a result URL and returns its status (a 200 that is not a PNG fails).
func fetchImage(t *testing.T, url string) int {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && !strings.HasPrefix(string(b), "\x89PNG") {
		t.Fatalf("%s served %.20q", url, b)
	}
	return resp.StatusCode
}

// lastSent is the body of the last request fake received at path.
func lastSent(fake *fakeupstream.Server, path string) (map[string]any, http.Header) {
	var body map[string]any
	var h http.Header
	for _, r := range fake.Requests() {
		if r.Path == path {
			body, h = nil, r.Header
			_ = json.Unmarshal(r.Body, &body)
		}
	}
	return body, h
}

// imageRefusals checks that each body is a 400 naming its problem, with no provider call.
func imageRefusals(t *testing.T, g *gateway, key string, fakes []*fakeupstream.Server, cases [][2]string) {
	t.Helper()
	count := func() (n int) {
		for _, f := range fakes {
			n += f.RequestCount()
		}
		return n
	}
	for _, c := range cases {
		before := count()
		code, obj := g.do("POST", key, "/images", c[0])
		e, _ := obj["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != 400 || !strings.Contains(msg, c[1]) || e["request_id"] == "" || count() != before {
			t.Errorf("%.160s:\n %d %v\nwant a 400 saying %q before any provider call", c[0], code, obj, c[1])
		}
	}
}

// TestImageKlingTask: an I1 (Kling images) task end to end through the real Envoy: created with
// a signed JWT and model_name (the first provider failing its create, the second taking it),
// the spec's video fields checked but not sent, polled to completion, its n images' URLs with
// Kling's 30-day expiry, billed request + image x n exactly, hidden from another account, its
// callbacks delivered signed; every validation refusal a 400 before any provider call; a
// content-policy refusal is the client's 400 and bills nothing.
func TestImageKlingTask(t *testing.T) {
	t.Parallel()
	opts := fakeupstream.Options{KlingAccessKey: "ak-img", KlingSecretKey: "sk-img-secret"}
	fake, broken := fakeupstream.Start(t, opts), fakeupstream.Start(t, opts)
	sink := newCallbackSink(t)
	g := startGateway(t, fmt.Sprintf(`billing: {enabled: true}
callbacks: {allow_private: [127.0.0.1]}
providers:
  - {name: kling-down, type: kling, base_url: %s, access_key: "${KLING_AK}", secret_key: "${KLING_SK}"}
  - {name: kling, type: kling, base_url: %s, access_key: "${KLING_AK}", secret_key: "${KLING_SK}"}
models:
  - id: kling-image
    family: I1
    providers: [{provider: kling-down, model: kling-v2-1}, {provider: kling, model: kling-v2-1}]
    pricing: {request: "0.01", image: "0.0035"}
`, broken.KlingURL(), fake.KlingURL()), "KLING_AK=ak-img", "KLING_SK=sk-img-secret")
	ctx := context.Background()
	for _, a := range []string{"acme", "other"} {
		if err := g.NewAccount(ctx, a, "10"); err != nil {
			t.Fatal(err)
		}
	}
	key, otherKey := g.newKey("acme"), g.newKey("other")

	imageRefusals(t, g, key, []*fakeupstream.Server{fake, broken}, [][2]string{
		{`{"model":"kling-image"}`, "prompt is required (I1 is text-to-image)"},
		{`{"model":"kling-image","prompt":"a fox","n":10}`, "n 10 is out of range: Kling makes 1 to 9 images a request"},
		{`{"model":"kling-image","prompt":"a fox","n":"2"}`, `n must be an integer, not a string (got "2")`},
		{`{"model":"kling-image","prompt":"a fox","aspect_ratio":"5:4"}`, `aspect_ratio "5:4" is not allowed: use 16:9, 9:16, 1:1, 4:3, 3:4, 3:2, 2:3 or 21:9`},
		{`{"model":"kling-image","prompt":"a fox","cfg_scale":2}`, "cfg_scale 2 is not allowed: a number from 0 to 1"},
		{`{"model":"kling-image","prompt":"a fox","mode":"ultra"}`, `mode "ultra" is not allowed: use std or pro`},
		{`{"model":"kling-image","prompt":"a fox","duration":5}`, `duration must be a string for I1: "5" or "10"`},
		{`{"model":"kling-image","prompt":"a fox","duration":"7"}`, `duration "7" is not allowed`},
		{`{"model":"kling-image","prompt":"` + strings.Repeat("x", 2501) + `"}`, "prompt is 2501 characters; Kling takes at most 2500"},
		{`{"model":"kling-image","prompt":"a fox","image":"https://example.com/a.png"}`, `I1 does not take field "image"; its fields are prompt, negative_prompt, n, aspect_ratio, cfg_scale, mode, duration`},
		{`{"model":"kling-image","prompt":"a fox","callback_url":"http://10.0.0.8/cb"}`, "private address"},
	})

	broken.FailNext(503, "")
	code, obj := g.do("POST", key, "/images", `{"model":"kling-image","prompt":"a red fox in snow","negative_prompt":"blur","n":3,"aspect_ratio":"4:3","cfg_scale":0.5,"mode":"pro","duration":"5","callback_url":"`+sink.URL+`/i"}`)
	id, _ := obj["id"].(string)
	if code != 200 || !strings.HasPrefix(id, "image_") || obj["object"] != "image" || obj["status"] != "queued" || obj["provider"] != "kling" || obj["cost"] != nil {
		t.Fatalf("create: %d %v", code, obj)
	}
	if broken.RequestCount() != 1 {
		t.Fatalf("the first provider saw %d requests, want its failed create", broken.RequestCount())
	}
	body, h := lastSent(fake, "/v1/images/generations")
	if body["model_name"] != "kling-v2-1" || body["n"] != float64(3) || body["aspect_ratio"] != "4:3" || body["negative_prompt"] != "blur" ||
		body["model"] != nil || body["cfg_scale"] != nil || body["mode"] != nil || body["duration"] != nil || body["callback_url"] != nil ||
		!strings.HasPrefix(h.Get("Authorization"), "Bearer ey") {
		t.Fatalf("Kling got %v (%s)", body, h.Get("Authorization"))
	}
	if m := fake.KlingImageModels(); len(m) != 1 || m[0] != "kling-v2-1" {
		t.Fatalf("Kling ran %v", m)
	}
	if code, obj := g.do("GET", otherKey, "/images/"+id, ""); code != 404 {
		t.Fatalf("another account: %d %v", code, obj)
	}
	done := g.waitImage(key, id)
	images := imagesOf(done)
	if done["status"] != "completed" || len(images) != 3 || done["cost"] != "0.0205" || done["provider_status"] != "succeed" || done["progress"] != float64(100) {
		t.Fatalf("completed %v", done)
	}
	for _, im := range images {
		exp, _ := im["expires_at"].(float64)
		if u, _ := im["url"].(string); fetchImage(t, u) != 200 || time.Until(time.Unix(int64(exp), 0)) < 29*24*time.Hour || im["expired"] != nil {
			t.Fatalf("image %v", im)
		}
	}
	recs := g.waitRecords("acme", 1)
	if !recs[0].Cost.Equal(decimal.RequireFromString("0.0205")) || recs[0].Model != "kling-image" || recs[0].Provider != "kling" {
		t.Fatalf("usage record %+v", recs[0])
	}
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("9.9795")) {
		t.Fatalf("balance %s, want 9.9795", b)
	}
	waitFor(t, "the completed callback", 20*time.Second, func() bool {
		s := sink.statuses(id)
		return len(s) > 0 && s[len(s)-1] == "completed"
	})
	sink.verify(t, g.callbackSecret("acme"))

	// A content-policy refusal is the client's 400; the hold is released, nothing is billed.
	code, obj = g.do("POST", key, "/images", `{"model":"kling-image","prompt":"a fox #policy","n":9}`)
	if e, _ := obj["error"].(map[string]any); code != 400 || e["code"] != "content_filter" {
		t.Fatalf("policy: %d %v", code, obj)
	}
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("9.9795")) || len(g.records("account=acme")) != 1 {
		t.Fatalf("after a refusal: balance %s, %d records", b, len(g.records("account=acme")))
	}
}

// TestImageDashScopeTasks: I2 (Qwen-Image) and I2b (Wan image), both variants, end to end
// through the real Envoy: Qwen-Image standard through the asynchronous text2image API (after a
// first provider's failed create), Qwen-Image pro answered synchronously (a task born
// completed, billed and called back at once), Wan image through its asynchronous API, a
// sequential set billed on DashScope's usage.image_count, a colour palette and 4K accepted, a
// failed task unbilled, URLs that expire (withheld then), another account's 404, and every
// validation rule refused before any provider call.
func TestImageDashScopeTasks(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	broken := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	short := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, MediaURLTTL: 4 * time.Second})
	sink := newCallbackSink(t)
	g := startGateway(t, fmt.Sprintf(`billing: {enabled: true}
callbacks: {allow_private: [127.0.0.1]}
providers:
  - {name: ds-down, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: ds, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: ds-short, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - {id: qwen-image, family: I2, variant: standard, providers: [{provider: ds-down, model: qwen-image-plus}, {provider: ds, model: qwen-image-plus}], pricing: {request: "0.002", image: "0.03"}}
  - {id: qwen-image-pro, family: I2, variant: pro, providers: [{provider: ds, model: qwen-image-max}], pricing: {request: "0", image: "0.075"}}
  - {id: wan-image, family: I2b, variant: standard, providers: [{provider: ds, model: wan2.7-image}], pricing: {request: "0.001", image: "0.03"}}
  - {id: wan-image-pro, family: I2b, variant: pro, providers: [{provider: ds, model: wan2.7-image-pro}], pricing: {request: "0.001", image: "0.075"}}
  - {id: wan-image-short, family: I2b, variant: standard, providers: [{provider: ds-short, model: wan2.7-image}], pricing: {image: "0.03"}}
`, broken.DashScopeURL(), fake.DashScopeURL(), short.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	for _, a := range []string{"acme", "other"} {
		if err := g.NewAccount(ctx, a, "10"); err != nil {
			t.Fatal(err)
		}
	}
	key, otherKey := g.newKey("acme"), g.newKey("other")
	body := func(model, parts, params string) string {
		b := `{"model":"` + model + `","input":{"messages":[{"role":"user","content":[` + parts + `]}]}`
		if params != "" {
			b += `,"parameters":` + params
		}
		return b + `,"callback_url":"` + sink.URL + `/i"}`
	}
	text := `{"text":"a red fox in snow"}`
	imageRefusals(t, g, key, []*fakeupstream.Server{fake, broken, short}, [][2]string{
		{body("qwen-image", `{"text":"`+strings.Repeat(" fox", 1301)+`"}`, ""), "input.messages[0].content[0].text is 1301 tokens (o200k tokenizer); I2 takes at most 1300"},
		{body("qwen-image", text, `{"n":2}`), "parameters.n 2 is not allowed: I2 (Qwen-Image) makes one image a request; use 1"},
		{body("qwen-image-pro", text, `{"size":"1024*1024"}`), `parameters.size "1024*1024" is not allowed: I2 takes 1664*928, 1472*1104, 1328*1328, 1104*1472 or 928*1664`},
		{body("qwen-image", text, `{"enable_sequential":true}`), "parameters.enable_sequential is for I2b (Wan image) only"},
		{body("wan-image", text, `{"negative_prompt":"blur"}`), "parameters.negative_prompt is for I2 (Qwen-Image) only"},
		{body("wan-image", text, `{"prompt_extend":true}`), "parameters.prompt_extend is for I2 (Qwen-Image) only"},
		{body("wan-image", `{"text":"`+strings.Repeat("é", 5001)+`"}`, ""), "is 5001 characters; I2b takes at most 5000"},
		{body("wan-image", text, `{"n":5}`), "parameters.n 5 is out of range: 1 to 4 (1 to 12 with enable_sequential: true)"},
		{body("wan-image", text, `{"n":13,"enable_sequential":true}`), "parameters.n 13 is out of range: 1 to 12 with enable_sequential"},
		{body("wan-image", text, `{"size":"4K"}`), `parameters.size "4K" is not allowed: 4K is for the pro variant`},
		{body("wan-image-pro", text+`,{"image":"https://example.com/ref.png"}`, `{"size":"4K"}`), "4K is for text-to-image; this request has an image part"},
		{body("wan-image-pro", text, `{"size":"4K","enable_sequential":true}`), "DashScope makes no 4K image sets"},
		{body("wan-image", text, `{"size":"4096*500"}`), "its aspect ratio must be between 1:8 and 8:1"},
		{body("wan-image", text, `{"size":"3000*3000"}`), `parameters.size "3000*3000" is 9000000 pixels; I2b takes 768*768 to 2048*2048`},
		{body("wan-image", text, `{"color_palette":[{"hex":"#112233","ratio":"33.33%"},{"hex":"#445566","ratio":"33.33%"},{"hex":"#778899","ratio":"33.33%"}]}`), "parameters.color_palette ratios sum to 99.99%; they must sum to exactly 100.00%"},
		{body("wan-image", text, `{"color_palette":[{"hex":"#112233","ratio":"50%"},{"hex":"#445566","ratio":"50%"}]}`), "parameters.color_palette has 2 colors; it takes 3 to 10"},
		{body("wan-image", text, `{"color_palette":[{"hex":"blue","ratio":"50%"},{"hex":"#445566","ratio":"25%"},{"hex":"#778899","ratio":"25%"}]}`), `parameters.color_palette[0].hex "blue" is not allowed: a color as #RRGGBB`},
		{body("wan-image", text, `{"enable_sequential":true,"thinking_mode":"yes"}`), `parameters.thinking_mode must be true or false, not a string (got "yes")`},
		{body("wan-image", text, `{"enable_sequential":true,"color_palette":[]}`), "parameters.color_palette has 0 colors; it takes 3 to 10"},
		{body("wan-image", text, `{"seed":2147483648}`), "parameters.seed 2147483648 is out of range: an integer from 0 to 2147483647"},
		{body("qwen-image", text, `{"watermark":"no"}`), `parameters.watermark must be true or false, not a string (got "no")`},
		{body("wan-image", text+`,{"image":"ftp://example.com/ref.png"}`, ""), "input.messages[0].content[1].image must be an http or https URL with a host, or a base64 data URL"},
		{body("wan-image", text+`,{"image":"data:image/png;base64,R0lGODlhAQABAAAAACw="}`, ""), "input.messages[0].content[1].image is not a JPG, JPEG, PNG, BMP or WebP image"},
		{body("qwen-image-pro", text+`,{"image":"`+pngData(300, 400)+`"}`, ""), "input.messages[0].content[1].image is 300x400; its width and height must each be 384 to 3072 px"},
		{body("qwen-image", `{"text":"a"},{"text":"b"}`, ""), "input.messages[0].content has 2 text parts; DashScope takes exactly one"},
		{`{"model":"wan-image","input":{"messages":[{"role":"assistant","content":[{"text":"a"}]}]}}`, `input.messages[0].role "assistant" is not allowed`},
		{`{"model":"wan-image","input":{"messages":[]}}`, "input.messages must be an array of exactly one user message"},
		{`{"model":"wan-image","input":{"prompt":"a fox"}}`, `input does not take field "prompt"; it takes messages`},
		{`{"model":"wan-image","prompt":"a fox"}`, `I2b does not take field "prompt"; its fields are input, parameters`},
	})

	// Created together, then followed: I2 standard (async; the first provider fails its create),
	// I2 pro (sync), I2b standard, an I2b pro sequential set, I2b pro 4K, a failing one, a short-lived one.
	broken.Script(fakeupstream.Fault{Status: 429})
	create := func(b string) map[string]any {
		t.Helper()
		code, obj := g.do("POST", key, "/images", b)
		if code != 200 || obj["object"] != "image" {
			t.Fatalf("create %.100s: %d %v", b, code, obj)
		}
		return obj
	}
	qwen := create(body("qwen-image", text, `{"size":"1664*928","negative_prompt":"blur","prompt_extend":false,"seed":7}`))
	if qwen["status"] != "queued" || qwen["provider"] != "ds" || broken.RequestCount() != 1 {
		t.Fatalf("qwen-image: %v (the first provider saw %d requests)", qwen, broken.RequestCount())
	}
	b, h := lastSent(fake, "/api/v1/services/aigc/text2image/image-synthesis")
	if in, _ := b["input"].(map[string]any); h.Get("X-Dashscope-Async") != "enable" || b["model"] != "qwen-image-plus" || in["prompt"] != "a red fox in snow" || in["messages"] != nil ||
		b["parameters"].(map[string]any)["negative_prompt"] != "blur" || b["callback_url"] != nil {
		t.Fatalf("text2image got %v (async %q)", b, h.Get("X-Dashscope-Async"))
	}
	pro := create(body("qwen-image-pro", text, `{"size":"1328*1328","watermark":false}`))
	if pro["status"] != "completed" || pro["cost"] != "0.075" || len(imagesOf(pro)) != 1 || pro["provider_status"] != "SUCCEEDED" {
		t.Fatalf("qwen-image-pro, answered at once: %v", pro)
	}
	if b, h := lastSent(fake, "/api/v1/services/aigc/multimodal-generation/generation"); h.Get("X-Dashscope-Async") != "" || b["model"] != "qwen-image-max" || b["input"].(map[string]any)["messages"] == nil {
		t.Fatalf("sync got %v (async %q)", b, h.Get("X-Dashscope-Async"))
	}
	palette := `[{"hex":"#1A2B3C","ratio":"33.33%"},{"hex":"#4D5E6F","ratio":"33.33%"},{"hex":"#A0B0C0","ratio":"33.34%"}]`
	wan := create(body("wan-image", text+`,{"image":"`+pngData(400, 300)+`"}`, `{"n":2,"size":"1920*1080","color_palette":`+palette+`,"thinking_mode":true}`))
	set := create(body("wan-image-pro", `{"text":"a four-panel comic of a fox"}`, `{"enable_sequential":true,"n":4,"size":"2K"}`))
	if b, h := lastSent(fake, "/api/v1/services/aigc/image-generation/generation"); h.Get("X-Dashscope-Async") != "enable" || b["model"] != "wan2.7-image-pro" ||
		b["parameters"].(map[string]any)["n"] != float64(4) || b["callback_url"] != nil {
		t.Fatalf("image-generation got %v", b)
	}
	big := create(body("wan-image-pro", text, `{"size":"4K","watermark":true}`))
	failing := create(body("wan-image", `{"text":"a fox #policy-output"}`, ""))
	if code, obj := g.do("GET", otherKey, "/images/"+set["id"].(string), ""); code != 404 {
		t.Fatalf("another account: %d %v", code, obj)
	}

	for _, c := range []struct {
		obj    map[string]any
		images int
		cost   string
	}{{qwen, 1, "0.032"}, {wan, 2, "0.061"}, {set, 3, "0.226"}, {big, 1, "0.076"}} {
		done := g.waitImage(key, c.obj["id"].(string))
		images := imagesOf(done)
		if done["status"] != "completed" || len(images) != c.images || done["cost"] != c.cost || done["provider_status"] != "SUCCEEDED" {
			t.Errorf("%s: %v; want %d images at %s", c.obj["model"], done, c.images, c.cost)
			continue
		}
		for _, im := range images {
			if u, _ := im["url"].(string); im["expires_at"] == nil || im["mime_type"] != "image/png" || fetchImage(t, u) != 200 {
				t.Errorf("%s image %v", c.obj["model"], im)
			}
		}
	}
	done := g.waitImage(key, failing["id"].(string))
	if e, _ := done["error"].(map[string]any); done["status"] != "failed" || e["code"] != "content_filter" || done["cost"] != nil || len(imagesOf(done)) != 0 {
		t.Fatalf("failed task %v", done)
	}
	// The short-lived URLs: once past their signed expiry the gateway withholds them.
	brief := create(body("wan-image-short", text, ""))
	obj := g.waitImage(key, brief["id"].(string))
	url, _ := imagesOf(obj)[0]["url"].(string)
	exp, _ := obj["expires_at"].(float64)
	if obj["cost"] != "0.03" || url == "" || time.Until(time.Unix(int64(exp), 0)) > 5*time.Second || fetchImage(t, url) != 200 {
		t.Fatalf("short-lived image %v", obj)
	}
	time.Sleep(time.Until(time.Unix(int64(exp)+1, 0)))
	_, obj = g.do("GET", key, "/images/"+brief["id"].(string), "")
	if im := imagesOf(obj)[0]; im["expired"] != true || im["url"] != nil || fetchImage(t, url) != 403 {
		t.Fatalf("expired image %v", obj)
	}

	// 0.032 + 0.075 + 0.061 + 0.226 (three images DashScope counted, not the four asked) + 0.076 + 0.03
	recs := g.waitRecords("acme", 6)
	sum := decimal.Zero
	for _, r := range recs {
		sum = sum.Add(r.Cost)
	}
	if !sum.Equal(decimal.RequireFromString("0.5")) {
		t.Fatalf("usage records %+v sum to %s, want 0.5", recs, sum)
	}
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("9.5")) {
		t.Fatalf("balance %s, want 9.5", b)
	}

	// Callbacks: every task's last one says how it ended (the synchronous one too), all signed.
	for id, want := range map[string]string{qwen["id"].(string): "completed", pro["id"].(string): "completed", set["id"].(string): "completed", failing["id"].(string): "failed"} {
		waitFor(t, "the callback of "+id, 20*time.Second, func() bool {
			s := sink.statuses(id)
			return len(s) > 0 && s[len(s)-1] == want
		})
	}
	sink.verify(t, g.callbackSecret("acme"))

	// Refusals at the provider: content policy is the client's 400, a provider that refuses the
	// create leaves no provider to fall back to (503); neither bills anything.
	code, obj := g.do("POST", key, "/images", body("wan-image", `{"text":"a fox #policy"}`, ""))
	if e, _ := obj["error"].(map[string]any); code != 400 || e["code"] != "content_filter" {
		t.Fatalf("policy: %d %v", code, obj)
	}
	code, obj = g.do("POST", key, "/images", body("wan-image", `{"text":"a fox #create-error"}`, ""))
	if e, _ := obj["error"].(map[string]any); code != 503 || e["code"] != "upstream_unavailable" {
		t.Fatalf("refused create: %d %v", code, obj)
	}
	if b := g.balance("acme"); !b.Equal(decimal.RequireFromString("9.5")) || len(g.records("account=acme")) != 6 {
		t.Fatalf("after refusals: balance %s", b)
	}
}

// pngData is a data URL of a w x h PNG (the gateway decodes its header: format and size).
func pngData(w, h int) string {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)))
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}
