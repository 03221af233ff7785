package chat

// I3 through chat completions (docs/api.md, Provider APIs: Gemini image models on chat
// completions): an I3 model's chat request is the Gemini chat mapping with images asked for, and
// its answer carries the images as image_url content parts. The family's task adapter, whose bounds
// and usage rule this one shares, is task/images_gemini.go.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/xds/ir"
)

// GeminiImageParameters are the chat request fields an I3 model takes: the Gemini mapping's
// less those toGeminiImage refuses by name (imageChatRefused), n and response_format only at
// their defaults (one answer; text beside the images). The catalog lists Listed() as its
// supported_sampling_parameters.
var GeminiImageParameters = Parameters{
	Known: []string{"frequency_penalty", "max_completion_tokens", "max_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "temperature", "top_p"},
	Fixed: []string{"n", "response_format"},
}

// imageChatRefused says why an image model refuses a field the Gemini mapping carries.
var imageChatRefused = map[string]string{
	"tools":            "it takes no function tools; remove tools and tool_choice",
	"tool_choice":      "it takes no function tools; remove tools and tool_choice",
	"reasoning_effort": "remove it",
}

// toGeminiImage makes an I3 model's chat request (docs/api.md#provider-apis): the Gemini chat
// mapping for text and image_url parts (no tools, audio or files), asking for text and images. Its
// answer's message content is an array of parts: {"type": "text", "text"} and {"type": "image_url",
// "image_url": {"url": "data:image/png;base64,..."}} (see imageBody). Image settings (aspect ratio,
// size) are POST /v1/images's; here the model's defaults apply. Streaming is refused: an image
// arrives whole, so a stream would only delay it.
type toGeminiImage struct{}

// Parameters are the Gemini mapping's: what it carries reaches Chat, which refuses the fields
// an image model does not take by name (GeminiImageParameters are the ones it takes).
func (toGeminiImage) Parameters() Parameters { return toGemini{}.Parameters() }

func (toGeminiImage) Chat(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	if stream, err := boolField(req, "stream"); err != nil || stream {
		return nil, fmt.Errorf("%w: image model %s answers whole: send stream false", provider.ErrBadRequest, m.ID)
	}
	for _, f := range (toGemini{}).Parameters().Known {
		if provider.Field(req, f) != nil && !slices.Contains(GeminiImageParameters.Known, f) {
			return nil, fmt.Errorf("%w: %s is not taken by image model %s: %s", provider.ErrBadRequest, f, m.ID, cmp.Or(imageChatRefused[f], "remove it"))
		}
	}
	if rf, err := decodeResponseFormat(req); err != nil {
		return nil, err
	} else if rf.Type != "" && rf.Type != "text" {
		return nil, fmt.Errorf("%w: response_format %s is not taken by image model %s: it answers with text and images", provider.ErrBadRequest, rf.Type, m.ID)
	}
	out, removed, err := toGemini{images: true}.request(model, req)
	if err != nil {
		return nil, err
	}
	if out.GenerationConfig == nil {
		out.GenerationConfig = &gemini.GenerationConfig{}
	}
	out.GenerationConfig.ResponseModalities = []string{"TEXT", "IMAGE"}
	resp := newGeminiResponse(model)
	resp.images = true
	return geminiUpstream(p, model, out, false, resp, removed)
}

// imageBody translates an image model's whole answer: its text and image parts in order
// (consecutive text joined), thoughts left out, at most task.GeminiMaxImages images, the images'
// base64 copied as it came. Usage as task.GeminiImageUsage: every output token, the images' named
// in completion_tokens_details.image_tokens (billed per image where the model has an image
// price, at the completion price where it has none). Failures as Body's: a blocked prompt is a
// BlockedError.
func (r *geminiResponse) imageBody(b []byte) ([]byte, error) {
	var a gemini.Response
	if err := jsonv2.Unmarshal(b, &a, provider.Lenient); err != nil { // v2: a 4 MiB image's base64 is scanned fast
		return nil, fmt.Errorf("gemini: the answer is not a GenerateContentResponse (%s)", strings.TrimPrefix(err.Error(), "json: "))
	}
	if a.Error != nil {
		return nil, &provider.UpstreamFailure{Provider: "Gemini", Code: cmp.Or(strings.ToLower(a.Error.Status), "upstream_error"), Message: cmp.Or(a.Error.Message, "Gemini reported an error")}
	}
	if len(a.Candidates) == 0 {
		if pf := a.PromptFeedback; pf != nil && pf.BlockReason != "" {
			return nil, &provider.BlockedError{Provider: "gemini", Reason: pf.BlockReason, Message: pf.BlockReasonMessage}
		}
		return nil, fmt.Errorf("gemini: the answer has no candidates")
	}
	cand := a.Candidates[0]
	var parts []openai.Part
	var text strings.Builder
	images := 0
	for _, p := range cand.Content.Parts {
		switch {
		case p.Thought:
		case p.InlineData != nil && strings.HasPrefix(p.InlineData.MimeType, "image/"):
			if images == task.GeminiMaxImages {
				continue
			}
			images++
			parts = append(parts, openai.Part{Type: openai.PartImageURL, ImageURL: openai.ImageURL{URL: dataURL(p.InlineData.MimeType, p.InlineData.Data)}})
		case p.Text != "":
			text.WriteString(p.Text)
			if n := len(parts); n > 0 && parts[n-1].Type == openai.PartText {
				parts[n-1].Text += p.Text
			} else {
				parts = append(parts, openai.Part{Type: openai.PartText, Text: p.Text})
			}
		}
	}
	c := openai.ChatCompletion{
		Header:  r.out.header(openai.ObjectCompletion, a.ResponseID, a.ModelVersion),
		Choices: []openai.Choice{{Message: openai.ResponseMessage{Role: "assistant", Content: openai.Content{Parts: parts}}, FinishReason: geminiFinish(cand.FinishReason, false)}},
	}
	if u := a.UsageMetadata; u != nil {
		prompt, completion, imgTokens := task.GeminiImageUsage(u, text.String(), images)
		c.Usage = newUsage(prompt, completion, provider.Tokens(u.CachedContentTokenCount), provider.Tokens(u.ThoughtsTokenCount))
		imageTokens(c.Usage, imgTokens)
	}
	out, err := jsonv2.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("gemini: an image part is not a valid string: %w", err)
	}
	return out, nil
}

// dataURL is a base64 data URL of type mime, its data copied once.
func dataURL(mime, b64 string) string {
	var b strings.Builder
	b.Grow(len(mime) + len(b64) + 13)
	b.WriteString("data:")
	b.WriteString(mime)
	b.WriteString(";base64,")
	b.WriteString(b64)
	return b.String()
}
