package billing

import (
	"bytes"
	"fmt"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

// Encoding is the BPE encoding estimates use: o200k_base (GPT-4o and later), embedded in the
// binary by tiktoken-go-loader so nothing is downloaded at run time. Other providers' tokenizers
// differ; the estimates only size holds, and settlement uses the upstream's reported usage.
const Encoding = "o200k_base"

var (
	encOnce sync.Once
	enc     *tiktoken.Tiktoken
)

func encoder() *tiktoken.Tiktoken {
	encOnce.Do(func() {
		// The loader is a package-global of tiktoken-go; setting it here, once and before any
		// GetEncoding, keeps the default (downloading) loader from ever running.
		tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
		e, err := tiktoken.GetEncoding(Encoding)
		if err != nil {
			// Only possible if the embedded asset is missing: a build problem, not a request one.
			panic("billing: loading " + Encoding + ": " + err.Error())
		}
		enc = e
	})
	return enc
}

// Warm loads the encoding (about 0.13 s and 22 MiB of live heap on a 2-core dev machine). The
// gateway does not call it: the tokenizer only serves estimated bills (cut streams, answers
// without usage), so it is loaded by the first of those rather than held by every gateway.
func Warm() { encoder() }

// CountText returns the number of tokens of s.
func CountText(s string) int {
	e := encoder()
	n := 0
	eachChunk(s, func(chunk string) {
		// EncodeOrdinary: special-token text such as "<|endoftext|>" in a prompt is counted as the
		// plain text it is (Encode would panic on it).
		n += len(e.EncodeOrdinary(chunk))
	})
	return n
}

const (
	// chunkSize bounds the text handed to one EncodeOrdinary call, which copies it to []rune and
	// lists every regex match: a 32 MiB prompt would otherwise cost hundreds of MB at once.
	chunkSize = 8 << 10
	// maxRun bounds a stretch of text with no exact cut point. BPE merging is quadratic in the
	// length of a regex piece (4,096 CJK characters in one piece take ~40 ms), and scripts
	// without spaces or a hostile prompt of one repeated letter make pieces as long as the text.
	maxRun = 256
)

// eachChunk splits s into pieces whose token counts add up to the count of s.
//
// Cutting right before a space that follows a non-space is exact: no o200k regex piece extends
// from a non-space across a following space, the whitespace patterns leave the last space of a run
// to the word after it, and the regex has no look-behind, so matching from the space on is the
// same with or without the text before it. Only where such a point is missing for maxRun bytes is
// the text cut at a character boundary, which can change the count by a token per cut: an estimate,
// which is all CountText is used for.
func eachChunk(s string, f func(string)) {
	if len(s) <= maxRun {
		f(s)
		return
	}
	start, safe := 0, 0 // safe: latest exact cut point, never before start
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && i > safe {
			if r, _ := utf8.DecodeLastRuneInString(s[:i]); !unicode.IsSpace(r) {
				safe = i
			}
		}
		switch {
		case i-start >= chunkSize && safe > start:
			f(s[start:safe])
			start = safe
		case i-safe >= maxRun && utf8.RuneStart(s[i]):
			f(s[start:i])
			start, safe = i, i
		}
	}
	if start < len(s) {
		f(s[start:])
	}
}

// Estimated overheads, from OpenAI's cookbook "How to count tokens with tiktoken": every message
// costs 3 tokens of framing (1 more when it has a name) and every reply is primed with 3.
const (
	tokensPerMessage = 3
	tokensPerName    = 1
	tokensReply      = 3
	// tokensPerImage is a low-detail image (OpenAI's fixed 85). High-detail images cost more, and
	// the real count depends on the image size, which the gateway does not decode: an estimate.
	tokensPerImage = 85
)

// chatPrompt is what a prompt count reads of a request: its messages, and its tool definitions
// as the JSON they are (their compact text is counted). It is read with encoding/json/v2 (its
// mirror module), in one pass.
type chatPrompt struct {
	Messages  []openai.Message `json:"messages"`
	Tools     []jsontext.Value `json:"tools"`
	Functions []jsontext.Value `json:"functions"` // legacy form of tools
}

// CountChatPrompt estimates the prompt tokens of an OpenAI chat completion request body: per
// message 3 tokens plus its role, name (+1), content text (a string, or text and refusal parts;
// each image part counts a fixed 85) and tool call names and arguments; plus the compact JSON of
// the tool definitions, plus 3 for the reply. Part types other than text, image_url and refusal
// (not in the spec) count 0. Providers render tools and framing their own way, so this sizes a
// hold; the bill uses the upstream's reported usage.
func CountChatPrompt(body []byte) (int, error) {
	return countChat(body, CountText, tokensPerImage, false)
}

// PromptBound is a cheap upper bound of the prompt tokens, for sizing holds on the request path
// (the tokenizer costs ~170 ns per byte): every BPE token spans at least one byte, so a text's
// UTF-8 length bounds its token count, and an image counts as the largest any provider charges
// for one (Anthropic's ~1,600 at 1.15 megapixels). A bound, not an estimate: a hold sized with it
// cannot be outrun by the prompt.
func PromptBound(body []byte) (int, error) {
	return countChat(body, func(s string) int { return len(s) }, maxTokensPerImage, true)
}

// maxTokensPerImage is the most tokens a provider bills for one image input.
const maxTokensPerImage = 1600

// PromptBounder adds up PromptBound's bound from the parts of a request, for a caller that reads
// the request itself (the gateway's validator, so the body is read once). Lengths may be those
// of the JSON encoding: an encoded string is never shorter than its text, so the sum is still a
// bound, exact for text without escapes.
type PromptBounder struct{ n int }

// NewPromptBounder starts a bound with the reply's priming.
func NewPromptBounder() *PromptBounder { return &PromptBounder{n: tokensReply} }

// Message counts a message's framing and its role of roleLen bytes.
func (b *PromptBounder) Message(roleLen int) { b.n += tokensPerMessage + roleLen }

// Name counts a message's name of n bytes.
func (b *PromptBounder) Name(n int) { b.n += tokensPerName + n }

// Text counts n bytes of text: content, refusals, tool call names and arguments, tool
// definitions, audio and file data.
func (b *PromptBounder) Text(n int) { b.n += n }

// Image counts one image.
func (b *PromptBounder) Image() { b.n += maxTokensPerImage }

// Tokens is the bound.
func (b *PromptBounder) Tokens() int { return b.n }

// countChat counts a chat prompt; with media, audio and file data count their encoded bytes (a
// bound: every token spans a byte of the base64), else nothing (an estimate has no tokenizer
// for them).
func countChat(body []byte, count func(string) int, perImage int, media bool) (int, error) {
	var req chatPrompt
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, fmt.Errorf("counting prompt tokens: %w", err)
	}
	n := tokensReply
	for _, m := range req.Messages {
		n += tokensPerMessage + count(m.Role)
		if m.Name != "" {
			n += tokensPerName + count(m.Name)
		}
		parts, err := openai.Parts(m.Content)
		if err != nil {
			return 0, fmt.Errorf("counting prompt tokens: %w", err)
		}
		for _, p := range parts {
			switch p.Type {
			case "text":
				n += count(p.Text)
			case "refusal":
				n += count(p.Refusal)
			case "image_url":
				n += perImage
			case "input_audio":
				if media {
					n += len(p.InputAudio.Data)
				}
			case "file":
				if media {
					n += len(p.File.FileData)
				}
			}
		}
		for _, tc := range m.ToolCalls {
			n += count(tc.Function.Name) + count(tc.Function.Arguments)
		}
		if fc := m.FunctionCall; fc != nil {
			n += count(fc.Name) + count(fc.Arguments)
		}
	}
	var buf bytes.Buffer
	for _, def := range append(req.Tools, req.Functions...) {
		buf.Reset()
		buf.Write(def)
		v := jsontext.Value(buf.Bytes())
		if err := v.Compact(); err != nil {
			return 0, fmt.Errorf("counting prompt tokens: tools: %w", err)
		}
		n += count(string(v))
	}
	return n, nil
}
