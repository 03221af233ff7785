package task

// The I3 request rules (docs/media.md#image-families), checked before any upstream call: the
// Generate-Content body a client sends, read without copying its inline images, and the bounds that
// size its hold. The adapter is images_gemini.go.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/provider"

	"github.com/tollway/tollway/xds/ir"
)

// i3Body is a checked I3 request.
type i3Body struct {
	contents    [][]i3Part // user turns
	modalities  []string
	aspectRatio string
	imageSize   string
	search      bool
	images      int   // inline images
	textBytes   int64 // prompt text
	callbackURL string
}

func (geminiImage) Validate(m *ir.Model, req provider.Request) (Validated, error) {
	b, err := decodeI3(m, req, true)
	if err != nil {
		return Validated{}, err
	}
	out := geminiOutput(m)
	return Validated{
		MaxImages:       GeminiImagesBound(m.Variant, b.imageSize, out),
		PromptTokens:    b.textBytes + int64(b.images)*geminiImagePromptTokens + int64(len(b.contents))*geminiTurnTokens,
		MaxOutputTokens: out,
		CallbackURL:     b.callbackURL,
	}, nil
}

// geminiOutput is the output bound of an I3 model: its max_output_length (sent to Gemini as
// maxOutputTokens), else Gemini's own limit.
func geminiOutput(m *ir.Model) int64 {
	if m.MaxOutputLength > 0 {
		return min(m.MaxOutputLength, GeminiImageMaxOutput)
	}
	return GeminiImageMaxOutput
}

// decodeI3 reads an I3 body and applies the family's rules; check also decodes the inline
// images (Create re-reads a body Validate accepted, and skips that).
func decodeI3(m *ir.Model, req provider.Request, check bool) (*i3Body, error) {
	req = maps.Clone(req) // protoNames renames members: the caller's request stays as sent
	if err := protoNames("", req, i3Fields); err != nil {
		return nil, err
	}
	if err := onlyFields(geminiImageName, req, i3Fields); err != nil {
		return nil, err
	}
	b := &i3Body{modalities: []string{"TEXT", "IMAGE"}}
	cb, _, err := stringOf(req, "callback_url")
	if err != nil {
		return nil, err
	}
	b.callbackURL = cb
	raw := provider.Field(req, "contents")
	if raw == nil {
		return nil, fmt.Errorf(`%w: contents is required: [{"role": "user", "parts": [{"text": "a red fox in snow"}]}]`, provider.ErrBadRequest)
	}
	turns, err := provider.Array("contents", raw, "an array of user turns")
	if err != nil {
		return nil, err
	}
	if len(turns) == 0 {
		return nil, fmt.Errorf("%w: contents is empty: send one user turn with a text part", provider.ErrBadRequest)
	}
	hasText := false
	for i, t := range turns {
		at := fmt.Sprintf("contents[%d]", i)
		obj, err := protoObject(at, t, i3TurnFields)
		if err != nil {
			return nil, err
		}
		if role, ok, err := provider.ReadString(at+".role", obj["role"]); err != nil {
			return nil, err
		} else if ok && role != "user" {
			return nil, fmt.Errorf("%w: %s.role %q is not allowed: I3 takes user turns (text and inline_data parts); send an image to edit as inline_data", provider.ErrBadRequest, at, clip(role))
		}
		praw := provider.Field(obj, "parts")
		if praw == nil {
			return nil, fmt.Errorf(`%w: %s.parts is required: [{"text": "..."}]`, provider.ErrBadRequest, at)
		}
		parts, err := provider.Array(at+".parts", praw, "an array of parts")
		if err != nil {
			return nil, err
		}
		if len(parts) == 0 {
			return nil, fmt.Errorf("%w: %s.parts is empty: send a text part", provider.ErrBadRequest, at)
		}
		var turn []i3Part
		for j, p := range parts {
			pat := fmt.Sprintf("%s.parts[%d]", at, j)
			part, err := protoObject(pat, p, i3PartFields)
			if err != nil {
				return nil, err
			}
			switch {
			case len(part) != 1:
				return nil, fmt.Errorf(`%w: %s must have one of text or inline_data: {"text": "..."} or {"inline_data": {"mime_type": "image/png", "data": "<base64>"}}`, provider.ErrBadRequest, pat)
			case part["text"] != nil:
				s, _, err := provider.ReadString(pat+".text", part["text"])
				if err != nil {
					return nil, err
				}
				if s == "" {
					return nil, fmt.Errorf("%w: %s.text is empty", provider.ErrBadRequest, pat)
				}
				hasText = true
				b.textBytes += int64(len(s))
				turn = append(turn, i3Part{text: s})
			default:
				img, err := inlineImage(pat+".inline_data", part["inline_data"], check)
				if err != nil {
					return nil, err
				}
				b.images++
				turn = append(turn, img)
			}
		}
		b.contents = append(b.contents, turn)
	}
	if !hasText {
		return nil, fmt.Errorf("%w: contents has no text part: say what to generate", provider.ErrBadRequest)
	}
	if err := b.generation(m, provider.Field(req, "generationConfig")); err != nil {
		return nil, err
	}
	if err := b.tools(m, provider.Field(req, "tools")); err != nil {
		return nil, err
	}
	return b, nil
}

// generation reads generationConfig: responseModalities and responseFormat.image.
func (b *i3Body) generation(m *ir.Model, raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	gc, err := protoObject("generationConfig", raw, i3GenFields)
	if err != nil {
		return err
	}
	if mr := provider.Field(gc, "responseModalities"); mr != nil {
		items, err := provider.Array("generationConfig.responseModalities", mr, `["TEXT", "IMAGE"] or ["IMAGE"]`)
		if err != nil {
			return err
		}
		mods := make([]string, len(items))
		for i, it := range items {
			if mods[i], _, err = provider.ReadString(fmt.Sprintf("generationConfig.responseModalities[%d]", i), it); err != nil {
				return err
			}
		}
		sorted := slices.Sorted(slices.Values(mods))
		if !slices.Equal(sorted, []string{"IMAGE"}) && !slices.Equal(sorted, []string{"IMAGE", "TEXT"}) {
			return fmt.Errorf(`%w: generationConfig.responseModalities %s is not allowed: use ["TEXT", "IMAGE"] (text and images) or ["IMAGE"] (images only)`, provider.ErrBadRequest, clip(string(mr)))
		}
		b.modalities = mods
	}
	at, imgRaw := "generationConfig.imageConfig", provider.Field(gc, "imageConfig")
	if rf := provider.Field(gc, "responseFormat"); rf != nil {
		f, err := protoObject("generationConfig.responseFormat", rf, []string{"image"})
		if err != nil {
			return err
		}
		if v := provider.Field(f, "image"); v != nil && imgRaw != nil {
			return fmt.Errorf("%w: generationConfig.responseFormat.image and generationConfig.imageConfig are the same settings (the spec's name and Gemini's); send one", provider.ErrBadRequest)
		} else if v != nil {
			at, imgRaw = "generationConfig.responseFormat.image", v
		}
	}
	if imgRaw == nil {
		return nil
	}
	img, err := protoObject(at, imgRaw, i3ImageFields)
	if err != nil {
		return err
	}
	at += "."
	ratio, hasRatio, err := provider.ReadString(at+"aspectRatio", img["aspectRatio"])
	if err != nil {
		return err
	}
	if hasRatio {
		ratios := i3AspectRatios
		if m.Variant == variantFlash31 {
			ratios = slices.Concat(i3AspectRatios, i3WideRatios)
		}
		if !slices.Contains(ratios, ratio) {
			hint := ""
			if slices.Contains(i3WideRatios, ratio) {
				hint = " (" + ratio + " is for flash-3.1 models only)"
			}
			return fmt.Errorf("%w: %saspectRatio %q is not allowed for %s (variant %s): use one of %s%s", provider.ErrBadRequest, at, clip(ratio), m.ID, m.Variant, strings.Join(ratios, ", "), hint)
		}
		b.aspectRatio = ratio
	}
	size, hasSize, err := provider.ReadString(at+"imageSize", img["imageSize"])
	if err != nil {
		return err
	}
	if hasSize {
		sizes := i3Sizes(m.Variant)
		switch {
		case len(sizes) == 0:
			return fmt.Errorf("%w: %simageSize is not taken by %s (variant %s): leave it out (its images are 1024 px)", provider.ErrBadRequest, at, m.ID, m.Variant)
		case !slices.Contains(sizes, size):
			hint := ""
			if size == "512" {
				hint = " (512 is for flash-3.1 models only)"
			}
			return fmt.Errorf("%w: %simageSize %q is not allowed for %s (variant %s): use one of %s%s", provider.ErrBadRequest, at, clip(size), m.ID, m.Variant, strings.Join(sizes, ", "), hint)
		}
		b.imageSize = size
	}
	return nil
}

// tools reads tools: [{"google_search": {}}], Google Search grounding (pro and flash-3.1).
func (b *i3Body) tools(m *ir.Model, raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	tools, err := provider.Array("tools", raw, `an array of tools ([{"google_search": {}}])`)
	if err != nil {
		return err
	}
	for i, t := range tools {
		at := fmt.Sprintf("tools[%d]", i)
		tool, err := protoObject(at, t, []string{"google_search"})
		if err != nil {
			return err
		}
		gs := provider.Field(tool, "google_search")
		switch {
		case gs == nil:
			return fmt.Errorf(`%w: %s must be {"google_search": {}}`, provider.ErrBadRequest, at)
		case gs[0] != '{':
			return provider.WrongType(at+".google_search", "an empty object {}", gs)
		}
		if _, err := protoObject(at+".google_search", gs, []string{}); err != nil {
			return fmt.Errorf(`%w: %s.google_search takes no options: send {"google_search": {}}`, provider.ErrBadRequest, at)
		}
		if m.Variant != variantPro && m.Variant != variantFlash31 {
			return fmt.Errorf("%w: %s: google_search is for pro and flash-3.1 models; %s is variant %s: remove tools", provider.ErrBadRequest, at, m.ID, m.Variant)
		}
		b.search = true
	}
	return nil
}

// i3Part is one part of a user turn: text, or an inline image whose data stays the request's
// JSON string (quotes included): a 20 MiB image is neither copied nor re-escaped on its way to
// Gemini.
type i3Part struct {
	text string
	mime string
	data json.RawMessage
}

// inlineImage reads an inline_data image; check also decodes it: valid base64, at most 20 MiB,
// and bytes that are the image type declared (a PNG sent as image/jpeg is refused, not
// guessed).
func inlineImage(at string, raw json.RawMessage, check bool) (i3Part, error) {
	blob, err := protoObject(at, raw, i3BlobFields)
	if err != nil {
		return i3Part{}, err
	}
	mt, _, err := provider.ReadString(at+".mime_type", blob["mime_type"])
	if err != nil {
		return i3Part{}, err
	}
	norm := strings.ToLower(strings.TrimSpace(mt))
	if norm == "image/jpg" {
		norm = "image/jpeg"
	}
	data := provider.Field(blob, "data")
	switch {
	case !slices.Contains(gemini.ImageTypes, norm):
		return i3Part{}, fmt.Errorf("%w: %s.mime_type %q is not allowed: Gemini takes images as %s", provider.ErrBadRequest, at, clip(mt), strings.Join(gemini.ImageTypes, ", "))
	case data == nil:
		return i3Part{}, fmt.Errorf("%w: %s.data is required: the image in base64, as a string", provider.ErrBadRequest, at)
	case len(data) < 2 || data[0] != '"':
		return i3Part{}, provider.WrongType(at+".data", "a string (the image in base64)", data)
	case len(data) == 2:
		return i3Part{}, fmt.Errorf("%w: %s.data is empty: send the image in base64", provider.ErrBadRequest, at)
	case !check:
		return i3Part{mime: norm, data: data}, nil
	}
	b64 := data[1 : len(data)-1]
	if bytes.IndexByte(b64, '\\') >= 0 { // escaped ("\/"): decode the string the slow way
		var str string
		if json.Unmarshal(data, &str) != nil {
			return i3Part{}, provider.WrongType(at+".data", "a string (the image in base64)", data)
		}
		b64 = []byte(str)
	}
	notBase64 := fmt.Errorf("%w: %s.data is not valid base64 (standard alphabet, = padded)", provider.ErrBadRequest, at)
	if len(b64)%4 != 0 {
		return i3Part{}, notBase64
	}
	if size := provider.Base64Size(b64); size > GeminiInlineMax {
		return i3Part{}, fmt.Errorf("%w: %s.data is %d bytes decoded; at most 20 MiB (%d bytes)", provider.ErrBadRequest, at, size, GeminiInlineMax)
	}
	im, err := provider.ReadImage([]byte(b64))
	if err != nil {
		return i3Part{}, notBase64
	}
	got := im.Format
	if im.HEIF {
		got = "heif"
	}
	if got != strings.TrimPrefix(norm, "image/") && !(got == "heif" && (norm == "image/heic" || norm == "image/heif")) {
		return i3Part{}, fmt.Errorf("%w: %s.data is not a %s image (its bytes say %q); set mime_type to the image's type", provider.ErrBadRequest, at, norm, cmp.Or(got, "unknown"))
	}
	return i3Part{mime: norm, data: data}, nil
}

// protoObject reads the object at (nil raw is absent: an empty object), its members named as
// known spells them (protoNames); a member outside known is refused with the list.
func protoObject(at string, raw json.RawMessage, known []string) (provider.Request, error) {
	obj, err := provider.Object(at, raw)
	if err != nil {
		return nil, err
	}
	if err := protoNames(at, obj, known); err != nil {
		return nil, err
	}
	return obj, provider.OnlyMembers(at, obj, known, provider.ItsFields)
}

// protoNames renames the members of obj spelt the other way proto JSON allows (Gemini's API
// reads a field by its lowerCamelCase JSON name or by its declared snake_case name:
// inlineData or inline_data) to the spelling known uses. A member sent both ways is refused.
func protoNames(at string, obj provider.Request, known []string) error {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		alt := otherSpelling(k)
		if slices.Contains(known, k) || alt == k || !slices.Contains(known, alt) {
			continue
		}
		if _, both := obj[alt]; both {
			where := ""
			if at != "" {
				where = at + ": "
			}
			return fmt.Errorf("%w: %s%s and %s are the same field (Gemini's JSON spells it both ways); send one", provider.ErrBadRequest, where, alt, clip(k))
		}
		obj[alt] = obj[k]
		delete(obj, k)
	}
	return nil
}

// otherSpelling is a proto field name in its other JSON spelling: inline_data <-> inlineData.
func otherSpelling(name string) string {
	var b strings.Builder
	if strings.Contains(name, "_") {
		for i, w := range strings.Split(name, "_") {
			if i > 0 && w != "" {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
		}
		return b.String()
	}
	for _, r := range name {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
