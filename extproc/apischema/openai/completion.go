package openai

import (
	"bytes"
	"encoding/json"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Object names of answers.
const (
	ObjectCompletion = "chat.completion"
	ObjectChunk      = "chat.completion.chunk"
)

// Header is what every answer object starts with.
type Header struct {
	ID      string `json:"id"`
	Object  string `json:"object"`  // ObjectCompletion or ObjectChunk
	Created int64  `json:"created"` // Unix seconds
	Model   string `json:"model"`
}

// ChatCompletion is a whole answer (object chat.completion).
type ChatCompletion struct {
	Header
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
	ServiceTier       string   `json:"service_tier,omitempty"`
	SystemFingerprint string   `json:"system_fingerprint,omitempty"`
}

// Choice is one answer of a ChatCompletion.
type Choice struct {
	Index   int             `json:"index"`
	Message ResponseMessage `json:"message"`
	// Logprobs is the provider's logprobs object as it wrote it; nil leaves the member out
	// (JSON null writes "logprobs": null).
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
	FinishReason string          `json:"finish_reason"`
}

// ResponseMessage is an answer's message. Content is always written (null when there is
// none); Refusal and Annotations only when set.
type ResponseMessage struct {
	Role        string          `json:"role"`
	Content     Content         `json:"content"`
	Refusal     json.RawMessage `json:"refusal,omitempty"` // nil: left out; JSON null: null
	ToolCalls   []ToolCall      `json:"tool_calls,omitempty"`
	Annotations []struct{}      `json:"annotations,omitzero"` // nil: left out; empty: []
	ReasoningFields
}

// ReasoningFields are not OpenAI's: the reasoning text OpenAI-compatible servers send beside the
// answer, in a message or a delta, as reasoning_content (DeepSeek, vLLM) or reasoning
// (OpenRouter, Ollama). The gateway passes it on as it came, and counts it as completion text
// when it estimates a cut answer: providers bill reasoning as output.
type ReasoningFields struct {
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	Reasoning        *string `json:"reasoning,omitempty"`
}

// Text is the reasoning's text, counted once: a server that sends both names (the old one
// beside the new) sends the same text twice, so the longer is the text.
func (r ReasoningFields) Text() string {
	var a, b string
	if r.ReasoningContent != nil {
		a = *r.ReasoningContent
	}
	if r.Reasoning != nil {
		b = *r.Reasoning
	}
	if len(b) > len(a) {
		return b
	}
	return a
}

// Content is an answer message's content: text, or (an image model's answer) an array of text
// and image_url parts; null when it has neither.
type Content struct {
	Text  *string
	Parts []Part
}

// TextContent is content of text s.
func TextContent(s string) Content { return Content{Text: &s} }

// String is the content's text: Text, or its text parts joined.
func (c Content) String() string {
	if c.Text != nil {
		return *c.Text
	}
	var b bytes.Buffer
	for _, p := range c.Parts {
		if p.Type == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Images counts its image parts.
func (c Content) Images() int64 {
	var n int64
	for _, p := range c.Parts {
		if p.Type == PartImageURL {
			n++
		}
	}
	return n
}

// MarshalJSON writes the content without HTML escapes, as the text came.
func (c Content) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c.value()); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// MarshalJSONTo is MarshalJSON for encoding/json/v2, whose options (such as its refusal of
// invalid UTF-8) then hold for the content too.
func (c Content) MarshalJSONTo(enc *jsontext.Encoder) error {
	return jsonv2.MarshalEncode(enc, c.value())
}

func (c Content) value() any {
	switch {
	case c.Parts != nil:
		return c.Parts
	case c.Text != nil:
		return *c.Text
	}
	return nil
}

// UnmarshalJSON reads a string, an array of parts or null. Any other value is no content: an
// answer is read to meter it, and a provider's odd content must not lose its usage.
func (c *Content) UnmarshalJSON(b []byte) error {
	*c = Content{}
	switch b = bytes.TrimSpace(b); {
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		c.Text = &s
	case len(b) > 0 && b[0] == '[':
		return json.Unmarshal(b, &c.Parts)
	}
	return nil
}

// UnmarshalJSONFrom is UnmarshalJSON for encoding/json/v2: an image's data URL is copied once,
// not scanned by encoding/json.
func (c *Content) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*c = Content{}
	switch dec.PeekKind() {
	case '"':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		s := tok.String()
		c.Text = &s
		return nil
	case '[':
		return jsonv2.UnmarshalDecode(dec, &c.Parts)
	}
	return dec.SkipValue()
}

// ChatCompletionChunk is one event of a streamed answer (object chat.completion.chunk); the
// last before [DONE] carries usage and no choices.
type ChatCompletionChunk struct {
	Header
	Choices []ChunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

// ChunkChoice is one answer's piece in a chunk.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is what a chunk adds to the message; what it leaves out is unchanged.
type Delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
	ReasoningFields
}

// ToolCallDelta is a fragment of the tool call at Index: its id, type and name come first, its
// arguments in pieces.
type ToolCallDelta struct {
	Index int `json:"index"`
	ToolCall
}

// Usage is an answer's token usage.
type Usage struct {
	PromptTokens            int64                    `json:"prompt_tokens"`
	CompletionTokens        int64                    `json:"completion_tokens"`
	TotalTokens             int64                    `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
	// OtherModels is the gateway's own member: usage on other models than the one asked, which
	// the provider ran for this request and bills at their own prices (an Anthropic advisor's
	// iterations), per model, by the provider's name for it.
	OtherModels []ModelUsage `json:"other_models,omitempty"`
	// Estimated is the gateway's own member too: the usage was counted by the gateway (the
	// provider reported none), not reported.
	Estimated bool `json:"estimated,omitzero"`
}

// PromptTokensDetails splits prompt_tokens.
type PromptTokensDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// CompletionTokensDetails splits completion_tokens.
type CompletionTokensDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
	// ImageTokens is the part of completion_tokens that was images (Gemini's image models).
	ImageTokens int64 `json:"image_tokens,omitempty"`
}

// ModelUsage is usage on one other model (Usage.OtherModels).
type ModelUsage struct {
	Model string `json:"model"`
	Usage
}
