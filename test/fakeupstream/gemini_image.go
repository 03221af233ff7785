package fakeupstream

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Gemini's image models (family I3): POST /v1beta/models/{model}:generateContent for a model
// whose name has "-image" (gemini-2.5-flash-image, gemini-3-pro-image-preview,
// gemini-3.1-flash-image-preview) answers as those models do: real images as inlineData parts
// (PNG, or JPEG on request), text beside them when responseModalities has TEXT, thought parts
// (an interim image and reasoning, thought: true) and thoughtsTokenCount from pro models, and
// usageMetadata as the real API writes it: candidatesTokenCount counts the text and the
// images, but candidatesTokensDetails lists only the IMAGE entry (recorded answers of
// gemini-2.5-flash-image and gemini-3-pro-image-preview show it; Vertex lists TEXT too, see
// GeminiTextDetailsTrigger). The API key is checked by geminiRoute.
//
// The request is checked as the real API would: generationConfig.imageConfig (never the
// spec's responseFormat, which Gemini does not know), its aspect ratio and size allowed for
// the model, no function tools, inline images that are base64. Prompt triggers in the text
// pick unhappy answers (see the Gemini*Trigger constants); scripted faults (Script) apply.

// Prompt triggers of the image fake.
const (
	// GeminiNoImageTrigger: HTTP 200, finishReason NO_IMAGE, a text part and no image.
	GeminiNoImageTrigger = "#no-image"
	// GeminiImageSafetyTrigger: HTTP 200, finishReason IMAGE_SAFETY, no parts.
	GeminiImageSafetyTrigger = "#image-safety"
	// GeminiInvalidTrigger: HTTP 400 INVALID_ARGUMENT, as for a request the model refuses.
	GeminiInvalidTrigger = "#invalid"
	// GeminiLargeImageTrigger: the image is GeminiLargeImage, a 4 MiB PNG.
	GeminiLargeImageTrigger = "#large-image"
	// GeminiJPEGTrigger: the image is a JPEG.
	GeminiJPEGTrigger = "#jpeg"
	// GeminiTwoImagesTrigger: two images with text between them.
	GeminiTwoImagesTrigger = "#two-images"
	// GeminiNoDetailsTrigger: usageMetadata without candidatesTokensDetails.
	GeminiNoDetailsTrigger = "#no-details"
	// GeminiTextDetailsTrigger: candidatesTokensDetails lists the TEXT entry beside the IMAGE
	// one, as Vertex writes it.
	GeminiTextDetailsTrigger = "#text-details"
	// GeminiSlowTrigger followed by a Go duration ("#slow=6s") waits that long before answering.
	GeminiSlowTrigger = "#slow="
)

// Token counts of the image fake: the text is counted in words, an input image is 258 tokens,
// a pro model thinks 37 tokens; an output image costs what Google's model pages say.
const (
	geminiFakeInputImage = 258
	geminiFakeThoughts   = 37
)

// GeminiImageTokens is what the fake bills for one output image of model at imageSize.
func GeminiImageTokens(model, imageSize string) int {
	switch {
	case strings.Contains(model, "2.5"):
		return 1290
	case strings.Contains(model, "3.1"):
		switch imageSize {
		case "512":
			return 747
		case "2K":
			return 1680
		case "4K":
			return 2520
		}
	case imageSize == "4K":
		return 2000
	}
	return 1120
}

var (
	geminiCommonRatios = []string{"1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"}
	geminiWideRatios   = []string{"1:4", "4:1", "1:8", "8:1"}
)

type geminiImageRequest struct {
	Contents []struct {
		Role  string `json:"role"`
		Parts []struct {
			Text        string          `json:"text"`
			InlineData  *geminiBlob     `json:"inlineData"`
			InlineSnake *geminiBlob     `json:"inline_data"`
			FileData    json.RawMessage `json:"fileData"`
		} `json:"parts"`
	} `json:"contents"`
	SystemInstruction json.RawMessage              `json:"systemInstruction"`
	GenerationConfig  map[string]json.RawMessage   `json:"generationConfig"`
	Tools             []map[string]json.RawMessage `json:"tools"`
	SafetySettings    json.RawMessage              `json:"safetySettings"`
}

type geminiBlob struct {
	MimeType  string `json:"mimeType"`
	MimeSnake string `json:"mime_type"`
	Data      string `json:"data"`
}

// geminiImageRoute answers model's generateContent if it is an image model; it reports whether
// it answered.
func (s *Server) geminiImageRoute(w http.ResponseWriter, r *http.Request, body []byte, model, method string) bool {
	if !strings.Contains(model, "-image") {
		return false
	}
	if replied, _ := s.applyFault(w, r, geminiFaultMessage, func(code int, msg string) { writeGeminiError(w, code, msg) }); replied {
		return true
	}
	bad := func(msg string) bool {
		writeGeminiError(w, http.StatusBadRequest, msg)
		return true
	}
	if r.Method != http.MethodPost || method != "generateContent" {
		return bad("fakeupstream: image models are only implemented with generateContent")
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return bad("Invalid JSON payload received. Unexpected token.")
	}
	for f := range fields {
		if !slices.Contains([]string{"contents", "systemInstruction", "generationConfig", "tools", "safetySettings"}, f) {
			return bad(fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", f))
		}
	}
	var req geminiImageRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad("Invalid JSON payload received. " + err.Error())
	}
	var modalities []string
	var cfg struct {
		AspectRatio string `json:"aspectRatio"`
		ImageSize   string `json:"imageSize"`
	}
	for k, v := range req.GenerationConfig {
		switch k {
		case "responseModalities":
			_ = json.Unmarshal(v, &modalities)
		case "imageConfig":
			if json.Unmarshal(v, &cfg) != nil {
				return bad("Invalid JSON payload received. Invalid imageConfig.")
			}
		case "maxOutputTokens", "temperature", "topP", "seed", "stopSequences", "presencePenalty", "frequencyPenalty":
		default:
			return bad(fmt.Sprintf("Invalid JSON payload received. Unknown name %q at 'generation_config': Cannot find field.", k))
		}
	}
	ratios := geminiCommonRatios
	if strings.Contains(model, "3.1") {
		ratios = slices.Concat(ratios, geminiWideRatios)
	}
	sizes := []string{"1K", "2K", "4K"}
	switch {
	case strings.Contains(model, "2.5"):
		sizes = nil
	case strings.Contains(model, "3.1"):
		sizes = append(sizes, "512")
	}
	switch {
	case !slices.Contains(modalities, "IMAGE"):
		return bad("fakeupstream: an image model needs IMAGE in generationConfig.responseModalities")
	case cfg.AspectRatio != "" && !slices.Contains(ratios, cfg.AspectRatio):
		return bad("* GenerateContentRequest.generation_config.image_config.aspect_ratio: unsupported aspect ratio " + cfg.AspectRatio)
	case cfg.ImageSize != "" && !slices.Contains(sizes, cfg.ImageSize):
		return bad("* GenerateContentRequest.generation_config.image_config.image_size: unsupported image size " + cfg.ImageSize)
	case len(req.Contents) == 0:
		return bad("* GenerateContentRequest.contents: contents is not specified")
	}
	for _, t := range req.Tools {
		for k := range t {
			if k != "googleSearch" && k != "google_search" {
				return bad("Function calling is not enabled for models/" + model)
			}
		}
		if strings.Contains(model, "2.5") {
			return bad("Search as tool is not enabled for models/" + model)
		}
	}
	var prompt []string
	inputImages := 0
	for _, c := range req.Contents {
		if c.Role != "" && c.Role != "user" && c.Role != "model" {
			return bad("Please use a valid role: user, model.")
		}
		for _, p := range c.Parts {
			blob := p.InlineData
			if blob == nil {
				blob = p.InlineSnake
			}
			switch {
			case p.Text != "":
				prompt = append(prompt, p.Text)
			case blob != nil:
				if _, err := base64.StdEncoding.DecodeString(blob.Data); err != nil || !strings.HasPrefix(blob.MimeType+blob.MimeSnake, "image/") {
					return bad("Invalid value at 'contents.parts.inline_data.data' (TYPE_BYTES), Base64 decoding failed")
				}
				inputImages++
			case p.FileData != nil:
				inputImages++
			}
		}
	}
	text := strings.Join(prompt, " ")
	if i := strings.Index(text, GeminiSlowTrigger); i >= 0 {
		d, _ := time.ParseDuration(strings.Fields(text[i+len(GeminiSlowTrigger):] + " ")[0])
		if !sleep(r.Context(), d) {
			return true
		}
	}
	if strings.Contains(text, GeminiInvalidTrigger) {
		return bad("Request contains an invalid argument.")
	}
	s.geminiImageAnswer(w, model, text, inputImages, modalities, cfg.AspectRatio, cfg.ImageSize)
	return true
}

type geminiModalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

// geminiImageAnswer writes the 200 answer to prompt.
func (s *Server) geminiImageAnswer(w http.ResponseWriter, model, prompt string, inputImages int, modalities []string, aspectRatio, imageSize string) {
	promptTokens := len(strings.Fields(prompt)) + inputImages*geminiFakeInputImage
	usage := map[string]any{
		"promptTokenCount":    promptTokens,
		"promptTokensDetails": []geminiModalityCount{{"TEXT", promptTokens - inputImages*geminiFakeInputImage}, {"IMAGE", inputImages * geminiFakeInputImage}},
		"totalTokenCount":     promptTokens,
	}
	out := map[string]any{"modelVersion": model, "responseId": "fake-image-" + s.nextID(), "usageMetadata": usage}
	if strings.Contains(prompt, GeminiBlockTrigger) {
		out["promptFeedback"] = map[string]any{"blockReason": "SAFETY"}
		writeJSON(w, out)
		return
	}
	withText := slices.Contains(modalities, "TEXT")
	var parts []any
	textTokens, images, finish := 0, 0, "STOP"
	addText := func(t string) {
		parts = append(parts, map[string]any{"text": t})
		textTokens += len(strings.Fields(t))
	}
	addImage := func() {
		data, mime := GeminiImageFor(prompt, aspectRatio, imageSize, images)
		parts = append(parts, map[string]any{"inlineData": map[string]any{"mimeType": mime, "data": base64.StdEncoding.EncodeToString(data)}})
		images++
	}
	pro := strings.Contains(model, "-pro-")
	switch {
	case strings.Contains(prompt, GeminiNoImageTrigger):
		finish = "NO_IMAGE"
		addText("I can describe it, but I did not draw it.")
	case strings.Contains(prompt, GeminiImageSafetyTrigger):
		finish = "IMAGE_SAFETY"
	default:
		if pro {
			// Gemini 3 Pro thinks first: an interim image and its reasoning, both thoughts.
			data, mime := GeminiImageFor("thought "+prompt, aspectRatio, imageSize, 0)
			parts = append(parts, map[string]any{"text": "Composing the scene.", "thought": true},
				map[string]any{"inlineData": map[string]any{"mimeType": mime, "data": base64.StdEncoding.EncodeToString(data)}, "thought": true})
		}
		if withText {
			addText("Here is your image: " + prompt)
		}
		addImage()
		if strings.Contains(prompt, GeminiTwoImagesTrigger) {
			if withText {
				addText("And another one.")
			}
			addImage()
		}
	}
	cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
	if parts == nil {
		cand["content"] = map[string]any{}
	}
	out["candidates"] = []any{cand}
	imageTokens := images * GeminiImageTokens(model, imageSize)
	usage["candidatesTokenCount"] = textTokens + imageTokens
	usage["totalTokenCount"] = promptTokens + textTokens + imageTokens
	if !strings.Contains(prompt, GeminiNoDetailsTrigger) {
		var details []geminiModalityCount
		if textTokens > 0 && strings.Contains(prompt, GeminiTextDetailsTrigger) {
			details = append(details, geminiModalityCount{"TEXT", textTokens})
		}
		if imageTokens > 0 {
			details = append(details, geminiModalityCount{"IMAGE", imageTokens})
		}
		if details != nil {
			usage["candidatesTokensDetails"] = details
		}
	}
	if pro {
		usage["thoughtsTokenCount"] = geminiFakeThoughts
		usage["totalTokenCount"] = usage["totalTokenCount"].(int) + geminiFakeThoughts
	}
	b, _ := json.Marshal(out)
	writeWhole(w, append(b, '\n'), -1)
}

// GeminiImageFor is image index of the fake's answer to prompt at aspectRatio and imageSize:
// its bytes and MIME type. A small gradient PNG whose colours follow the prompt, long side 32 px
// at 512, 64 at 1K (the default), 128 at 2K, 256 at 4K; a JPEG for GeminiJPEGTrigger;
// GeminiLargeImage for GeminiLargeImageTrigger.
func GeminiImageFor(prompt, aspectRatio, imageSize string, index int) ([]byte, string) {
	if strings.Contains(prompt, GeminiLargeImageTrigger) {
		return GeminiLargeImage(), "image/png"
	}
	long := map[string]int{"512": 32, "2K": 128, "4K": 256}[imageSize]
	if long == 0 {
		long = 64
	}
	w, h := long, long
	if a, b, ok := strings.Cut(aspectRatio, ":"); ok {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		if x > 0 && y > 0 {
			if x >= y {
				h = max(long*y/x, 1)
			} else {
				w = max(long*x/y, 1)
			}
		}
	}
	f := fnv.New32a()
	fmt.Fprintf(f, "%s#%d", prompt, index)
	seed := f.Sum32()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(seed) + uint8(x*4), uint8(seed>>8) + uint8(y*4), uint8(seed >> 16), 255})
		}
	}
	var buf bytes.Buffer
	if strings.Contains(prompt, GeminiJPEGTrigger) {
		_ = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90})
		return buf.Bytes(), "image/jpeg"
	}
	_ = png.Encode(&buf, img)
	return buf.Bytes(), "image/png"
}

var (
	largeImageOnce sync.Once
	largeImage     []byte
)

// GeminiLargeImage is a 1024 x 1024 PNG of noise, stored uncompressed: 4 MiB and a little
// (about 5.6 MB in base64), the size of a large real answer. Made once, the same every time.
func GeminiLargeImage() []byte {
	largeImageOnce.Do(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		img := image.NewNRGBA(image.Rect(0, 0, 1024, 1024))
		for i := range img.Pix {
			img.Pix[i] = uint8(rng.Uint32())
		}
		var buf bytes.Buffer
		_ = (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(&buf, img)
		largeImage = buf.Bytes()
	})
	return largeImage
}
