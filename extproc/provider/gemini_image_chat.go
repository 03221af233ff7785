package provider

// I3 through chat completions (spec 4.1 rule 5): an I3 model's chat request is the Gemini chat
// mapping with images asked for, and its answer carries the images as image_url content parts.
// The family's task adapter is gemini_image.go.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/xds/ir"
)

// GeminiImageChatParameters are the chat request fields an I3 model takes: the Gemini mapping's
// less those GeminiImageChat refuses by name (imageChatRefused), n and response_format only at
// their defaults (one answer; text beside the images). The catalog lists Listed() as its
// supported_sampling_parameters.
var GeminiImageChatParameters = Parameters{
	Known: []string{"frequency_penalty", "max_completion_tokens", "max_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "temperature", "top_p"},
	Fixed: []string{"n", "response_format"},
}

// imageChatRefused says why an image model refuses a field the Gemini mapping carries.
var imageChatRefused = map[string]string{
	"tools":            "it takes no function tools; remove tools and tool_choice",
	"tool_choice":      "it takes no function tools; remove tools and tool_choice",
	"reasoning_effort": "remove it",
}

// GeminiImageChat is an I3 model's chat request (spec 4.1 rule 5): the Gemini chat mapping for
// text and image_url parts (no tools, audio or files), asking for text and images. Its answer's
// message content is an array of parts: {"type": "text", "text"} and {"type": "image_url",
// "image_url": {"url": "data:image/png;base64,..."}} (see imageBody). Image settings
// (aspect ratio, size) are POST /v1/images's; here the model's defaults apply. Streaming is
// refused: an image arrives whole, so a stream would only delay it.
func GeminiImageChat(p *ir.Provider, m *ir.Model, model string, req Request) (*Upstream, error) {
	if stream, err := boolField(req, "stream"); err != nil || stream {
		return nil, fmt.Errorf("%w: image model %s answers whole: send stream false", ErrBadRequest, m.ID)
	}
	for _, f := range (gemini{}).Parameters().Known {
		if rawField(req, f) != nil && !slices.Contains(GeminiImageChatParameters.Known, f) {
			return nil, fmt.Errorf("%w: %s is not taken by image model %s: %s", ErrBadRequest, f, m.ID, cmp.Or(imageChatRefused[f], "remove it"))
		}
	}
	if rf, err := decodeResponseFormat(req); err != nil {
		return nil, err
	} else if rf.Type != "" && rf.Type != "text" {
		return nil, fmt.Errorf("%w: response_format %s is not taken by image model %s: it answers with text and images", ErrBadRequest, rf.Type, m.ID)
	}
	out, removed, err := gemini{images: true}.request(model, req)
	if err != nil {
		return nil, err
	}
	if out.GenerationConfig == nil {
		out.GenerationConfig = &gemGenConfig{}
	}
	out.GenerationConfig.ResponseModalities = []string{"TEXT", "IMAGE"}
	resp := newGeminiResponse(model)
	resp.images = true
	return geminiUpstream(p, model, out, false, resp, removed)
}

// imageCompletion is the chat answer of an image model: a chat.completion whose message
// content is an array of text and image_url parts (null when the model returned neither).
type imageCompletion struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []imageChoice `json:"choices"`
	Usage   *chatUsage    `json:"usage,omitempty"`
}

type imageChoice struct {
	Index        int          `json:"index"`
	Message      imageMessage `json:"message"`
	FinishReason string       `json:"finish_reason"`
}

type imageMessage struct {
	Role    string        `json:"role"`
	Content []contentPart `json:"content"`
}

type contentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL jsontext.Value `json:"url"` // a JSON string: the data URL, its base64 as Gemini sent it
}

// imageBody translates an image model's whole answer: its text and image parts in order
// (consecutive text joined), thoughts left out, at most GeminiMaxImages images, the images'
// base64 copied as it came. Usage as geminiImageUsage: every output token, the images' named
// in completion_tokens_details.image_tokens (billed per image where the model has an image
// price, at the completion price where it has none). Failures as Body's: a blocked prompt is a
// BlockedError.
func (r *geminiResponse) imageBody(b []byte) ([]byte, error) {
	var a gemImageWire
	if err := jsonv2.Unmarshal(b, &a, imageWireOptions); err != nil {
		return nil, fmt.Errorf("gemini: the answer is not a GenerateContentResponse (%s)", strings.TrimPrefix(err.Error(), "json: "))
	}
	if a.Error != nil {
		return nil, &UpstreamFailure{Provider: "Gemini", Code: cmp.Or(strings.ToLower(a.Error.Status), "upstream_error"), Message: cmp.Or(a.Error.Message, "Gemini reported an error")}
	}
	if len(a.Candidates) == 0 {
		if pf := a.PromptFeedback; pf != nil && pf.BlockReason != "" {
			return nil, &BlockedError{Provider: "gemini", Reason: pf.BlockReason, Message: pf.BlockReasonMessage}
		}
		return nil, fmt.Errorf("gemini: the answer has no candidates")
	}
	cand := a.Candidates[0]
	var parts []contentPart
	var text strings.Builder
	images := 0
	for _, p := range cand.Content.Parts {
		switch {
		case p.Thought:
		case p.InlineData != nil && strings.HasPrefix(p.InlineData.MimeType, "image/"):
			if images == GeminiMaxImages {
				continue
			}
			data, err := p.InlineData.base64()
			if err != nil {
				return nil, err
			}
			images++
			mime, _ := jsonv2.Marshal(p.InlineData.MimeType)
			url := slices.Concat([]byte(`"data:`), mime[1:len(mime)-1], []byte(";base64,"), data, []byte(`"`))
			parts = append(parts, contentPart{Type: "image_url", ImageURL: &imageURL{URL: url}})
		case p.Text != "":
			text.WriteString(p.Text)
			if n := len(parts); n > 0 && parts[n-1].Type == "text" {
				parts[n-1].Text += p.Text
			} else {
				parts = append(parts, contentPart{Type: "text", Text: p.Text})
			}
		}
	}
	c := imageCompletion{
		ID: cmp.Or(a.ResponseID, r.out.id), Object: "chat.completion", Created: r.out.created, Model: cmp.Or(a.ModelVersion, r.out.model),
		Choices: []imageChoice{{Message: imageMessage{Role: "assistant", Content: parts}, FinishReason: geminiFinish(cand.FinishReason, false)}},
	}
	if u := a.UsageMetadata; u != nil {
		prompt, completion, imageTokens := geminiImageUsage(u, text.String(), images)
		c.Usage = newUsage(prompt, completion, tokens(u.CachedContentTokenCount), tokens(u.ThoughtsTokenCount))
		c.Usage.imageTokens(imageTokens)
	}
	out, err := jsonv2.Marshal(c, jsonv2.FormatNilSliceAsNull(true))
	if err != nil {
		return nil, fmt.Errorf("gemini: an image part is not a valid string: %w", err)
	}
	return out, nil
}
