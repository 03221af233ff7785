package task

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/gif"
	"strings"
	"testing"
	"time"

	"golang.org/x/image/bmp"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

var (
	qwenStd = &ir.Model{ID: "qwen-image", Family: "I2", Variant: "standard"}
	qwenPro = &ir.Model{ID: "qwen-image-max", Family: "I2", Variant: "pro"}
	wanStd  = &ir.Model{ID: "wan-image", Family: "I2b", Variant: "standard"}
	wanPro  = &ir.Model{ID: "wan-image-pro", Family: "I2b", Variant: "pro"}
)

// dsBody is an I2/I2b body: the message's content parts and the parameters (each JSON).
func dsBody(parts, params string) string {
	b := `{"model":"m","input":{"messages":[{"role":"user","content":[` + parts + `]}]}`
	if params != "" {
		b += `,"parameters":` + params
	}
	return b + "}"
}

func encoded(w, h int, format string) string {
	var b bytes.Buffer
	img := image.NewGray(image.Rect(0, 0, w, h))
	switch format {
	case "gif":
		_ = gif.Encode(&b, img, nil)
	case "bmp":
		_ = bmp.Encode(&b, img)
	}
	return "data:image/" + format + ";base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// promptOfTokens is a text the gateway's tokenizer counts as exactly n tokens.
func promptOfTokens(t *testing.T, n int) string {
	s := strings.Repeat(" fox", n)
	if got := billing.CountText(s); got != n {
		t.Fatalf("%d repeats count %d tokens", n, got)
	}
	return s
}

// TestDashScopeImageValidation: every rule of docs/media.md#image-families for I2 and I2b (and the
// provider's limits where the spec is silent), per variant: each refusal names the field, the value
// and what is allowed; accepted requests give the most images they can make.
func TestDashScopeImageValidation(t *testing.T) {
	text := `{"text":"a red fox in snow"}`
	png := func(w, h int) string { return `{"image":"` + pngDataURL(w, h, "image/png") + `"}` }
	palette := func(ratios ...string) string {
		var e []string
		for i, r := range ratios {
			e = append(e, `{"hex":"#`+strings.Repeat(string("ABCDEF"[i%6]), 6)+`","ratio":"`+r+`"}`)
		}
		return `{"color_palette":[` + strings.Join(e, ",") + `]}`
	}
	for _, c := range []struct {
		m          *ir.Model
		body, want string
	}{
		// I2 (Qwen-Image)
		{qwenStd, dsBody(text, ""), "max 1"},
		{qwenPro, dsBody(text, `{"n":1,"size":"1664*928","seed":0,"watermark":true,"negative_prompt":"blur","prompt_extend":false}`), "max 1"},
		{qwenStd, dsBody(`{"text":"`+promptOfTokens(t, 1300)+`"}`, ""), "max 1"},
		{qwenStd, dsBody(`{"text":"`+promptOfTokens(t, 1301)+`"}`, ""), "input.messages[0].content[0].text is 1301 tokens (o200k tokenizer); I2 takes at most 1300"},
		{qwenStd, dsBody(`{"text":"`+strings.Repeat("x", 1300*128+1)+`"}`, ""), "over I2's 1300 tokens"},
		{qwenStd, dsBody(text, `{"n":2}`), "parameters.n 2 is not allowed: I2 (Qwen-Image) makes one image a request; use 1"},
		{qwenStd, dsBody(text, `{"n":0}`), "parameters.n 0 is not allowed"},
		{qwenStd, dsBody(text, `{"size":"1024*1024"}`), `parameters.size "1024*1024" is not allowed: I2 takes 1664*928, 1472*1104, 1328*1328, 1104*1472 or 928*1664`},
		{qwenStd, dsBody(text, `{"size":"2K"}`), `parameters.size "2K" is not allowed`},
		{qwenStd, dsBody(text, `{"size":1328}`), "parameters.size must be a string"},
		{qwenStd, dsBody(text, `{"enable_sequential":true}`), "parameters.enable_sequential is for I2b (Wan image) only; I2 (Qwen-Image) takes n, size, seed, watermark, negative_prompt, prompt_extend"},
		{qwenStd, dsBody(text, `{"thinking_mode":true}`), "parameters.thinking_mode is for I2b (Wan image) only"},
		{qwenStd, dsBody(text, `{"color_palette":[]}`), "parameters.color_palette is for I2b (Wan image) only"},
		{qwenStd, dsBody(text, `{"negative_prompt":"`+strings.Repeat("a", 501)+`"}`), "parameters.negative_prompt is 501 characters; DashScope takes at most 500"},
		{qwenStd, dsBody(text, `{"negative_prompt":5}`), "parameters.negative_prompt must be a string"},
		{qwenStd, dsBody(text, `{"prompt_extend":"yes"}`), `parameters.prompt_extend must be true or false, not a string (got "yes")`},
		{qwenPro, dsBody(text+","+png(400, 400), ""), "max 1"},
		{qwenPro, dsBody(text+`,{"image":"`+encoded(400, 500, "gif")+`"}`, ""), "max 1"},
		{qwenPro, dsBody(text+","+png(300, 400), ""), "input.messages[0].content[1].image is 300x400; its width and height must each be 384 to 3072 px"},
		{qwenPro, dsBody(text+","+png(400, 400)+","+png(400, 400)+","+png(400, 400)+","+png(400, 400), ""), "4 image parts; I2 (Qwen-Image) takes at most 3"},
		// I2b (Wan image)
		{wanStd, dsBody(text, ""), "max 1"},
		{wanStd, dsBody(text, `{"n":4,"size":"2K","seed":2147483647,"watermark":false,"thinking_mode":true}`), "max 4"},
		{wanStd, dsBody(text, `{"n":5}`), "parameters.n 5 is out of range: 1 to 4 (1 to 12 with enable_sequential: true)"},
		{wanStd, dsBody(text, `{"n":0}`), "parameters.n 0 is out of range"},
		{wanStd, dsBody(text, `{"n":12,"enable_sequential":true}`), "max 12"},
		{wanStd, dsBody(text, `{"enable_sequential":true}`), "max 12"},
		{wanStd, dsBody(text, `{"enable_sequential":false,"n":3}`), "max 3"},
		{wanStd, dsBody(text, `{"n":13,"enable_sequential":true}`), "parameters.n 13 is out of range: 1 to 12 with enable_sequential"},
		{wanStd, dsBody(text, `{"n":"2"}`), `parameters.n must be an integer, not a string (got "2")`},
		{wanStd, dsBody(text, `{"enable_sequential":true,"thinking_mode":"no"}`), `parameters.thinking_mode must be true or false, not a string (got "no")`},
		{wanStd, dsBody(text, `{"enable_sequential":true,"color_palette":[]}`), "parameters.color_palette has 0 colors; it takes 3 to 10"},
		{wanStd, dsBody(`{"text":"`+strings.Repeat("é", 5000)+`"}`, ""), "max 1"},
		{wanStd, dsBody(`{"text":"`+strings.Repeat("é", 5001)+`"}`, ""), "input.messages[0].content[0].text is 5001 characters; I2b takes at most 5000"},
		{wanStd, dsBody(text, `{"negative_prompt":"blur"}`), "parameters.negative_prompt is for I2 (Qwen-Image) only"},
		{wanStd, dsBody(text, `{"prompt_extend":true}`), "parameters.prompt_extend is for I2 (Qwen-Image) only"},
		{wanStd, dsBody(text, `{"style":"<auto>"}`), `parameters does not take field "style"; I2b (Wan image) takes n, size, seed, watermark, enable_sequential, thinking_mode, color_palette`},
		{wanStd, dsBody(text, `{"size":"1K"}`), "max 1"},
		{wanStd, dsBody(text, `{"size":"4K"}`), `parameters.size "4K" is not allowed: 4K is for the pro variant; wan-image is the standard variant; use 1K, 2K or W*H`},
		{wanPro, dsBody(text, `{"size":"4K"}`), "max 1"},
		{wanPro, dsBody(text+","+png(400, 400), `{"size":"4K"}`), `parameters.size "4K" is not allowed: 4K is for text-to-image; this request has an image part`},
		{wanPro, dsBody(text, `{"size":"4K","enable_sequential":true}`), "DashScope makes no 4K image sets"},
		{wanStd, dsBody(text, `{"size":"1920*1080"}`), "max 1"},
		{wanStd, dsBody(text, `{"size":"2048*2048"}`), "max 1"},
		{wanStd, dsBody(text, `{"size":"2048*2049"}`), `parameters.size "2048*2049" is 4196352 pixels; I2b takes 768*768 to 2048*2048`},
		{wanPro, dsBody(text, `{"size":"4096*4096"}`), "max 1"},
		{wanPro, dsBody(text, `{"size":"4096*4097"}`), "I2b takes 768*768 to 4096*4096"},
		{wanPro, dsBody(text+","+png(400, 400), `{"size":"4096*4096"}`), "I2b takes 768*768 to 2048*2048"},
		{wanStd, dsBody(text, `{"size":"767*768"}`), "589056 pixels"},
		{wanStd, dsBody(text, `{"size":"4096*500"}`), `parameters.size "4096*500" is out of range: its aspect ratio must be between 1:8 and 8:1`},
		{wanStd, dsBody(text, `{"size":"1920x1080"}`), `parameters.size "1920x1080" is not allowed: use 1K, 2K, 4K (pro text-to-image) or <width>*<height>`},
		{wanStd, dsBody(text, `{"size":"0*1080"}`), `parameters.size "0*1080" is not allowed`},
		{wanStd, dsBody(text, palette("25.00%", "25.00%", "50.00%")), "max 1"},
		{wanStd, dsBody(text, palette("33.33%", "33.33%", "33.34%")), "max 1"},
		{wanStd, dsBody(text, palette("10%", "20.5%", "69.50%")), "max 1"},
		{wanStd, dsBody(text, palette("10.00%", "10.00%", "10.00%", "10.00%", "10.00%", "10.00%", "10.00%", "10.00%", "10.00%", "10.00%")), "max 1"},
		{wanStd, dsBody(text, palette("33.33%", "33.33%", "33.33%")), "parameters.color_palette ratios sum to 99.99%; they must sum to exactly 100.00%"},
		{wanStd, dsBody(text, palette("50.00%", "50.00%", "0.01%")), "ratios sum to 100.01%"},
		{wanStd, dsBody(text, palette("50.00%", "50.00%")), "parameters.color_palette has 2 colors; it takes 3 to 10"},
		{wanStd, dsBody(text, palette("9.00%", "9.00%", "9.00%", "9.00%", "9.00%", "9.00%", "9.00%", "9.00%", "9.00%", "9.00%", "10.00%")), "has 11 colors"},
		{wanStd, dsBody(text, palette("50%", "50.000%", "0%")), `parameters.color_palette[1].ratio "50.000%" is not allowed: a percentage with up to two decimals, such as "25.00%"`},
		{wanStd, dsBody(text, palette("50%", "50", "0%")), `parameters.color_palette[1].ratio "50" is not allowed`},
		{wanStd, dsBody(text, palette("100.00%", "0.00%", "0%")), `parameters.color_palette[1].ratio "0.00%" is out of range: above 0% and at most 100%`},
		{wanStd, dsBody(text, palette("100.01%", "1%", "1%")), `ratio "100.01%" is out of range`},
		{wanStd, dsBody(text, `{"color_palette":[{"hex":"#FFF","ratio":"50%"},{"hex":"#000000","ratio":"25%"},{"hex":"#111111","ratio":"25%"}]}`), `parameters.color_palette[0].hex "#FFF" is not allowed: a color as #RRGGBB`},
		{wanStd, dsBody(text, `{"color_palette":[{"hex":"#GG0000","ratio":"50%"},{"hex":"#000000","ratio":"25%"},{"hex":"#111111","ratio":"25%"}]}`), `parameters.color_palette[0].hex "#GG0000" is not allowed`},
		{wanStd, dsBody(text, `{"color_palette":[{"hex":"#AA0000","ratio":"50%","name":"red"},{"hex":"#000000","ratio":"25%"},{"hex":"#111111","ratio":"25%"}]}`), `parameters.color_palette[0] does not take field "name"; it takes hex, ratio`},
		{wanStd, dsBody(text, `{"color_palette":[{"hex":"#AA0000","ratio":50},{"hex":"#000000","ratio":"25%"},{"hex":"#111111","ratio":"25%"}]}`), `parameters.color_palette[0].ratio must be a string, not a number (got 50)`},
		{wanStd, dsBody(text, `{"color_palette":{"hex":"#AA0000"}}`), "parameters.color_palette must be an array of {hex, ratio}"},
		{wanStd, dsBody(text+","+png(400, 400), ""), "max 1"},
		{wanStd, dsBody(text+`,{"image":"`+encoded(300, 250, "bmp")+`"}`, ""), "max 1"},
		{wanStd, dsBody(text+`,{"image":"`+encoded(300, 250, "gif")+`"}`, ""), `input.messages[0].content[1].image is not a JPG, JPEG, PNG, BMP or WebP image (its bytes say "gif")`},
		{wanStd, dsBody(text+","+png(200, 400), ""), "is 200x400; its width and height must each be 240 to 8000 px"},
		{wanStd, dsBody(text+","+png(1000, 239), ""), "is 1000x239; its width and height must each be 240"},
		{wanStd, dsBody(text+","+png(2000, 240), ""), "is 2000x240; its aspect ratio must be between 1:8 and 8:1"},
		{wanStd, dsBody(text+strings.Repeat(","+png(300, 300), 10), ""), "10 image parts; I2b (Wan image) takes at most 9"},
		// Both: the message, the parts, seed, watermark, images as URLs.
		{wanStd, dsBody(text+`,{"image":"https://example.com/ref.png"}`, ""), "max 1"},
		{qwenStd, dsBody(text+`,{"image":"ftp://example.com/ref.png"}`, ""), `input.messages[0].content[1].image must be an http or https URL with a host, or a base64 data URL`},
		{wanStd, dsBody(text+`,{"image":"data:image/png;base64,!!!"}`, ""), "input.messages[0].content[1].image is not valid base64"},
		{wanStd, dsBody(text+`,{"image":"data:image/png;base64,R0lGODlhAQABAAAAACw="}`, ""), "is not a JPG"},
		{qwenStd, dsBody(text, `{"seed":-1}`), "parameters.seed -1 is out of range: an integer from 0 to 2147483647"},
		{wanPro, dsBody(text, `{"seed":2147483648}`), "parameters.seed 2147483648 is out of range"},
		{wanPro, dsBody(text, `{"seed":"7"}`), `parameters.seed must be an integer, not a string (got "7")`},
		{qwenPro, dsBody(text, `{"watermark":1}`), "parameters.watermark must be true or false, not a number (got 1)"},
		{wanPro, dsBody(text, `{"enable_sequential":"true"}`), "parameters.enable_sequential must be true or false"},
		{wanStd, dsBody(text, `"n"`), `parameters must be an object, not a string (got "n")`},
		{wanStd, `{"input":{"prompt":"a fox"}}`, `input does not take field "prompt"; it takes messages`},
		{wanStd, `{"prompt":"a fox"}`, `I2b does not take field "prompt"; its fields are input, parameters`},
		{qwenStd, `{"input":{"messages":[]}}`, "input.messages must be an array of exactly one user message, not 0 messages"},
		{qwenStd, `{"parameters":{}}`, "input is required"},
		{qwenStd, `{"input":[]}`, "input must be an object, not an array (got [])"},
		{qwenStd, `{"input":{"messages":[{"role":"user","content":[{"text":"a"}]},{"role":"user","content":[{"text":"b"}]}]}}`, "exactly one user message"},
		{qwenStd, `{"input":{"messages":[{"role":"system","content":[{"text":"a"}]}]}}`, `input.messages[0].role "system" is not allowed: the one message is the user's`},
		{qwenStd, `{"input":{"messages":[{"content":[{"text":"a"}]}]}}`, "input.messages[0].role is required: the one message is the user's"},
		{qwenStd, `{"input":{"messages":[{"role":"user","content":"a fox"}]}}`, "input.messages[0].content must be a non-empty array of {text} and {image} parts"},
		{qwenStd, `{"input":{"messages":[{"role":"user","content":[{"text":"a"}],"name":"x"}]}}`, `input.messages[0] does not take field "name"; it takes role, content`},
		{qwenStd, dsBody(`{"text":"a","image":"https://x/a.png"}`, ""), `input.messages[0].content[0] must be {"text": "..."} or {"image": "..."}`},
		{qwenStd, dsBody(`{"type":"text","text":"a"}`, ""), `input.messages[0].content[0] does not take field "type"`},
		{qwenStd, dsBody(`{"text":null}`, ""), `input.messages[0].content[0] must be {"text": "..."}`},
		{qwenStd, dsBody(`{"text":"a"},{"text":"b"}`, ""), "input.messages[0].content has 2 text parts; DashScope takes exactly one"},
		{wanStd, dsBody(`{"image":"https://x/a.png"}`, ""), "input.messages[0].content has 0 text parts"},
		{wanStd, dsBody(`{"text":"  "}`, ""), "input.messages[0].content[0].text is empty: the prompt is required"},
		{wanStd, dsBody(`{"text":7}`, ""), "input.messages[0].content[0].text must be a string"},
		{wanStd, dsBody(`{"image":7},{"text":"a"}`, ""), "input.messages[0].content[0].image must be a string"},
		{wanStd, `{"input":{"messages":[{"role":"user","content":[{"text":"a"}]}]},"callback_url":5}`, "callback_url must be a string"},
	} {
		tr, err := dashscopeImage{family: c.m.Family}.Validate(c.m, taskReq(t, c.body))
		switch {
		case strings.HasPrefix(c.want, "max "):
			if err != nil || "max "+itoa(tr.MaxImages) != c.want {
				t.Errorf("%s %.120s: %v, max %d; want %s", c.m.ID, c.body, err, tr.MaxImages, c.want)
			}
		case err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s %.120s:\n got %v\nwant %q", c.m.ID, c.body, err, c.want)
		}
	}
}

// TestDashScopeImageCreate: each family and variant goes to the endpoint DashScope offers its
// models: Qwen-Image standard's asynchronous text2image API (the text part as input.prompt),
// Qwen-Image pro and any Qwen-Image request with an image to the synchronous messages API, Wan
// image to the asynchronous messages API; the gateway's own fields are never sent.
func TestDashScopeImageCreate(t *testing.T) {
	p := &ir.Provider{Name: "ds", APIKey: "sk-ds"}
	text := dsBody(`{"text":"a \"red\" fox"}`, `{"size":"1328*1328","negative_prompt":"blur"}`)
	text = strings.Replace(text, `{"model":"m",`, `{"model":"m","callback_url":"https://h/x","route":{"provider":"ds"},`, 1)
	withImage := dsBody(`{"image":"https://x/a.png"},{"text":"make it blue"}`, "")
	for _, c := range []struct {
		m           *ir.Model
		model, body string
		path, async string
		sent        string
	}{
		{qwenStd, "qwen-image-plus", text, "/api/v1/services/aigc/text2image/image-synthesis", "enable",
			`{"input":{"prompt":"a \"red\" fox"},"model":"qwen-image-plus","parameters":{"size":"1328*1328","negative_prompt":"blur"}}`},
		{qwenStd, "qwen-image-plus", withImage, "/api/v1/services/aigc/multimodal-generation/generation", "",
			`{"input":{"messages":[{"role":"user","content":[{"image":"https://x/a.png"},{"text":"make it blue"}]}]},"model":"qwen-image-plus"}`},
		{qwenPro, "qwen-image-max", text, "/api/v1/services/aigc/multimodal-generation/generation", "",
			`{"input":{"messages":[{"role":"user","content":[{"text":"a \"red\" fox"}]}]},"model":"qwen-image-max","parameters":{"size":"1328*1328","negative_prompt":"blur"}}`},
		{wanStd, "wan2.7-image", withImage, "/api/v1/services/aigc/image-generation/generation", "enable",
			`{"input":{"messages":[{"role":"user","content":[{"image":"https://x/a.png"},{"text":"make it blue"}]}]},"model":"wan2.7-image"}`},
		{wanPro, "wan2.7-image-pro", dsBody(`{"text":"a set"}`, `{"enable_sequential":true,"n":4}`), "/api/v1/services/aigc/image-generation/generation", "enable",
			`{"input":{"messages":[{"role":"user","content":[{"text":"a set"}]}]},"model":"wan2.7-image-pro","parameters":{"enable_sequential":true,"n":4}}`},
	} {
		up, err := dashscopeImage{family: c.m.Family}.Create(p, c.m, c.model, taskReq(t, c.body))
		if err != nil || up.Path != c.path || up.Method != "" || up.Headers["x-dashscope-async"] != c.async || up.Headers["authorization"] != "Bearer sk-ds" || string(up.Body) != c.sent {
			t.Errorf("%s: %+v\n%s\nwant %s %s\n%s (%v)", c.m.ID, up, up.Body, c.path, c.async, c.sent, err)
		}
	}
	q, err := dashscopeImage{family: "I2b"}.Query(p, wanStd, "0385dc79-5ff8")
	if err != nil || q.Method != "GET" || q.Path != "/api/v1/tasks/0385dc79-5ff8" || q.Headers["authorization"] != "Bearer sk-ds" {
		t.Fatalf("query %+v %v", q, err)
	}
}

// TestDashScopeImageAnswers: create answers (a task id, or the finished images of the
// synchronous API), task answers of both result shapes, the URLs' expiry from their signature or
// 24 h after the end, usage.image_count billed, and failures.
func TestDashScopeImageAnswers(t *testing.T) {
	d := dashscopeImage{family: "I2b"}
	c, err := d.Created(200, []byte(`{"request_id":"r","output":{"task_id":"8811b4a4","task_status":"PENDING"}}`))
	if err != nil || c.TaskID != "8811b4a4" || c.Done != nil {
		t.Fatalf("async create %+v %v", c, err)
	}
	c, err = d.Created(200, []byte(`{"output":{"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":[{"image":"https://dashscope-result-sgp.oss-ap-southeast-1.aliyuncs.com/a.png?Expires=1800000000&OSSAccessKeyId=x&Signature=y"}]}}]},"usage":{"width":1328,"height":1328,"image_count":1},"request_id":"r"}`))
	if err != nil || c.TaskID != "" || c.Done == nil || c.Done.Status != Completed || len(c.Done.Images) != 1 || c.Done.BilledImages != 1 {
		t.Fatalf("sync create %+v %v", c, err)
	}
	if im := c.Done.Images[0]; im.ExpiresAt.Unix() != 1800000000 || im.Width != 1328 || im.Height != 1328 || im.MIMEType != "image/png" {
		t.Fatalf("sync image %+v", im)
	}
	c, err = d.Created(200, []byte(`{"output":{"choices":[{"finish_reason":"content_filter","message":{"content":[]}}]},"usage":{"image_count":0}}`))
	if err != nil || c.Done == nil || c.Done.Status != Failed || c.Done.Error.Code != "no_image" || !strings.Contains(c.Done.Error.Message, "finish_reason content_filter") {
		t.Fatalf("sync create without an image %+v %v", c.Done, err)
	}
	var te *Error
	for body, want := range map[string]string{
		`{"code":"DataInspectionFailed","message":"Input data may contain inappropriate content.","request_id":"r"}`: "content_filter",
		`{"code":"InvalidParameter","message":"The size is not match the allowed size","request_id":"r"}`:            "invalid_request",
		`{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded","request_id":"r"}`:                  "provider_rate_limited",
		`{"code":"InvalidApiKey","message":"Invalid API-key provided.","request_id":"r"}`:                            "provider_auth_failed",
		`{"code":"AccessDenied","message":"current user api does not support synchronous calls"}`:                    "provider_auth_failed",
	} {
		status := map[string]int{"content_filter": 400, "invalid_request": 400, "provider_rate_limited": 429, "provider_auth_failed": 401}[want]
		if strings.Contains(body, "AccessDenied") {
			status = 403
		}
		if _, err := d.Created(status, []byte(body)); !errors.As(err, &te) || te.Code != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
	if _, err := d.Created(200, []byte(`{"output":{}}`)); !errors.As(err, &te) || te.Code != "upstream_error" {
		t.Fatalf("an empty answer: %v", err)
	}

	// Wan: a set of three, billed on image_count; the URLs' OSS V4 signature says when they expire.
	st, err := d.Queried(200, []byte(`{"request_id":"r","output":{"task_id":"t","task_status":"SUCCEEDED","submit_time":"2026-11-20 10:00:00.000","end_time":"2026-11-20 10:01:00.000","finished":true,"choices":[{"finish_reason":"stop","message":{"role":"assistant","content":[{"image":"https://r.example/1.png?x-oss-date=20261120T100100Z&x-oss-expires=86400&x-oss-signature=s","type":"image"},{"image":"https://r.example/2.png?x-oss-date=20261120T100100Z&x-oss-expires=86400","type":"image"},{"image":"https://r.example/3.jpg","type":"image"}]}}]},"usage":{"image_count":3,"size":"2048*1152"}}`))
	if err != nil || st.Status != Completed || len(st.Images) != 3 || st.BilledImages != 3 || st.FamilyStatus != "SUCCEEDED" {
		t.Fatalf("set %+v %v", st, err)
	}
	if got := st.Images[0].ExpiresAt.UTC().Format(time.RFC3339); got != "2026-11-21T10:01:00Z" {
		t.Fatalf("signed expiry %s", got)
	}
	if got := st.Images[2].ExpiresAt.Format("2006-01-02 15:04"); got != "2026-11-21 10:01" || st.Images[2].MIMEType != "image/jpeg" || st.Images[2].Width != 2048 || st.Images[2].Height != 1152 {
		t.Fatalf("unsigned image %+v (expiry %s), want 24 h after the end", st.Images[2], got)
	}
	// Qwen-Image's text2image: output.results.
	st, err = dashscopeImage{family: "I2"}.Queried(200, []byte(`{"output":{"task_id":"t","task_status":"SUCCEEDED","end_time":"2026-11-20 10:01:00.000","results":[{"orig_prompt":"a fox","actual_prompt":"a red fox","url":"https://r.example/q.png"}],"task_metrics":{"TOTAL":1,"SUCCEEDED":1,"FAILED":0}},"usage":{"image_count":1}}`))
	if err != nil || st.Status != Completed || len(st.Images) != 1 || st.Images[0].URL != "https://r.example/q.png" || st.BilledImages != 1 {
		t.Fatalf("text2image %+v %v", st, err)
	}
	st, err = d.Queried(200, []byte(`{"output":{"task_status":"SUCCEEDED","results":[{"code":"DataInspectionFailed","message":"Output data may contain inappropriate content."}]},"usage":{"image_count":0}}`))
	if err != nil || st.Status != Failed || st.Error.Code != "no_image" || st.BilledImages != 0 || !strings.Contains(st.Error.Message, "DataInspectionFailed") {
		t.Fatalf("succeeded without an image %+v %v", st, err)
	}
	for body, want := range map[string]string{
		`{"output":{"task_status":"FAILED","code":"DataInspectionFailed","message":"Output data may contain inappropriate content."}}`: "content_filter",
		`{"output":{"task_status":"FAILED","code":"InternalError.Algo","message":"algo failed"}}`:                                      "internalerror.algo",
		`{"output":{"task_status":"CANCELED"}}`: "generation_failed",
	} {
		if st, err := d.Queried(200, []byte(body)); err != nil || st.Status != Failed || st.Error.Code != want || st.Error.Message == "" {
			t.Errorf("%s: %+v %v", body, st, err)
		}
	}
	for body, want := range map[string]Status{`{"output":{"task_status":"PENDING"}}`: Queued, `{"output":{"task_status":"RUNNING"}}`: InProgress} {
		if st, err := d.Queried(200, []byte(body)); err != nil || st.Status != want {
			t.Errorf("%s: %+v %v", body, st, err)
		}
	}
	if _, err := d.Queried(500, []byte(`{"code":"InternalError","message":"x"}`)); !errors.As(err, &te) || te.Code != "upstream_error" {
		t.Fatalf("a 5xx query: %v", err)
	}
	if _, err := d.Queried(200, []byte(`{"output":{"task_status":"SUSPENDED"}}`)); err == nil {
		t.Fatal("an unknown status was read")
	}
}

// dsImageWords are what every I2/I2b refusal names: a field path, or the field list.
var dsImageWords = []string{"input", "parameters", "field", "callback_url"}

func FuzzDashScopeImageValidate(f *testing.F) {
	f.Add(dsBody(`{"text":"a fox"}`, `{"n":4,"size":"2K","color_palette":[{"hex":"#AABBCC","ratio":"50.00%"},{"hex":"#000000","ratio":"25%"},{"hex":"#FFFFFF","ratio":"25.00%"}]}`), true, false)
	f.Add(dsBody(`{"text":"a fox"}`, `{"enable_sequential":true,"n":12}`), true, true)
	f.Add(dsBody(`{"text":"a fox"},{"image":"https://x/a.png"}`, `{"size":"4K"}`), true, true)
	f.Add(dsBody(`{"text":"a fox"}`, `{"n":1,"size":"1328*1328","prompt_extend":true,"negative_prompt":"x","seed":7}`), false, false)
	f.Add(dsBody(`{"text":"a fox"},{"image":"`+pngDataURL(400, 400, "image/png")+`"}`, `{"watermark":true}`), false, true)
	f.Fuzz(func(t *testing.T, body string, wan, pro bool) {
		var r provider.Request
		if json.Unmarshal([]byte(body), &r) != nil {
			return
		}
		m := map[bool]*ir.Model{false: qwenStd, true: qwenPro}[pro]
		if wan {
			m = map[bool]*ir.Model{false: wanStd, true: wanPro}[pro]
		}
		tr, err := dashscopeImage{family: m.Family}.Validate(m, r)
		if err == nil {
			most := map[string]int64{"I2": 1, "I2b": wanMaxSequential}[m.Family]
			if tr.MaxImages < 1 || tr.MaxImages > most || (m.Family == "I2" && tr.MaxImages != 1) {
				t.Fatalf("%s accepted %s with %d images", m.ID, body, tr.MaxImages)
			}
			return
		}
		if !errors.Is(err, provider.ErrBadRequest) || fuzzcheck.Leak(err.Error()) != "" {
			t.Fatalf("%s: a refusal that is not the client's, or in Go's words: %v", body, err)
		}
		if !namesOne(err.Error(), dsImageWords) {
			t.Fatalf("%s: the refusal %q names no field", body, err)
		}
	})
}
