package task

// The rules of families I2 and I2b (images_dashscope.go), checked before any provider call
// (docs/media.md#image-families; where the API reference was silent, DashScope's documented
// limits). Each refusal names the field's path, its value and what is allowed.

import (
	"encoding/json"
	"fmt"
	_ "image/gif" // input image formats DashScope takes besides JPEG, PNG and WebP
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"
	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/tiff"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// dsImageFamily is what differs between I2 and I2b.
type dsImageFamily struct {
	name   string   // as messages say it
	params []string // the parameters it takes
	// fixed are the params taken only at their default (I2's n: 1): accepted, never listed by
	// the catalog, which lists what a model honours.
	fixed      []string
	maxImages  int // image parts a request may carry
	imageRules provider.ImageRules
}

var dsImageFamilies = map[string]dsImageFamily{
	// Qwen-Image-Edit's input limits: up to 3 images, each 384 to 3072 px a side, up to 10 MB.
	"I2": {name: "I2 (Qwen-Image)", params: []string{"n", "size", "seed", "watermark", "negative_prompt", "prompt_extend"}, fixed: []string{"n"}, maxImages: 3,
		imageRules: provider.ImageRules{MaxBytes: 10 << 20, MinSide: 384, MaxSide: 3072,
			Formats: []string{"jpeg", "png", "bmp", "tiff", "webp", "gif"}, FormatNames: "JPG, JPEG, PNG, BMP, TIFF, WebP or GIF"}},
	// Wan 2.7 image's: up to 9 images, each 240 to 8000 px a side, aspect 1:8 to 8:1, up to 20 MB.
	"I2b": {name: "I2b (Wan image)", params: []string{"n", "size", "seed", "watermark", "enable_sequential", "thinking_mode", "color_palette"}, maxImages: 9,
		imageRules: provider.ImageRules{MaxBytes: 20 << 20, MinSide: 240, MaxSide: 8000, MinAspect: [2]int{1, 8}, MaxAspect: [2]int{8, 1},
			Formats: []string{"jpeg", "png", "bmp", "webp"}, FormatNames: "JPG, JPEG, PNG, BMP or WebP"}},
}

const (
	qwenMaxPromptTokens  = 1300 // docs/media.md#image-families; counted in o200k tokens
	wanMaxPromptChars    = 5000 // docs/media.md#image-families
	qwenMaxNegativeChars = 500  // DashScope's limit on negative_prompt
	wanMaxImages         = 4    // docs/media.md#image-families: n without enable_sequential ...
	wanMaxSequential     = 12   // ... and with it (DashScope's default n for a set)
	wanMinPixels         = 768 * 768
	wanMaxPixels         = 2048 * 2048
	wanMaxPixelsTextPro  = 4096 * 4096 // the pro variant's text-to-image (4K), not sets
	maxSeed              = 2147483647
)

// qwenSizes are the sizes qwen-image-max and qwen-image-plus take (16:9, 4:3, 1:1, 3:4, 9:16).
var qwenSizes = []string{"1664*928", "1472*1104", "1328*1328", "1104*1472", "928*1664"}

var (
	sizeRE  = regexp.MustCompile(`^([1-9][0-9]{0,4})\*([1-9][0-9]{0,4})$`)
	hexRE   = regexp.MustCompile(`^#[0-9A-Fa-f]{6}$`)
	ratioRE = regexp.MustCompile(`^([0-9]{1,3}(\.[0-9]{1,2})?)%$`)
)

// wanSingleOnly are the I2b parameters that apply only when enable_sequential is off
// (docs/media.md#image-families): in an image set they are checked, then left out, and named in
// x-tollway-removed-params.
var wanSingleOnly = []string{"color_palette", "thinking_mode"}

// wanLeftOut is what of I2b's parameters p DashScope does not get: wanSingleOnly in a set.
func wanLeftOut(p map[string]json.RawMessage) []string {
	if string(provider.Field(p, "enable_sequential")) != "true" {
		return nil
	}
	var out []string
	for _, k := range wanSingleOnly {
		if provider.Field(p, k) != nil {
			out = append(out, k)
		}
	}
	return out
}

// Fields are the family's fields as the catalog lists them: input.messages and the parameters
// it honours.
func (d dashscopeImage) Fields(*ir.Model) []string {
	f := dsImageFamilies[d.family]
	out := []string{"input.messages"}
	for _, p := range f.params {
		if !slices.Contains(f.fixed, p) {
			out = append(out, "parameters."+p)
		}
	}
	return out
}

// dsImageAsk is what validation learns of a request that the rest needs.
type dsImageAsk struct {
	prompt string
	images int
}

func (d dashscopeImage) Validate(m *ir.Model, req provider.Request) (Validated, error) {
	f := dsImageFamilies[d.family]
	if err := onlyFields(d.family, req, []string{"input", "parameters"}); err != nil {
		return Validated{}, err
	}
	ask, err := d.input(f, provider.Field(req, "input"))
	if err != nil {
		return Validated{}, err
	}
	n, removed, err := d.parameters(f, m, provider.Field(req, "parameters"), ask)
	if err != nil {
		return Validated{}, err
	}
	cb, _, err := stringOf(req, "callback_url")
	return Validated{MaxImages: n, CallbackURL: cb, Removed: removed}, err
}

// input checks input.messages: exactly one user message whose content is one text part and up
// to the family's number of image parts.
func (d dashscopeImage) input(f dsImageFamily, raw json.RawMessage) (dsImageAsk, error) {
	shape := "input.messages: [{role: user, content: [{text: ...}, {image: ...}]}]"
	if raw == nil {
		return dsImageAsk{}, fmt.Errorf("%w: input is required: %s", provider.ErrBadRequest, shape)
	}
	in, err := dsObject("input", raw, []string{"messages"})
	if err != nil {
		return dsImageAsk{}, err
	}
	msgs, err := provider.Array("input.messages", provider.Field(in, "messages"), "an array of one user message")
	if err != nil {
		return dsImageAsk{}, err
	}
	if len(msgs) != 1 {
		return dsImageAsk{}, fmt.Errorf("%w: input.messages must be an array of exactly one user message, not %d messages: %s", provider.ErrBadRequest, len(msgs), shape)
	}
	msg, err := dsObject("input.messages[0]", msgs[0], []string{"role", "content"})
	if err != nil {
		return dsImageAsk{}, err
	}
	if role, ok, err := provider.ReadString("input.messages[0].role", provider.Field(msg, "role")); err != nil {
		return dsImageAsk{}, err
	} else if !ok {
		return dsImageAsk{}, fmt.Errorf("%w: input.messages[0].role is required: the one message is the user's (\"user\")", provider.ErrBadRequest)
	} else if role != "user" {
		return dsImageAsk{}, fmt.Errorf("%w: input.messages[0].role %q is not allowed: the one message is the user's (\"user\")", provider.ErrBadRequest, clip(role))
	}
	parts, err := provider.Array("input.messages[0].content", provider.Field(msg, "content"), "a non-empty array of {text} and {image} parts")
	if err != nil {
		return dsImageAsk{}, err
	}
	if len(parts) == 0 {
		return dsImageAsk{}, fmt.Errorf("%w: input.messages[0].content is empty: send a {text} part and up to %d {image} parts", provider.ErrBadRequest, f.maxImages)
	}
	var ask dsImageAsk
	texts := 0
	for i, pr := range parts {
		field := fmt.Sprintf("input.messages[0].content[%d]", i)
		part, err := dsObject(field, pr, []string{"text", "image"})
		if err != nil {
			return dsImageAsk{}, err
		}
		tr, ir := provider.Field(part, "text"), provider.Field(part, "image")
		if len(part) != 1 || (tr == nil) == (ir == nil) {
			return dsImageAsk{}, fmt.Errorf("%w: %s must be {\"text\": \"...\"} or {\"image\": \"...\"}, one key with a value", provider.ErrBadRequest, field)
		}
		if tr != nil {
			if ask.prompt, _, err = provider.ReadString(field+".text", tr); err != nil {
				return dsImageAsk{}, err
			}
			if err := d.prompt(field+".text", ask.prompt); err != nil {
				return dsImageAsk{}, err
			}
			texts++
			continue
		}
		img, _, err := provider.ReadString(field+".image", ir)
		if err != nil {
			return dsImageAsk{}, err
		}
		if err := provider.CheckImage(field+".image", img, f.imageRules); err != nil {
			return dsImageAsk{}, err
		}
		ask.images++
	}
	if texts != 1 {
		return dsImageAsk{}, fmt.Errorf("%w: input.messages[0].content has %d text parts; DashScope takes exactly one (the prompt)", provider.ErrBadRequest, texts)
	}
	if ask.images > f.maxImages {
		return dsImageAsk{}, fmt.Errorf("%w: input.messages[0].content has %d image parts; %s takes at most %d", provider.ErrBadRequest, ask.images, f.name, f.maxImages)
	}
	return ask, nil
}

// prompt checks the text part against the family's length limit: I2 in tokens (1300,
// docs/media.md#image-families), counted with the gateway's o200k tokenizer as DashScope's own is
// not public; I2b in characters (5000).
func (d dashscopeImage) prompt(field, text string) error {
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("%w: %s is empty: the prompt is required", provider.ErrBadRequest, field)
	}
	if d.family == "I2b" {
		if n := len([]rune(text)); n > wanMaxPromptChars {
			return fmt.Errorf("%w: %s is %d characters; I2b takes at most %d", provider.ErrBadRequest, field, n, wanMaxPromptChars)
		}
		return nil
	}
	// No o200k token is longer than 128 bytes: a longer text is over the limit, uncounted.
	if len(text) > qwenMaxPromptTokens*128 {
		return fmt.Errorf("%w: %s is %d bytes, over I2's %d tokens (o200k tokenizer)", provider.ErrBadRequest, field, len(text), qwenMaxPromptTokens)
	}
	if n := billing.CountText(text); n > qwenMaxPromptTokens {
		return fmt.Errorf("%w: %s is %d tokens (o200k tokenizer); I2 takes at most %d", provider.ErrBadRequest, field, n, qwenMaxPromptTokens)
	}
	return nil
}

// parameters checks the family's parameters; it returns the most images the request can make
// and what Create leaves out (wanLeftOut), as paths.
func (d dashscopeImage) parameters(f dsImageFamily, m *ir.Model, raw json.RawMessage, ask dsImageAsk) (int64, []string, error) {
	p, err := dsObject("parameters", raw, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := d.known(f, p); err != nil {
		return 0, nil, err
	}
	for _, b := range []string{"watermark", "prompt_extend", "enable_sequential", "thinking_mode"} {
		if _, _, err := provider.ReadBool("parameters."+b, provider.Field(p, b)); err != nil {
			return 0, nil, err
		}
	}
	if seed, ok, err := provider.ReadInt("parameters.seed", provider.Field(p, "seed")); err != nil {
		return 0, nil, err
	} else if ok && (seed < 0 || seed > maxSeed) {
		return 0, nil, fmt.Errorf("%w: parameters.seed %d is out of range: an integer from 0 to %d", provider.ErrBadRequest, seed, maxSeed)
	}
	if neg, _, err := provider.ReadString("parameters.negative_prompt", provider.Field(p, "negative_prompt")); err != nil {
		return 0, nil, err
	} else if n := len([]rune(neg)); n > qwenMaxNegativeChars {
		return 0, nil, fmt.Errorf("%w: parameters.negative_prompt is %d characters; DashScope takes at most %d", provider.ErrBadRequest, n, qwenMaxNegativeChars)
	}
	n, hasN, err := provider.ReadInt("parameters.n", provider.Field(p, "n"))
	if err != nil {
		return 0, nil, err
	}
	size, _, err := provider.ReadString("parameters.size", provider.Field(p, "size"))
	if err != nil {
		return 0, nil, err
	}
	if d.family == "I2" {
		if hasN && n != 1 {
			return 0, nil, fmt.Errorf("%w: parameters.n %d is not allowed: I2 (Qwen-Image) makes one image a request; use 1", provider.ErrBadRequest, n)
		}
		if size != "" && !slices.Contains(qwenSizes, size) {
			return 0, nil, fmt.Errorf("%w: parameters.size %q is not allowed: I2 takes %s", provider.ErrBadRequest, clip(size), joinOr(qwenSizes))
		}
		return 1, nil, nil
	}
	seq := string(provider.Field(p, "enable_sequential")) == "true"
	switch {
	case seq && !hasN:
		n = wanMaxSequential // DashScope's default for a set
	case !hasN:
		n = 1
	case seq && (n < 1 || n > wanMaxSequential):
		return 0, nil, fmt.Errorf("%w: parameters.n %d is out of range: 1 to %d with enable_sequential", provider.ErrBadRequest, n, wanMaxSequential)
	case !seq && (n < 1 || n > wanMaxImages):
		return 0, nil, fmt.Errorf("%w: parameters.n %d is out of range: 1 to %d (1 to %d with enable_sequential: true)", provider.ErrBadRequest, n, wanMaxImages, wanMaxSequential)
	}
	if err := wanSize(m, size, ask.images > 0, seq); err != nil {
		return 0, nil, err
	}
	if v := provider.Field(p, "color_palette"); v != nil {
		if err := colorPalette(v); err != nil {
			return 0, nil, err
		}
	}
	var removed []string
	for _, k := range wanLeftOut(p) {
		removed = append(removed, "parameters."+k)
	}
	return n, removed, nil
}

// known refuses a parameter the family does not take, naming the family that takes it.
func (d dashscopeImage) known(f dsImageFamily, p map[string]json.RawMessage) error {
	for k := range p {
		if slices.Contains(f.params, k) {
			continue
		}
		for fam, other := range dsImageFamilies {
			if fam != d.family && slices.Contains(other.params, k) {
				return fmt.Errorf("%w: parameters.%s is for %s only; %s takes %s", provider.ErrBadRequest, clip(k), other.name, f.name, strings.Join(f.params, ", "))
			}
		}
		return fmt.Errorf("%w: parameters does not take field %q; %s takes %s", provider.ErrBadRequest, clip(k), f.name, strings.Join(f.params, ", "))
	}
	return nil
}

// wanSize checks I2b's size: 1K or 2K; 4K for the pro variant's text-to-image (no image part;
// DashScope makes no 4K sets); or W*H within DashScope's pixel limits: 768*768 to 2048*2048
// pixels (to 4096*4096 where 4K is allowed), aspect 1:8 to 8:1.
func wanSize(m *ir.Model, size string, hasImage, seq bool) error {
	big := m.Variant == "pro" && !hasImage && !seq
	why := ""
	switch {
	case m.Variant != "pro":
		why = "4K is for the pro variant; " + m.ID + " is the standard variant"
	case hasImage:
		why = "4K is for text-to-image; this request has an image part"
	case seq:
		why = "DashScope makes no 4K image sets (enable_sequential)"
	}
	switch size {
	case "", "1K", "2K":
		return nil
	case "4K":
		if big {
			return nil
		}
		return fmt.Errorf("%w: parameters.size \"4K\" is not allowed: %s; use 1K, 2K or W*H", provider.ErrBadRequest, why)
	}
	mt := sizeRE.FindStringSubmatch(size)
	if mt == nil {
		return fmt.Errorf("%w: parameters.size %q is not allowed: use 1K, 2K, 4K (pro text-to-image) or <width>*<height> such as 1920*1080", provider.ErrBadRequest, clip(size))
	}
	w, _ := strconv.ParseInt(mt[1], 10, 64)
	h, _ := strconv.ParseInt(mt[2], 10, 64)
	most, mostName := int64(wanMaxPixels), "2048*2048"
	if big {
		most, mostName = wanMaxPixelsTextPro, "4096*4096"
	}
	if px := w * h; px < wanMinPixels || px > most {
		return fmt.Errorf("%w: parameters.size %q is %d pixels; I2b takes 768*768 to %s", provider.ErrBadRequest, size, px, mostName)
	}
	if w > 8*h || h > 8*w {
		return fmt.Errorf("%w: parameters.size %q is out of range: its aspect ratio must be between 1:8 and 8:1", provider.ErrBadRequest, size)
	}
	return nil
}

// colorPalette checks I2b's color_palette: 3 to 10 {hex, ratio} entries, hex #RRGGBB, ratios
// percentages with up to two decimals ("25.00%") that sum to exactly 100.00%, in decimal.
func colorPalette(raw json.RawMessage) error {
	entries, err := provider.Array("parameters.color_palette", raw, "an array of {hex, ratio}")
	if err != nil {
		return err
	}
	if len(entries) < 3 || len(entries) > 10 {
		return fmt.Errorf("%w: parameters.color_palette has %d colors; it takes 3 to 10", provider.ErrBadRequest, len(entries))
	}
	sum := decimal.Zero
	for i, er := range entries {
		field := fmt.Sprintf("parameters.color_palette[%d]", i)
		e, err := dsObject(field, er, []string{"hex", "ratio"})
		if err != nil {
			return err
		}
		hex, _, err := provider.ReadString(field+".hex", provider.Field(e, "hex"))
		if err != nil {
			return err
		}
		if !hexRE.MatchString(hex) {
			return fmt.Errorf("%w: %s.hex %q is not allowed: a color as #RRGGBB, such as \"#1A2B3C\"", provider.ErrBadRequest, field, clip(hex))
		}
		ratio, _, err := provider.ReadString(field+".ratio", provider.Field(e, "ratio"))
		if err != nil {
			return err
		}
		mt := ratioRE.FindStringSubmatch(ratio)
		if mt == nil {
			return fmt.Errorf("%w: %s.ratio %q is not allowed: a percentage with up to two decimals, such as \"25.00%%\"", provider.ErrBadRequest, field, clip(ratio))
		}
		v := decimal.RequireFromString(mt[1])
		if !v.IsPositive() || v.GreaterThan(decimal.NewFromInt(100)) {
			return fmt.Errorf("%w: %s.ratio %q is out of range: above 0%% and at most 100%%", provider.ErrBadRequest, field, ratio)
		}
		sum = sum.Add(v)
	}
	if !sum.Equal(decimal.NewFromInt(100)) {
		return fmt.Errorf("%w: parameters.color_palette ratios sum to %s%%; they must sum to exactly 100.00%%", provider.ErrBadRequest, sum.StringFixed(2))
	}
	return nil
}

// dsObject reads field's JSON object, refusing members outside known (nil: any member).
func dsObject(field string, raw json.RawMessage, known []string) (provider.Request, error) {
	obj, err := provider.Object(field, raw)
	if err == nil && known != nil {
		err = provider.OnlyMembers(field, obj, known, provider.ItTakes)
	}
	return obj, err
}
