package chat

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"
	"github.com/tollway/tollway/xds/ir"
)

// TestImageChatPlan: an I3 model is planned like a chat model and rewritten for Gemini with
// images asked for; streaming it and any other media model are refused before any hold.
func TestImageChatPlan(t *testing.T) {
	rt := core.Compile(fixture.ImageGateway(t), nil)
	body := `{"model":"nb","messages":[{"role":"user","content":[{"type":"text","text":"draw a fox"}]}]}`
	plan, e := planChat(rt, []byte(body))
	if e != nil || plan.cluster != ir.ModelChainCluster("nb") {
		t.Fatalf("%+v %v", plan, e)
	}
	up, removed, err := AttemptRequest(rt, []byte(body), rt.Models["nb"], rt.Providers["gemini"])
	if err != nil || len(removed) != 0 || up.Path != "/models/gemini-2.5-flash-image:generateContent" || !strings.Contains(string(up.Body), `"responseModalities":["TEXT","IMAGE"]`) {
		t.Fatalf("attempt %+v %v %v", up, removed, err)
	}
	for body, want := range map[string]string{
		`{"model":"nb","stream":true,"messages":[{"role":"user","content":"x"}]}`:                                                  `stream is not supported for image model "nb"`,
		`{"model":"hailuo-02","messages":[{"role":"user","content":"x"}]}`:                                                         `model "hailuo-02" is a video model, not a chat model: create its tasks with POST /v1/videos`,
		`{"model":"gpt","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`: "send it back in a user message",
	} {
		if _, e := planChat(rt, []byte(body)); e == nil || e.Status != 400 || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %+v; want a 400 saying %q", body, e, want)
		}
	}
}

// TestMeterCountsImageParts: an answer whose content is an array of parts is read for its text
// (an estimate needs it) and its images (billed per image), without the data URLs.
func TestMeterCountsImageParts(t *testing.T) {
	m := &meter{}
	m.body([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"hello there"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}}]}`))
	u, est := m.result(func() int64 { return 4 })
	if !est || u.Images != 1 || u.PromptTokens != 4 || u.CompletionTokens != 2 || m.text.String() != "hello there" {
		t.Fatalf("%+v %v %q", u, est, m.text.String())
	}
	m = &meter{}
	m.body([]byte(`{"choices":[{"message":{"content":null}},{"message":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	if u, est := m.result(nil); est || u.Images != 0 || u.CompletionTokens != 1 {
		t.Fatalf("%+v", u)
	}
}

// TestImageChatCatalogParameters: the catalog lists for an I3 model the chat parameters it
// honours, not every Gemini chat parameter (it refuses tools, reasoning_effort, and takes n and
// response_format only at their defaults).
func TestImageChatCatalogParameters(t *testing.T) {
	rt := core.Compile(fixture.ImageGateway(t), nil)
	got := strings.Join(rt.Models["nb"].Sampling, ",")
	if got != "frequency_penalty,max_completion_tokens,max_tokens,presence_penalty,seed,stop,temperature,top_p" {
		t.Fatalf("supported_sampling_parameters %s", got)
	}
}
