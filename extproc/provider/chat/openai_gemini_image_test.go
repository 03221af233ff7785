package chat

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/internal/providertest"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

var (
	b64PNG         = providertest.PNG
	gemImageAnswer = providertest.GeminiImageAnswer
	taskReq        = providertest.Body
)

// TestGeminiImageChat: an I3 model on chat completions asks Gemini for text and images, takes
// text and image parts only, and answers with content parts (images as data URLs), its usage
// counting text and thinking, not the images.
func TestGeminiImageChat(t *testing.T) {
	p := &ir.Provider{Name: "g", APIKey: "g-key"}
	m := &ir.Model{ID: "nb", Family: "I3", Variant: "flash-2.5"}
	req := func(extra string) provider.Request {
		return taskReq(t, `{"model":"nb","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"draw"},{"type":"image_url","image_url":{"url":"data:image/png;base64,`+b64PNG(2, 2)+`"}}]}]`+extra+`}`)
	}
	up, err := (toGeminiImage{}).Chat(p, m, "gemini-2.5-flash-image", req(`,"temperature":0.5,"max_tokens":2000`))
	if err != nil || up.Path != "/models/gemini-2.5-flash-image:generateContent" || up.Headers["x-goog-api-key"] != "g-key" {
		t.Fatalf("%+v %v", up, err)
	}
	var sent struct {
		SystemInstruction json.RawMessage
		Contents          []gemini.Content
		GenerationConfig  map[string]json.RawMessage
	}
	_ = json.Unmarshal(up.Body, &sent)
	if string(sent.GenerationConfig["responseModalities"]) != `["TEXT","IMAGE"]` || string(sent.GenerationConfig["maxOutputTokens"]) != "2000" ||
		len(sent.Contents) != 1 || sent.Contents[0].Parts[1].InlineData == nil || sent.SystemInstruction == nil {
		t.Fatalf("sent %s", up.Body)
	}
	for extra, want := range map[string]string{
		`,"stream":true`: "answers whole: send stream false",
		`,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]`: "takes no function tools",
		`,"response_format":{"type":"json_object"}`:                              "response_format json_object is not taken",
		`,"reasoning_effort":"low"`:                                              "reasoning_effort is not taken",
		`,"n":2`:                                                                 "n=2",
	} {
		if _, err := (toGeminiImage{}).Chat(p, m, "x", req(extra)); err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", extra, err, want)
		}
	}
	audio := taskReq(t, `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}}]}]}`)
	if _, err := (toGeminiImage{}).Chat(p, m, "x", audio); err == nil || !strings.Contains(err.Error(), `"input_audio" is not supported by image models`) {
		t.Errorf("audio: %v", err)
	}
	big := taskReq(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,`+strings.Repeat("A", (20<<20+1)/3*4+4)+`"}}]}]}`)
	if _, err := (toGeminiImage{}).Chat(p, m, "x", big); err == nil || !strings.Contains(err.Error(), "image models take images of at most 20 MiB") {
		t.Errorf("20 MiB + 1: %v", err)
	}
	tool := taskReq(t, `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"x"}]}`)
	if _, err := (toGeminiImage{}).Chat(p, m, "x", tool); err == nil || !strings.Contains(err.Error(), "takes no tools") {
		t.Errorf("tool turn: %v", err)
	}

	pngData := b64PNG(3, 3)
	out, err := up.Response.Body(gemImageAnswer(`{"text":"A","thought":true},{"text":"Here "},{"text":"it is."},{"inlineData":{"mimeType":"image/png","data":"`+pngData+`"}},{"text":"Done."}`, "STOP",
		`{"promptTokenCount":12,"candidatesTokenCount":1300,"thoughtsTokenCount":5,"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":10},{"modality":"IMAGE","tokenCount":1290}]}`))
	want := `{"id":"r1","object":"chat.completion","created":` + strconv.FormatInt(up.Response.(*geminiResponse).out.created, 10) + `,"model":"gemini-2.5-flash-image","choices":[{"index":0,"message":{"role":"assistant","content":[` +
		`{"type":"text","text":"Here it is."},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pngData + `"}},{"type":"text","text":"Done."}]},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":1305,"total_tokens":1317,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":5,"image_tokens":1290}}}`
	if err != nil || string(out) != want {
		t.Fatalf("answer\n%s\nwant\n%s\n%v", out, want, err)
	}
	// No image: the finish reason says why; a blocked prompt stays the 400 content_filter of chat.
	out, err = up.Response.Body(gemImageAnswer(``, "IMAGE_SAFETY", `{"promptTokenCount":12}`))
	if err != nil || !strings.Contains(string(out), `"content":null},"finish_reason":"content_filter"`) {
		t.Fatalf("image safety: %s %v", out, err)
	}
	var blocked *provider.BlockedError
	if _, err := up.Response.Body([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`)); !errors.As(err, &blocked) {
		t.Fatalf("blocked: %v", err)
	}
}

// FuzzGeminiImageAnswer: any answer, to a task or to a chat request, is a finished task (or
// a Error) and an OpenAI-shaped answer (or an error): completed only with images, failed
// with a code and message, counts never negative, no panic.
func FuzzGeminiImageAnswer(f *testing.F) {
	f.Add(200, string(gemImageAnswer(`{"text":"x"},{"inlineData":{"mimeType":"image/png","data":"`+b64PNG(2, 2)+`"}}`, "STOP", `{"promptTokenCount":3,"candidatesTokenCount":-5}`)))
	f.Add(200, `{"promptFeedback":{"blockReason":"SAFETY"}}`)
	f.Add(200, string(gemImageAnswer(`{"text":"x"}`, "NO_IMAGE", `{"thoughtsTokenCount":9223372036854775807,"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":9223372036854775807}]}`)))
	f.Add(400, `{"error":{"code":400,"message":"API key not valid","status":"INVALID_ARGUMENT"}}`)
	f.Fuzz(func(t *testing.T, status int, body string) {
		c, err := i3Created(status, []byte(body))
		var te *task.Error
		switch {
		case err != nil:
			if !errors.As(err, &te) || te.Code == "" || te.Message == "" || fuzzcheck.Leak(te.Message) != "" {
				t.Fatalf("%d %s: %v", status, body, err)
			}
		case c.Done == nil || !c.Done.Status.Terminal():
			t.Fatalf("%s: not finished: %+v", body, c)
		case c.Done.Status == task.Completed && (len(c.Done.Images) == 0 || c.Done.Error != nil):
			t.Fatalf("%s: completed without images: %+v", body, c.Done)
		case c.Done.Status == task.Failed && (len(c.Done.Images) != 0 || c.Done.Error == nil || c.Done.Error.Code == "" || len(c.Done.Error.Message) > 4096):
			t.Fatalf("%s: failed %+v", body, c.Done)
		case c.Done.PromptTokens < 0 || c.Done.CompletionTokens < 0 || len(c.Done.Images) > task.GeminiMaxImages:
			t.Fatalf("%s: %+v", body, c.Done)
		}
		r := newGeminiResponse("m")
		r.images = true
		out, err := r.Body([]byte(body))
		if err == nil && !json.Valid(out) {
			t.Fatalf("%s: answer %s", body, out)
		}
	})
}

// TestGeminiImageUsageImageOnlyDetails: Gemini's candidatesTokensDetails lists only the IMAGE
// entry though text and thinking came back (as real answers of gemini-2.5-flash-image and
// gemini-3-pro-image-preview show): every output token is reported, the images' apart, for
// tasks and chat alike (issue 26 item 12; the old reading billed only TEXT entries: none).
func TestGeminiImageUsageImageOnlyDetails(t *testing.T) {
	answer := gemImageAnswer(`{"text":"Archie the axolotl peeked out of his tank."},{"inlineData":{"mimeType":"image/png","data":"`+b64PNG(4, 4)+`"}}`, "STOP",
		`{"promptTokenCount":14,"candidatesTokenCount":1283,"thoughtsTokenCount":174,"totalTokenCount":1471,"candidatesTokensDetails":[{"modality":"IMAGE","tokenCount":1120}]}`)
	c, err := i3Created(200, answer)
	if err != nil || c.Done.PromptTokens != 14 || c.Done.CompletionTokens != 1283+174 || c.Done.ImageTokens != 1120 {
		t.Fatalf("task usage %+v %v", c.Done, err)
	}
	up, err := (toGeminiImage{}).Chat(&ir.Provider{Name: "g", APIKey: "k"}, &ir.Model{ID: "nb-pro", Family: "I3", Variant: "pro"}, "gemini-3-pro-image-preview",
		taskReq(t, `{"messages":[{"role":"user","content":"a fox"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := up.Response.Body(answer)
	want := `"usage":{"prompt_tokens":14,"completion_tokens":1457,"total_tokens":1471,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":174,"image_tokens":1120}}`
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("chat answer %s %v\nwant %s", out, err, want)
	}
}

// i3Created reads an answer as I3's task adapter does.
func i3Created(status int, body []byte) (task.Created, error) {
	a, _ := task.For(ir.ChatImageFamily)
	return a.Created(status, body)
}
