package provider

// The I3 request rules (spec 4.4, 8), checked before any upstream call: the Generate-Content
// body a client sends, read without copying its inline images, and the bounds that size its
// hold. The adapter is gemini_image.go.

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

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

func (geminiImage) Validate(m *ir.Model, req Request) (TaskRequest, error) {
	b, err := decodeI3(m, req, true)
	if err != nil {
		return TaskRequest{}, err
	}
	out := geminiOutput(m)
	return TaskRequest{
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
func decodeI3(m *ir.Model, req Request, check bool) (*i3Body, error) {
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
	raw := rawField(req, "contents")
	if raw == nil {
		return nil, fmt.Errorf(`%w: contents is required: [{"role": "user", "parts": [{"text": "a red fox in snow"}]}]`, ErrBadRequest)
	}
	turns, err := arrayOf("contents", raw, "an array of user turns")
	if err != nil {
		return nil, err
	}
	if len(turns) == 0 {
		return nil, fmt.Errorf("%w: contents is empty: send one user turn with a text part", ErrBadRequest)
	}
	hasText := false
	for i, t := range turns {
		at := fmt.Sprintf("contents[%d]", i)
		obj, err := jsonObject(at, t, i3TurnFields)
		if err != nil {
			return nil, err
		}
		if role, ok, err := readString(at+".role", obj["role"]); err != nil {
			return nil, err
		} else if ok && role != "user" {
			return nil, fmt.Errorf("%w: %s.role %q is not allowed: I3 takes user turns (text and inline_data parts); send an image to edit as inline_data", ErrBadRequest, at, clipText(role))
		}
		praw := rawField(obj, "parts")
		if praw == nil {
			return nil, fmt.Errorf(`%w: %s.parts is required: [{"text": "..."}]`, ErrBadRequest, at)
		}
		parts, err := arrayOf(at+".parts", praw, "an array of parts")
		if err != nil {
			return nil, err
		}
		if len(parts) == 0 {
			return nil, fmt.Errorf("%w: %s.parts is empty: send a text part", ErrBadRequest, at)
		}
		var turn []i3Part
		for j, p := range parts {
			pat := fmt.Sprintf("%s.parts[%d]", at, j)
			part, err := jsonObject(pat, p, i3PartFields)
			if err != nil {
				return nil, err
			}
			switch {
			case len(part) != 1:
				return nil, fmt.Errorf(`%w: %s must have one of text or inline_data: {"text": "..."} or {"inline_data": {"mime_type": "image/png", "data": "<base64>"}}`, ErrBadRequest, pat)
			case part["text"] != nil:
				s, _, err := readString(pat+".text", part["text"])
				if err != nil {
					return nil, err
				}
				if s == "" {
					return nil, fmt.Errorf("%w: %s.text is empty", ErrBadRequest, pat)
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
		return nil, fmt.Errorf("%w: contents has no text part: say what to generate", ErrBadRequest)
	}
	if err := b.generation(m, rawField(req, "generationConfig")); err != nil {
		return nil, err
	}
	if err := b.tools(m, rawField(req, "tools")); err != nil {
		return nil, err
	}
	return b, nil
}

// generation reads generationConfig: responseModalities and responseFormat.image.
func (b *i3Body) generation(m *ir.Model, raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	gc, err := jsonObject("generationConfig", raw, i3GenFields)
	if err != nil {
		return err
	}
	if mr := rawField(gc, "responseModalities"); mr != nil {
		items, err := arrayOf("generationConfig.responseModalities", mr, `["TEXT", "IMAGE"] or ["IMAGE"]`)
		if err != nil {
			return err
		}
		mods := make([]string, len(items))
		for i, it := range items {
			if mods[i], _, err = readString(fmt.Sprintf("generationConfig.responseModalities[%d]", i), it); err != nil {
				return err
			}
		}
		sorted := slices.Sorted(slices.Values(mods))
		if !slices.Equal(sorted, []string{"IMAGE"}) && !slices.Equal(sorted, []string{"IMAGE", "TEXT"}) {
			return fmt.Errorf(`%w: generationConfig.responseModalities %s is not allowed: use ["TEXT", "IMAGE"] (text and images) or ["IMAGE"] (images only)`, ErrBadRequest, clipText(string(mr)))
		}
		b.modalities = mods
	}
	at, imgRaw := "generationConfig.imageConfig", rawField(gc, "imageConfig")
	if rf := rawField(gc, "responseFormat"); rf != nil {
		f, err := jsonObject("generationConfig.responseFormat", rf, []string{"image"})
		if err != nil {
			return err
		}
		if v := rawField(f, "image"); v != nil && imgRaw != nil {
			return fmt.Errorf("%w: generationConfig.responseFormat.image and generationConfig.imageConfig are the same settings (the spec's name and Gemini's); send one", ErrBadRequest)
		} else if v != nil {
			at, imgRaw = "generationConfig.responseFormat.image", v
		}
	}
	if imgRaw == nil {
		return nil
	}
	img, err := jsonObject(at, imgRaw, i3ImageFields)
	if err != nil {
		return err
	}
	at += "."
	ratio, hasRatio, err := readString(at+"aspectRatio", img["aspectRatio"])
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
			return fmt.Errorf("%w: %saspectRatio %q is not allowed for %s (variant %s): use one of %s%s", ErrBadRequest, at, clipText(ratio), m.ID, m.Variant, strings.Join(ratios, ", "), hint)
		}
		b.aspectRatio = ratio
	}
	size, hasSize, err := readString(at+"imageSize", img["imageSize"])
	if err != nil {
		return err
	}
	if hasSize {
		sizes := i3Sizes(m.Variant)
		switch {
		case len(sizes) == 0:
			return fmt.Errorf("%w: %simageSize is not taken by %s (variant %s): leave it out (its images are 1024 px)", ErrBadRequest, at, m.ID, m.Variant)
		case !slices.Contains(sizes, size):
			hint := ""
			if size == "512" {
				hint = " (512 is for flash-3.1 models only)"
			}
			return fmt.Errorf("%w: %simageSize %q is not allowed for %s (variant %s): use one of %s%s", ErrBadRequest, at, clipText(size), m.ID, m.Variant, strings.Join(sizes, ", "), hint)
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
	tools, err := arrayOf("tools", raw, `an array of tools ([{"google_search": {}}])`)
	if err != nil {
		return err
	}
	for i, t := range tools {
		at := fmt.Sprintf("tools[%d]", i)
		tool, err := jsonObject(at, t, []string{"google_search"})
		if err != nil {
			return err
		}
		gs := rawField(tool, "google_search")
		switch {
		case gs == nil:
			return fmt.Errorf(`%w: %s must be {"google_search": {}}`, ErrBadRequest, at)
		case gs[0] != '{':
			return wrongType(at+".google_search", "an empty object {}", gs)
		}
		if _, err := jsonObject(at+".google_search", gs, nil); err != nil {
			return fmt.Errorf(`%w: %s.google_search takes no options: send {"google_search": {}}`, ErrBadRequest, at)
		}
		if m.Variant != variantPro && m.Variant != variantFlash31 {
			return fmt.Errorf("%w: %s: google_search is for pro and flash-3.1 models; %s is variant %s: remove tools", ErrBadRequest, at, m.ID, m.Variant)
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
	blob, err := jsonObject(at, raw, i3BlobFields)
	if err != nil {
		return i3Part{}, err
	}
	mt, _, err := readString(at+".mime_type", blob["mime_type"])
	if err != nil {
		return i3Part{}, err
	}
	norm := strings.ToLower(strings.TrimSpace(mt))
	if norm == "image/jpg" {
		norm = "image/jpeg"
	}
	data := rawField(blob, "data")
	switch {
	case !slices.Contains(gemImageTypes, norm):
		return i3Part{}, fmt.Errorf("%w: %s.mime_type %q is not allowed: Gemini takes images as %s", ErrBadRequest, at, clipText(mt), strings.Join(gemImageTypes, ", "))
	case data == nil:
		return i3Part{}, fmt.Errorf("%w: %s.data is required: the image in base64, as a string", ErrBadRequest, at)
	case len(data) < 2 || data[0] != '"':
		return i3Part{}, wrongType(at+".data", "a string (the image in base64)", data)
	case len(data) == 2:
		return i3Part{}, fmt.Errorf("%w: %s.data is empty: send the image in base64", ErrBadRequest, at)
	case !check:
		return i3Part{mime: norm, data: data}, nil
	}
	b64 := data[1 : len(data)-1]
	if bytes.IndexByte(b64, '\\') >= 0 { // escaped ("\/"): decode the string the slow way
		var str string
		if json.Unmarshal(data, &str) != nil {
			return i3Part{}, wrongType(at+".data", "a string (the image in base64)", data)
		}
		b64 = []byte(str)
	}
	head, size, err := base64Head(b64)
	switch {
	case errors.Is(err, errTooLarge):
		return i3Part{}, fmt.Errorf("%w: %s.data is %d bytes decoded; at most 20 MiB (%d bytes)", ErrBadRequest, at, size, geminiInlineMax)
	case err != nil:
		return i3Part{}, fmt.Errorf("%w: %s.data is not valid base64 (standard alphabet, = padded)", ErrBadRequest, at)
	}
	got := imageFormat(head)
	if got == "" && len(head) < size { // a header past the first bytes (a JPEG's large EXIF)
		full, _ := base64.StdEncoding.DecodeString(string(b64))
		got = imageFormat(full)
	}
	if got != strings.TrimPrefix(norm, "image/") && !(got == "heif" && (norm == "image/heic" || norm == "image/heif")) {
		return i3Part{}, fmt.Errorf("%w: %s.data is not a %s image (its bytes say %q); set mime_type to the image's type", ErrBadRequest, at, norm, cmp.Or(got, "unknown"))
	}
	return i3Part{mime: norm, data: data}, nil
}

var errTooLarge = errors.New("over the size limit")

// base64Size is the decoded size of padded base64 text, read from its length.
func base64Size[T string | []byte](b64 T) int {
	n := len(b64) / 4 * 3
	for i := len(b64) - 1; i >= len(b64)-2 && i >= 0 && b64[i] == '='; i-- {
		n--
	}
	return n
}

// base64Head checks b64 as padded standard base64 of at most geminiInlineMax bytes, a chunk at
// a time (nothing the size of the image is allocated), and returns its first 256 KiB decoded
// (where image headers are) and its decoded size.
func base64Head(b64 []byte) (head []byte, size int, err error) {
	const chunk = 256 << 10 // encoded bytes per step, a multiple of 4
	if len(b64)%4 != 0 {
		return nil, 0, errors.New("base64: length not a multiple of 4")
	}
	if size = base64Size(b64); size > geminiInlineMax {
		return nil, size, errTooLarge
	}
	buf := make([]byte, chunk/4*3)
	for off := 0; off < len(b64); off += chunk {
		part := b64[off:min(off+chunk, len(b64))]
		n, err := base64.StdEncoding.Decode(buf, part)
		if err != nil || (off+chunk < len(b64) && n != len(buf)) { // padding before the end
			return nil, size, errors.New("base64: invalid data")
		}
		if off == 0 {
			head = bytes.Clone(buf[:n])
		}
	}
	return head, size, nil
}

// imageFormat names the format of an image's bytes: png, jpeg, webp (decoded headers), heif
// (HEIC and HEIF: an ISO BMFF ftyp box with an HEIF brand), or "".
func imageFormat(b []byte) string {
	if _, format, err := image.DecodeConfig(bytes.NewReader(b)); err == nil {
		return format
	}
	if len(b) >= 12 && string(b[4:8]) == "ftyp" && slices.Contains(heifBrands, string(b[8:12])) {
		return "heif"
	}
	return ""
}

// Small readers of the I3 body that name the field in their refusals. Values are subslices of
// the request (jsonObject, arrayOf): a 20 MiB image is not copied until it is decoded.

// jsonObject reads the object at (nil raw is absent: an empty object), its members named as
// known spells them (protoNames); a member outside known is refused with the list (known nil:
// no members allowed).
func jsonObject(at string, raw json.RawMessage, known []string) (Request, error) {
	if len(raw) == 0 {
		return Request{}, nil
	}
	if raw[0] != '{' {
		return nil, wrongType(at, "an object", raw)
	}
	obj, err := ParseRequest(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not valid JSON", ErrBadRequest, at)
	}
	if err := protoNames(at, obj, known); err != nil {
		return nil, err
	}
	for k := range obj {
		if !slices.Contains(known, k) {
			allowed := "none"
			if len(known) > 0 {
				allowed = strings.Join(known, ", ")
			}
			return nil, fmt.Errorf("%w: %s does not take field %q; its fields are %s", ErrBadRequest, at, clipText(k), allowed)
		}
	}
	return obj, nil
}

// protoNames renames the members of obj spelt the other way proto JSON allows (Gemini's API
// reads a field by its lowerCamelCase JSON name or by its declared snake_case name:
// inlineData or inline_data) to the spelling known uses. A member sent both ways is refused.
func protoNames(at string, obj Request, known []string) error {
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
			return fmt.Errorf("%w: %s%s and %s are the same field (Gemini's JSON spells it both ways); send one", ErrBadRequest, where, alt, clipText(k))
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

// arrayOf reads the array at field into its elements, each a subslice of raw; want says what
// the value must be.
func arrayOf(field string, raw json.RawMessage, want string) ([]json.RawMessage, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw)) // a Buffer is parsed in place
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '[' {
		return nil, wrongType(field, want, cmpRaw(bytes.TrimSpace(raw), "null"))
	}
	var out []json.RawMessage
	for dec.PeekKind() != ']' {
		v, err := dec.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not valid JSON", ErrBadRequest, field)
		}
		end := int(dec.InputOffset())
		out = append(out, raw[end-len(v):end:end])
	}
	return out, nil
}
