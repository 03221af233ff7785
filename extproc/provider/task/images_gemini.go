package task

// geminiImage is family I3 (docs/media.md#image-families): Gemini's image models, in three variants
// (pro, flash-3.1, flash-2.5), on a provider of type gemini. Gemini answers at once: the create is
// POST /models/{model}:generateContent (x-goog-api-key) and its answer is the finished task
// (Created.Done), completed with its images or failed; there is nothing to query.
//
// The client's body is Generate-Content-shaped: contents (user turns of text and inline_data
// {mime_type, data} parts), generationConfig.responseModalities, generationConfig.responseFormat
// .image.{aspectRatio, imageSize} and tools[].google_search, each name spelt either way Gemini's
// proto JSON reads it (inline_data or inlineData, generationConfig or generation_config; a field
// sent both ways is refused), and Gemini's own generationConfig.imageConfig in place of
// responseFormat.image. Gemini takes the image settings as generationConfig.imageConfig, so
// responseFormat.image is moved there; responseModalities
// defaults to ["TEXT", "IMAGE"]; the model's max_output_length, when set, goes on as
// maxOutputTokens so the hold's bound holds. Any other field is refused with the list.
//
// The answer: inlineData parts are the images (decoded; their width and height read from the
// decoded header), text parts the text beside them; thought parts (Gemini 3's interim images
// and reasoning) are not the answer and are left out. A 200 without an image (a blocked
// prompt, finishReason NO_IMAGE, IMAGE_SAFETY, ...) is a failed task: billed only the tokens
// Gemini reports, never an image. Usage (GeminiImageUsage): the prompt tokens Gemini reports,
// and as completion every output token (text, images, thinking), the images' named apart.

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"net/url"
	"slices"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

type geminiImage struct{}

// Bounds of an I3 request and of its answer.
const (
	// GeminiImageMaxOutput is Gemini's output limit of its image models (tokens), the hold's
	// bound of an answer when the model has no max_output_length.
	GeminiImageMaxOutput = 32768
	// GeminiMaxImages is the most images the gateway keeps of one answer (the task store keeps
	// 16 per task); the hold covers that many. Gemini answers one image per prompt unless asked
	// for a series; images beyond it are dropped and not billed.
	GeminiMaxImages = 16
	// GeminiInlineMax bounds one inline_data image, decoded (20 MiB, as for first frames).
	GeminiInlineMax = 20 << 20
	// geminiImagePromptTokens bounds the prompt tokens of one input image: the chat path's rule
	// (1,600). Gemini 3 bills an input image at most 1,120 tokens (its default media
	// resolution); Gemini 2.x bills 258 per 768-px tile, which a very large image can exceed.
	geminiImagePromptTokens = 1600
	// geminiTurnTokens bounds what Gemini adds to the prompt per turn (role markers).
	geminiTurnTokens = 8
	// geminiMaxText bounds the text kept beside the images (the task store's bound).
	geminiMaxText = 256 << 10
)

// The I3 variants (ir.MediaFamilies["I3"]).
const (
	variantPro      = "pro"
	variantFlash31  = "flash-3.1"
	variantFlash25  = "flash-2.5"
	geminiImageName = "I3"
)

var (
	i3Fields      = []string{"contents", "generationConfig", "tools"}
	i3TurnFields  = []string{"role", "parts"}
	i3PartFields  = []string{"text", "inline_data"}
	i3BlobFields  = []string{"mime_type", "data"}
	i3GenFields   = []string{"responseModalities", "responseFormat", "imageConfig"} // imageConfig: Gemini's own name of responseFormat.image
	i3ImageFields = []string{"aspectRatio", "imageSize"}
	// i3AspectRatios are the common aspect ratios of I3 (docs/media.md#image-families); flash-3.1
	// also takes i3WideRatios.
	i3AspectRatios = []string{"1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"}
	i3WideRatios   = []string{"1:4", "4:1", "1:8", "8:1"}
)

// i3Sizes are the imageSize values of a variant (docs/media.md#image-families); flash-2.5 takes
// none.
func i3Sizes(variant string) []string {
	switch variant {
	case variantPro:
		return []string{"1K", "2K", "4K"}
	case variantFlash31:
		return []string{"512", "1K", "2K", "4K"}
	}
	return nil
}

// geminiImageTokens is what one output image costs in tokens, by variant and imageSize (""
// is Gemini's default, 1K), from Google's model pages: flash-2.5 1,290 at any size; pro 1,120
// up to 2K and 2,000 at 4K; flash-3.1 747 at 512, 1,120 at 1K, 1,680 at 2K, 2,520 at 4K.
// Images count against the output limit, so it bounds how many one answer can hold.
func geminiImageTokens(variant, size string) int64 {
	switch {
	case variant == variantFlash25:
		return 1290
	case variant == variantPro && size == "4K":
		return 2000
	case variant == variantPro:
		return 1120
	case size == "2K":
		return 1680
	case size == "4K":
		return 2520
	case size == "512":
		return 747
	}
	return 1120 // flash-3.1 at 1K
}

// GeminiImagesBound is the most images an answer of an I3 model of variant, at imageSize
// (""), with maxOutput output tokens, can hold: what the output budget pays for, at most
// GeminiMaxImages, at least one.
func GeminiImagesBound(variant, imageSize string, maxOutput int64) int64 {
	return min(max(maxOutput/geminiImageTokens(variant, imageSize), 1), GeminiMaxImages)
}

func (geminiImage) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	b, err := decodeI3(m, req, false)
	if err != nil {
		return nil, err
	}
	gen := &gemini.GenerationConfig{ResponseModalities: b.modalities}
	if b.aspectRatio != "" || b.imageSize != "" {
		gen.ImageConfig = &gemini.ImageConfig{AspectRatio: b.aspectRatio, ImageSize: b.imageSize}
	}
	if m.MaxOutputLength > 0 {
		gen.MaxOutputTokens = geminiOutput(m)
	}
	rest := struct {
		Tools            []gemini.Tool            `json:"tools,omitempty"`
		GenerationConfig *gemini.GenerationConfig `json:"generationConfig"`
	}{GenerationConfig: gen}
	if b.search {
		rest.Tools = []gemini.Tool{{GoogleSearch: &struct{}{}}}
	}
	tail, err := provider.EncodeJSON(rest)
	if err != nil {
		return nil, fmt.Errorf("gemini: encode request: %w", err)
	}
	// contents is written by hand: the images' base64 goes in as the client sent it.
	size := len(tail) + 16
	for _, t := range b.contents {
		for _, p := range t {
			size += len(p.text) + len(p.data) + 64
		}
	}
	body := bytes.NewBuffer(make([]byte, 0, size))
	body.WriteString(`{"contents":[`)
	for i, t := range b.contents {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"role":"user","parts":[`)
		for j, p := range t {
			if j > 0 {
				body.WriteByte(',')
			}
			if p.data == nil {
				body.WriteString(`{"text":`)
				body.Write(provider.Marshal(p.text))
				body.WriteByte('}')
				continue
			}
			body.WriteString(`{"inlineData":{"mimeType":`)
			body.Write(provider.Marshal(p.mime))
			body.WriteString(`,"data":`)
			body.Write(p.data)
			body.WriteString(`}}`)
		}
		body.WriteString(`]}`)
	}
	body.WriteString(`],`)
	body.Write(tail[1:]) // the other members, after the object's opening brace
	return &provider.Upstream{
		Path:    "/models/" + url.PathEscape(strings.TrimPrefix(model, "models/")) + ":generateContent",
		Body:    body.Bytes(),
		Headers: map[string]string{"x-goog-api-key": p.APIKey, "content-type": "application/json"},
	}, nil
}

// Created reads Gemini's answer: the finished task, or the error that refused it.
func (geminiImage) Created(status int, body []byte) (Created, error) {
	if status != 200 {
		return Created{}, geminiTaskError(status, body)
	}
	var a gemini.Response
	if err := jsonv2.Unmarshal(body, &a, provider.Lenient); err != nil { // v2: a 4 MiB image's base64 is scanned fast
		return Created{}, &Error{Code: "upstream_error", Message: "Gemini's answer is not a GenerateContentResponse"}
	}
	if a.Error != nil {
		return Created{}, &Error{Code: "upstream_error", Message: fmt.Sprintf("Gemini reported %s: %s", cmp.Or(a.Error.Status, "an error"), cmp.Or(a.Error.Message, "no message"))}
	}
	st := geminiImageState(&a)
	return Created{Done: &st}, nil
}

// geminiTaskError maps Gemini's error answer (HTTP status and {"error": {code, message,
// status}}): a refused key is the gateway's credential (the next provider is tried), another
// 400 the client's request, 429 and 5xx the provider's trouble.
func geminiTaskError(status int, body []byte) *Error {
	var e struct {
		Error gemini.Error `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	msg := fmt.Sprintf("Gemini HTTP %d %s: %s", status, e.Error.Status, cmp.Or(e.Error.Message, "no message"))
	if gemini.RefusesCredential(status, body) {
		return &Error{Code: "provider_auth_failed", Message: msg}
	}
	return &Error{Code: httpCode(status), Message: msg}
}

// geminiImageState is the finished task an answer with HTTP 200 describes.
func geminiImageState(a *gemini.Response) State {
	st := State{Status: Failed, Progress: 100}
	if len(a.Candidates) == 0 {
		st.PromptTokens, st.CompletionTokens, st.ImageTokens = GeminiImageUsage(a.UsageMetadata, "", 0)
		if pf := a.PromptFeedback; pf != nil && pf.BlockReason != "" {
			st.FamilyStatus = "blockReason " + clip(pf.BlockReason)
			st.Error = &Error{Code: "content_filter", Message: clipMessage((&provider.BlockedError{Provider: "Gemini", Reason: pf.BlockReason, Message: pf.BlockReasonMessage}).Error())}
			return st
		}
		st.FamilyStatus = "no candidates"
		st.Error = &Error{Code: "no_image", Message: "Gemini answered without a candidate or a reason"}
		return st
	}
	cand := a.Candidates[0]
	st.FamilyStatus = clip(cand.FinishReason)
	var text strings.Builder
	for _, p := range cand.Content.Parts {
		switch {
		case p.Thought: // interim images and reasoning: not the answer, and not billed as images
		case p.InlineData != nil && strings.HasPrefix(p.InlineData.MimeType, "image/"):
			if len(st.Images) == GeminiMaxImages {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(p.InlineData.Data)
			if err != nil {
				st.Error = &Error{Code: "upstream_error", Message: "Gemini sent an image that is not valid base64"}
				st.Images = nil
				st.PromptTokens, st.CompletionTokens, st.ImageTokens = GeminiImageUsage(a.UsageMetadata, text.String(), 0)
				return st
			}
			im := Image{Data: data, MIMEType: clip(p.InlineData.MimeType)}
			if cfg, _, err := image.DecodeConfig(bytes.NewReader(data)); err == nil {
				im.Width, im.Height = cfg.Width, cfg.Height
			}
			st.Images = append(st.Images, im)
		case p.Text != "":
			text.WriteString(p.Text)
		}
	}
	st.Text = provider.Cut(text.String(), geminiMaxText)
	st.PromptTokens, st.CompletionTokens, st.ImageTokens = GeminiImageUsage(a.UsageMetadata, text.String(), len(st.Images))
	if len(st.Images) > 0 {
		st.Status = Completed
		return st
	}
	reason := cmp.Or(cand.FinishReason, "none")
	code := "no_image"
	if slices.Contains(gemini.FilterReasons, cand.FinishReason) {
		code = "content_filter"
	}
	msg := "Gemini returned no image (finishReason " + reason + ")"
	if cand.FinishMessage != "" {
		msg += ": " + cand.FinishMessage
	} else if st.Text != "" {
		msg += "; the model said: " + st.Text
	}
	st.Error = &Error{Code: code, Message: clipMessage(msg)}
	return st
}

// GeminiImageUsage is the usage of an image answer that returned text and images images:
// prompt tokens (grounding's tool-use prompt included), completion = every output token
// Gemini reports (candidatesTokenCount, text and images alike, plus thinking), and of those
// the images' (candidatesTokensDetails' IMAGE entries), which the bill prices per image
// where the model has an image price (ir.Pricing.Cost). Gemini's breakdown may list only the
// IMAGE entry though text came back, so the text is what is left, never the TEXT entries
// alone. Without a breakdown the text is counted with the gateway's tokenizer (o200k_base, an
// estimate, at most what Gemini reports) and the images are the rest.
func GeminiImageUsage(u *gemini.UsageMetadata, text string, images int) (prompt, completion, imageTokens int64) {
	if u == nil {
		if text == "" {
			return 0, 0, 0
		}
		return 0, int64(billing.CountText(text)), 0
	}
	output := provider.Tokens(u.CandidatesTokenCount)
	switch {
	case len(u.CandidatesTokensDetails) > 0:
		for _, d := range u.CandidatesTokensDetails {
			if d.Modality == "IMAGE" {
				imageTokens = provider.Tokens(imageTokens, d.TokenCount)
			}
		}
	case images > 0:
		imageTokens = output - min(int64(billing.CountText(text)), output)
	}
	return provider.Tokens(u.PromptTokenCount, u.ToolUsePromptTokenCount), provider.Tokens(output, u.ThoughtsTokenCount), min(imageTokens, output)
}

// The answer is the finished task: there is nothing to query.
func (geminiImage) Query(*ir.Provider, *ir.Model, string) (*provider.Upstream, error) {
	return nil, errors.New("gemini: image tasks finish at creation; there is nothing to query")
}

func (geminiImage) Queried(int, []byte) (State, error) {
	return State{}, errors.New("gemini: image tasks finish at creation; there is nothing to query")
}

func (geminiImage) Followed(*State, int, []byte) error { return nil }

// clipMessage bounds an error message the task store keeps (4,096 bytes).
func clipMessage(s string) string { return provider.Cut(s, 4000) }
