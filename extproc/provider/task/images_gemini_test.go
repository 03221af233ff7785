package task

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/jpeg"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/internal/providertest"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

var i3Models = map[string]*ir.Model{
	"pro":       {ID: "nb-pro", Family: "I3", Variant: "pro"},
	"flash-3.1": {ID: "nb-2", Family: "I3", Variant: "flash-3.1"},
	"flash-2.5": {ID: "nb", Family: "I3", Variant: "flash-2.5"},
}

// Helpers the chat adapter's tests share (providertest).
var (
	b64PNG         = providertest.PNG
	gemImageAnswer = providertest.GeminiImageAnswer
	taskReq        = providertest.Body
)

func b64JPEG(w, h int) string {
	var b bytes.Buffer
	_ = jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)), nil)
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// i3Req builds an I3 body from a prompt and extra top-level JSON members.
func i3Req(extra string) string {
	body := `{"model":"m","contents":[{"role":"user","parts":[{"text":"a red fox"}]}]`
	if extra != "" {
		body += "," + extra
	}
	return body + "}"
}

// TestGeminiImageValidation: every I3 rule of docs/media.md#image-families per variant, refused
// with the field, the value and what is allowed; accepted bodies give the hold's bounds.
func TestGeminiImageValidation(t *testing.T) {
	ar := func(v string) string {
		return `"generationConfig":{"responseFormat":{"image":{"aspectRatio":"` + v + `"}}}`
	}
	size := func(v string) string {
		return `"generationConfig":{"responseFormat":{"image":{"imageSize":"` + v + `"}}}`
	}
	search := `"tools":[{"google_search":{}}]`
	inline := func(mt, data string) string {
		return `{"model":"m","contents":[{"role":"user","parts":[{"text":"edit"},{"inline_data":{"mime_type":"` + mt + `","data":"` + data + `"}}]}]}`
	}
	type c struct {
		body    string
		variant string
		want    string // "" accepted
	}
	cases := []c{
		{i3Req(""), "pro", ""},
		{i3Req(ar("1:1")), "flash-2.5", ""},
		{i3Req(ar("21:9")), "pro", ""},
		{i3Req(ar("8:1")), "flash-3.1", ""},
		{i3Req(ar("8:1")), "pro", `aspectRatio "8:1" is not allowed for nb-pro (variant pro): use one of 1:1, 2:3`},
		{i3Req(ar("1:4")), "flash-2.5", "1:4 is for flash-3.1 models only"},
		{i3Req(ar("7:3")), "flash-3.1", `aspectRatio "7:3" is not allowed`},
		{i3Req(size("4K")), "pro", ""},
		{i3Req(size("512")), "flash-3.1", ""},
		{i3Req(size("512")), "pro", "512 is for flash-3.1 models only"},
		{i3Req(size("1K")), "flash-2.5", "imageSize is not taken by nb (variant flash-2.5)"},
		{i3Req(size("8K")), "flash-3.1", `imageSize "8K" is not allowed for nb-2 (variant flash-3.1): use one of 512, 1K, 2K, 4K`},
		{i3Req(search), "pro", ""},
		{i3Req(search), "flash-3.1", ""},
		{i3Req(search), "flash-2.5", "google_search is for pro and flash-3.1 models"},
		{i3Req(`"tools":[{"google_search":{"x":1}}]`), "pro", "takes no options"},
		{i3Req(`"tools":[{"function_declarations":[]}]`), "pro", `tools[0] does not take field "function_declarations"; its fields are google_search`},
		{i3Req(`"generationConfig":{"responseModalities":["IMAGE"]}`), "pro", ""},
		{i3Req(`"generationConfig":{"responseModalities":["IMAGE","TEXT"]}`), "pro", ""},
		{i3Req(`"generationConfig":{"responseModalities":["TEXT"]}`), "pro", `responseModalities ["TEXT"] is not allowed: use ["TEXT", "IMAGE"]`},
		{i3Req(`"generationConfig":{"responseModalities":"IMAGE"}`), "pro", `must be ["TEXT", "IMAGE"] or ["IMAGE"]`},
		{i3Req(`"generationConfig":{"imageConfig":{}}`), "pro", ""}, // Gemini's name of responseFormat.image
		{i3Req(`"generationConfig":{"thinkingConfig":{}}`), "pro", `generationConfig does not take field "thinkingConfig"; its fields are responseModalities, responseFormat, imageConfig`},
		{i3Req(`"generationConfig":{"responseFormat":{"image":{"quality":1}}}`), "pro", `image does not take field "quality"; its fields are aspectRatio, imageSize`},
		{i3Req(`"generationConfig":{"responseFormat":{"text":{}}}`), "pro", `responseFormat does not take field "text"`},
		{i3Req(`"generationConfig":{"responseFormat":{"image":{"aspectRatio":16}}}`), "pro", "aspectRatio must be a string"},
		{i3Req(`"prompt":"x"`), "pro", `I3 does not take field "prompt"; its fields are contents, generationConfig, tools`},
		{i3Req(`"callback_url":"https://h.example/x"`), "pro", ""},
		{`{"model":"m"}`, "pro", "contents is required"},
		{`{"model":"m","contents":[]}`, "pro", "contents is empty"},
		{`{"model":"m","contents":{}}`, "pro", "contents must be an array"},
		{`{"model":"m","contents":[{"role":"model","parts":[{"text":"x"}]}]}`, "pro", `contents[0].role "model" is not allowed`},
		{`{"model":"m","contents":[{"parts":[{"text":"x"}]}]}`, "pro", ""},
		{`{"model":"m","contents":[{"role":"user"}]}`, "pro", "contents[0].parts is required"},
		{`{"model":"m","contents":[{"role":"user","parts":[]}]}`, "pro", "contents[0].parts is empty"},
		{`{"model":"m","contents":[{"role":"user","parts":[{"text":""}]}]}`, "pro", "contents[0].parts[0].text is empty"},
		{`{"model":"m","contents":[{"role":"user","parts":[{"text":"x","inline_data":{}}]}]}`, "pro", "must have one of text or inline_data"},
		{`{"model":"m","contents":[{"role":"user","parts":[{"inlineDatum":{}}]}]}`, "pro", `parts[0] does not take field "inlineDatum"; its fields are text, inline_data`},
		{`{"model":"m","contents":[{"role":"user","parts":[{"text":7}]}]}`, "pro", "contents[0].parts[0].text must be a string"},
		{`{"model":"m","contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"` + b64PNG(8, 8) + `"}}]}]}`, "pro", "contents has no text part"},
		{inline("image/png", b64PNG(16, 16)), "flash-2.5", ""},
		{inline("image/jpeg", b64JPEG(16, 16)), "flash-2.5", ""},
		{inline("image/jpg", b64JPEG(16, 16)), "flash-2.5", ""},
		{inline("image/jpeg", b64PNG(16, 16)), "flash-2.5", `is not a image/jpeg image (its bytes say "png")`},
		{inline("image/gif", "R0lGODlhAQABAAAAACw="), "flash-2.5", `mime_type "image/gif" is not allowed: Gemini takes images as image/png, image/jpeg, image/webp, image/heic, image/heif`},
		{inline("image/png", "not base64!"), "flash-2.5", "data is not valid base64"},
		{inline("image/png", ""), "flash-2.5", "data is empty"},
		{`{"model":"m","contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/png"}}]}]}`, "flash-2.5", "data is required"},
		{`{"model":"m","contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/png","data":7}}]}]}`, "flash-2.5", "inline_data.data must be a string (the image in base64), not a number (got 7)"},
		{inline("image/png", strings.ReplaceAll(b64PNG(16, 16), "/", `\/`)), "flash-2.5", ""}, // JSON may escape "/"
		{inline("image/png", "AA==AAAA"), "flash-2.5", "data is not valid base64"},
		{inline("image/png", "AAA"), "flash-2.5", "data is not valid base64"},
		{inline("image/heic", base64.StdEncoding.EncodeToString([]byte("\x00\x00\x00\x18ftypheic\x00\x00\x00\x00"))), "pro", ""},
		{inline("image/heif", base64.StdEncoding.EncodeToString([]byte("\x00\x00\x00\x18ftypisom\x00\x00\x00\x00"))), "pro", `its bytes say "unknown"`},
	}
	for _, tc := range cases {
		m := i3Models[tc.variant]
		tr, err := geminiImage{}.Validate(m, taskReq(t, tc.body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %.120s: %v", tc.variant, tc.body, err)
		case tc.want == "" && (tr.MaxImages < 1 || tr.PromptTokens < 1 || tr.MaxOutputTokens != GeminiImageMaxOutput):
			t.Errorf("%s %.120s: bounds %+v", tc.variant, tc.body, tr)
		case tc.want != "" && (err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %.120s: %v; want %q", tc.variant, tc.body, err, tc.want)
		case err != nil && fuzzcheck.Leak(err.Error()) != "":
			t.Errorf("%s: Go words in %q", tc.body, err)
		}
	}
}

// TestGeminiImageBounds: the hold's bounds: the prompt's bytes plus a fixed bound per image and
// turn; the images the output budget pays for at the size asked, at most GeminiMaxImages; the
// model's max_output_length when it has one.
func TestGeminiImageBounds(t *testing.T) {
	body := `{"model":"m","contents":[{"role":"user","parts":[{"text":"abcdef"},{"inline_data":{"mime_type":"image/png","data":"` + b64PNG(4, 4) + `"}}]}],
		"generationConfig":{"responseFormat":{"image":{"imageSize":"4K"}}}}`
	tr, err := geminiImage{}.Validate(&ir.Model{ID: "x", Family: "I3", Variant: "flash-3.1", MaxOutputLength: 6000}, taskReq(t, body))
	if err != nil || tr.PromptTokens != 6+1600+8 || tr.MaxOutputTokens != 6000 || tr.MaxImages != 2 { // 6000 / 2520
		t.Fatalf("%+v %v", tr, err)
	}
	for _, c := range []struct {
		variant, size string
		out, want     int64
	}{
		{"flash-2.5", "", 32768, 16}, {"flash-2.5", "", 2580, 2}, {"flash-2.5", "", 100, 1},
		{"pro", "", 3360, 3}, {"pro", "4K", 4000, 2}, {"flash-3.1", "512", 1494, 2}, {"flash-3.1", "", 2240, 2}, {"flash-3.1", "2K", 3360, 2},
	} {
		if got := GeminiImagesBound(c.variant, c.size, c.out); got != c.want {
			t.Errorf("%s %s %d: %d images, want %d", c.variant, c.size, c.out, got, c.want)
		}
	}
}

// TestGeminiImageCreate: the create goes to :generateContent with the provider's key, the
// spec's responseFormat.image as Gemini's imageConfig, inline images as inlineData, Google
// Search as googleSearch, and none of the gateway's own fields.
func TestGeminiImageCreate(t *testing.T) {
	p := &ir.Provider{Name: "g", APIKey: "g-key"}
	data := b64PNG(8, 8)
	body := `{"model":"nb-pro","route":{"provider":"g"},"callback_url":"https://h.example/c","contents":[{"role":"user","parts":[{"text":"a fox"},{"inline_data":{"mime_type":"image/png","data":"` + data + `"}}]}],
		"generationConfig":{"responseModalities":["IMAGE"],"responseFormat":{"image":{"aspectRatio":"16:9","imageSize":"2K"}}},"tools":[{"google_search":{}}]}`
	up, err := geminiImage{}.Create(p, i3Models["pro"], "models/gemini-3-pro-image-preview", taskReq(t, body))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role":"user","parts":[{"text":"a fox"},{"inlineData":{"mimeType":"image/png","data":"` + data + `"}}]}],` +
		`"tools":[{"googleSearch":{}}],"generationConfig":{"responseModalities":["IMAGE"],"imageConfig":{"aspectRatio":"16:9","imageSize":"2K"}}}`
	if up.Path != "/models/gemini-3-pro-image-preview:generateContent" || up.Method != "" || up.Headers["x-goog-api-key"] != "g-key" || up.Response != nil {
		t.Fatalf("upstream %+v", up)
	}
	if string(up.Body) != want {
		t.Fatalf("body\n%s\nwant\n%s", up.Body, want)
	}
	// Defaults: text and images; the model's output cap goes on so the hold's bound holds.
	m := &ir.Model{ID: "nb", Family: "I3", Variant: "flash-2.5", MaxOutputLength: 4000}
	up, err = geminiImage{}.Create(p, m, "gemini-2.5-flash-image", taskReq(t, i3Req("")))
	if err != nil || !strings.HasSuffix(string(up.Body), `"generationConfig":{"maxOutputTokens":4000,"responseModalities":["TEXT","IMAGE"]}}`) {
		t.Fatalf("%s %v", up.Body, err)
	}
	if _, err := (geminiImage{}).Query(p, m, "x"); err == nil {
		t.Fatal("Query of a task that finished at creation")
	}
}

// TestGeminiImageAnswers: Gemini's answers as the finished task: images decoded with their
// sizes, text kept, thoughts left out, usage split (images are billed apart); failures in
// HTTP 200 are failed tasks with a clear code and the tokens Gemini reported; HTTP errors are
// the client's (400), the gateway's credential, or the provider's trouble.
func TestGeminiImageAnswers(t *testing.T) {
	pngData, jpgData := b64PNG(30, 20), b64JPEG(12, 24)
	usage := `{"promptTokenCount":12,"candidatesTokenCount":1297,"totalTokenCount":1346,"thoughtsTokenCount":37,"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":7},{"modality":"IMAGE","tokenCount":1290}]}`
	c, err := geminiImage{}.Created(200, gemImageAnswer(`{"text":"Thinking","thought":true},{"inlineData":{"mimeType":"image/png","data":"`+b64PNG(2, 2)+`"},"thought":true},`+
		`{"text":"Here is "},{"text":"a fox."},{"inlineData":{"mimeType":"image/png","data":"`+pngData+`"}},{"inlineData":{"mimeType":"image/jpeg","data":"`+jpgData+`"}}`, "STOP", usage))
	st := c.Done
	if err != nil || c.TaskID != "" || st == nil || st.Status != Completed || st.Text != "Here is a fox." || len(st.Images) != 2 || st.FamilyStatus != "STOP" {
		t.Fatalf("%+v %v", c, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(pngData)
	if !bytes.Equal(st.Images[0].Data, raw) || st.Images[0].MIMEType != "image/png" || st.Images[0].Width != 30 || st.Images[0].Height != 20 ||
		st.Images[1].MIMEType != "image/jpeg" || st.Images[1].Width != 12 || st.Images[1].Height != 24 || !st.Images[0].ExpiresAt.IsZero() {
		t.Fatalf("images %+v", st.Images)
	}
	if st.PromptTokens != 12 || st.CompletionTokens != 1297+37 || st.ImageTokens != 1290 {
		t.Fatalf("usage %d %d %d", st.PromptTokens, st.CompletionTokens, st.ImageTokens)
	}
	// Without a breakdown, the text is counted by the tokenizer, at most what Gemini reports;
	// the images are the rest.
	c, _ = geminiImage{}.Created(200, gemImageAnswer(`{"text":"Here is a fox."},{"inlineData":{"mimeType":"image/png","data":"`+pngData+`"}}`, "STOP", `{"promptTokenCount":5,"candidatesTokenCount":1295}`))
	if c.Done.CompletionTokens != 1295 || c.Done.ImageTokens != 1295-5 || c.Done.PromptTokens != 5 { // "Here is a fox." is 5 o200k tokens
		t.Fatalf("no details: %+v", c.Done)
	}
	for _, tc := range []struct {
		body          string
		code, family  string
		prompt, compl int64
		text          string
	}{
		{`{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT","blockReasonMessage":"no"},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9}}`,
			"content_filter", "blockReason PROHIBITED_CONTENT", 9, 0, ""},
		{string(gemImageAnswer(`{"text":"I drew nothing."}`, "NO_IMAGE", `{"promptTokenCount":4,"candidatesTokenCount":4}`)), "no_image", "NO_IMAGE", 4, 4, "I drew nothing."},
		{string(gemImageAnswer(``, "IMAGE_SAFETY", `{"promptTokenCount":4}`)), "content_filter", "IMAGE_SAFETY", 4, 0, ""},
		{string(gemImageAnswer(`{"text":"a story"}`, "STOP", `{"promptTokenCount":4,"candidatesTokenCount":2}`)), "no_image", "STOP", 4, 2, "a story"},
		{`{"candidates":[{"content":{},"finishReason":"IMAGE_PROHIBITED_CONTENT"}]}`, "content_filter", "IMAGE_PROHIBITED_CONTENT", 0, 0, ""},
		{`{"candidates":[]}`, "no_image", "no candidates", 0, 0, ""},
		{string(gemImageAnswer(`{"inlineData":{"mimeType":"image/png","data":"***"}}`, "STOP", `{"promptTokenCount":3}`)), "upstream_error", "STOP", 3, 0, ""},
	} {
		c, err := geminiImage{}.Created(200, []byte(tc.body))
		st := c.Done
		if err != nil || st == nil || st.Status != Failed || st.Error == nil || st.Error.Code != tc.code || st.FamilyStatus != tc.family ||
			len(st.Images) != 0 || st.PromptTokens != tc.prompt || st.CompletionTokens != tc.compl || st.Text != tc.text {
			t.Errorf("%.100s: %+v %+v %v", tc.body, st, st.Error, err)
		}
	}
	for _, tc := range []struct {
		status int
		body   string
		code   string
	}{
		{400, `{"error":{"code":400,"message":"Request contains an invalid argument.","status":"INVALID_ARGUMENT"}}`, "invalid_request"},
		{400, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}`, "provider_auth_failed"},
		{403, `{"error":{"code":403,"message":"Method doesn't allow unregistered callers","status":"PERMISSION_DENIED"}}`, "provider_auth_failed"},
		{429, `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`, "provider_rate_limited"},
		{503, `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`, "upstream_error"},
		{502, `<html>bad gateway</html>`, "upstream_error"},
		{200, `not json`, "upstream_error"},
		{200, `{"error":{"code":500,"message":"boom","status":"INTERNAL"}}`, "upstream_error"},
	} {
		_, err := geminiImage{}.Created(tc.status, []byte(tc.body))
		var te *Error
		if !errors.As(err, &te) || te.Code != tc.code || fuzzcheck.Leak(te.Message) != "" {
			t.Errorf("%d %s: %v; want %s", tc.status, tc.body, err, tc.code)
		}
	}
}

// FuzzGeminiImageValidate: any body is accepted with sane bounds or refused as the client's
// fault in words without Go vocabulary; a body Validate accepts, Create translates.
func FuzzGeminiImageValidate(f *testing.F) {
	f.Add(i3Req(`"generationConfig":{"responseModalities":["IMAGE"],"responseFormat":{"image":{"aspectRatio":"4:1","imageSize":"512"}}},"tools":[{"google_search":{}}]`), "flash-3.1")
	f.Add(`{"contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/png","data":"`+b64PNG(3, 3)+`"}}]}]}`, "flash-2.5")
	f.Add(`{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"responseFormat":{"image":{"imageSize":"4K"}}}}`, "pro")
	f.Fuzz(func(t *testing.T, body, variant string) {
		var r provider.Request
		if json.Unmarshal([]byte(body), &r) != nil {
			return
		}
		m := &ir.Model{ID: "m", Family: "I3", Variant: variant, MaxOutputLength: 5000}
		tr, err := geminiImage{}.Validate(m, r)
		if err != nil {
			if !errors.Is(err, provider.ErrBadRequest) || fuzzcheck.Leak(err.Error()) != "" {
				t.Fatalf("%s: %v", body, err)
			}
			return
		}
		if tr.MaxImages < 1 || tr.MaxImages > GeminiMaxImages || tr.PromptTokens < 1 || tr.MaxOutputTokens != 5000 {
			t.Fatalf("%s: bounds %+v", body, tr)
		}
		up, err := geminiImage{}.Create(&ir.Provider{APIKey: "k"}, m, "gemini-x-image", r)
		if err != nil || !json.Valid(up.Body) || bytes.Contains(up.Body, []byte("responseFormat")) {
			t.Fatalf("%s: create %s %v", body, up.Body, err)
		}
	})
}

// TestGeminiImageBase64Chunks: an inline image is checked a chunk at a time: padding inside
// the data is refused wherever it falls, the size is the decoded size (20 MiB + 1 refused), and
// a JPEG whose header comes after 256 KiB of metadata is still recognised.
func TestGeminiImageBase64Chunks(t *testing.T) {
	valid := base64.StdEncoding.EncodeToString(make([]byte, 1<<20))
	if im, err := provider.ReadImage(valid); err != nil || im.Size != 1<<20 {
		t.Fatalf("%d %v", im.Size, err)
	}
	broken := valid[:256<<10-4] + "AA==" + valid[256<<10:] // padding at the end of the first chunk
	if _, err := provider.ReadImage(broken); err == nil {
		t.Fatal("padding inside the data accepted")
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, 20<<20+1))
	if im, err := provider.ReadImage(big); err != nil || im.Size != 20<<20+1 || provider.Base64Size(big) != 20<<20+1 {
		t.Fatalf("%d %v", im.Size, err)
	}
	tooBig := `{"contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/png","data":"` + big + `"}}]}]}`
	if _, err := (geminiImage{}).Validate(i3Models["pro"], taskReq(t, tooBig)); err == nil || !strings.Contains(err.Error(), "is 20971521 bytes decoded; at most 20 MiB") {
		t.Fatalf("20 MiB + 1: %v", err)
	}
	raw, _ := base64.StdEncoding.DecodeString(b64JPEG(8, 8))
	var exif []byte
	for range 5 { // 5 APP1 segments of 64 KiB after the SOI marker
		seg := make([]byte, 0xFFFF+2)
		seg[0], seg[1], seg[2], seg[3] = 0xFF, 0xE1, 0xFF, 0xFF
		exif = append(exif, seg...)
	}
	jpg := append(append(append([]byte{}, raw[:2]...), exif...), raw[2:]...)
	body := `{"contents":[{"parts":[{"text":"x"},{"inline_data":{"mime_type":"image/jpeg","data":"` + base64.StdEncoding.EncodeToString(jpg) + `"}}]}]}`
	if _, err := (geminiImage{}).Validate(i3Models["pro"], taskReq(t, body)); err != nil {
		t.Fatalf("JPEG with 320 KiB of EXIF: %v", err)
	}
	if !strings.Contains(b64PNG(16, 16), "/") {
		t.Fatal(`the escaped-slash case above needs a "/" in its base64`)
	}
}
