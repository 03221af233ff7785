package extproc

// Metering: what an answer cost, read from the provider's usage or estimated from its text.

import (
	"bytes"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/xds/ir"
)

// lenient reads providers' answers as encoding/json did: a provider's stray invalid UTF-8 or
// repeated member must not cost the usage (encoding/json/v2 is fast on large answers).
var lenient = json.JoinOptions(jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))

// upstreamUsage is OpenAI's usage object, with the cached-prompt and image-output details and
// the usage on other models that the Anthropic adapter reports (other_models).
type upstreamUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ImageTokens int64 `json:"image_tokens"`
	} `json:"completion_tokens_details"`
	OtherModels []otherUsage `json:"other_models"`
}

// otherUsage is usage on a model other than the one asked (an Anthropic advisor's), by the
// provider's name for it.
type otherUsage struct {
	Model string `json:"model"`
	upstreamUsage
}

func (u *upstreamUsage) billing() ir.Usage {
	out := ir.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.ImageTokens = u.CompletionTokensDetails.ImageTokens
	}
	return out
}

// completionText is what a response (or a chunk) says: text and tool-call arguments, the parts a
// tokenizer can count when the provider reports no usage.
type completionText struct {
	Choices []struct {
		Message *messageText `json:"message"`
		Delta   *messageText `json:"delta"`
	} `json:"choices"`
	Usage *upstreamUsage `json:"usage"`
}

// messageText is an answer's message, or a stream's delta of one.
type messageText struct {
	Content   *messageContent `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (m *messageText) appendText(b *bytes.Buffer) {
	if m == nil {
		return
	}
	if m.Content != nil {
		b.WriteString(m.Content.text)
	}
	for _, tc := range m.ToolCalls {
		b.WriteString(tc.Function.Name)
		b.WriteString(tc.Function.Arguments)
	}
}

func (c *completionText) appendText(b *bytes.Buffer) {
	for _, ch := range c.Choices {
		ch.Message.appendText(b)
		ch.Delta.appendText(b)
	}
}

// images counts the image parts of the answer's messages.
func (c *completionText) images() int64 {
	var n int64
	for _, ch := range c.Choices {
		for _, m := range []*messageText{ch.Message, ch.Delta} {
			if m != nil && m.Content != nil {
				n += m.Content.images
			}
		}
	}
	return n
}

// messageContent is a message's content: a string, or an array of parts (an image model's
// answer: text and image_url parts, see provider.GeminiImageChat). Its text is kept for an
// estimate and its images counted, each billed at the model's image price; an image's data
// URL is skipped, not copied.
type messageContent struct {
	text   string
	images int64
}

func (c *messageContent) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case '"':
		tok, err := dec.ReadToken()
		c.text = tok.String()
		return err
	case '[':
	default:
		return dec.SkipValue()
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.UnmarshalDecode(dec, &parts); err != nil {
		return err
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text":
			b.WriteString(p.Text)
		case "image_url":
			c.images++
		}
	}
	c.text = b.String()
	return nil
}

// meter follows one answer to find what it cost: the provider's usage when it reports it, a
// token count of what was sent when it does not (cut streams, disconnects).
type meter struct {
	usage  *upstreamUsage
	images int64        // image parts of a whole answer, billed per image
	text   bytes.Buffer // completion text, for the estimate
	// events are a stream's latest content events, undecoded until an estimate needs them or
	// they pass rawEventsLimit, when they are folded into text: an open stream holds its text and
	// a bounded window, not every event it passed.
	events []byte
	// estimate, once made, is the answer's usage: a stream that got an estimated usage chunk is
	// billed exactly what that chunk said.
	estimate *ir.Usage
	// counted bytes of text were counted as countedTokens by the last progress report.
	counted       int
	countedTokens int64
}

// body reads a whole (non-streamed) JSON answer.
func (m *meter) body(b []byte) {
	var c completionText
	if json.Unmarshal(b, &c, lenient) != nil {
		return
	}
	m.usage = c.Usage
	m.images = c.images()
	c.appendText(&m.text)
}

// rawEventsLimit bounds the content events a stream keeps undecoded. Most streams end with
// the provider's usage and never decode them; a long one decodes them in batches as it goes
// (kept raw, a 2,000-chunk answer held over half a MiB for as long as it stayed open).
const rawEventsLimit = 8 << 10

// event reads the JSON data of one stream event; it reports whether the event is the
// usage-only chunk (no choices) that closes an OpenAI stream.
func (m *meter) event(data []byte) (usageOnly bool) {
	c := usageEvent(data)
	if c == nil {
		if m.usage != nil {
			return false // billed from the provider's usage: no estimate will need the text
		}
		if len(m.events)+len(data) >= rawEventsLimit {
			m.fold()
		}
		m.events = append(append(m.events, data...), '\n')
		return false
	}
	if c.Usage.PromptTokens > 0 || c.Usage.CompletionTokens > 0 {
		m.usage = c.Usage
		return len(c.Choices) == 0
	}
	m.fold() // the text stays in the order the stream sent it
	c.appendText(&m.text)
	return false
}

// fold decodes the raw content events into the text.
func (m *meter) fold() {
	for line := range bytes.SplitSeq(m.events, []byte("\n")) {
		var c completionText
		if len(line) > 0 && json.Unmarshal(line, &c, lenient) == nil {
			c.appendText(&m.text)
		}
	}
	m.events = m.events[:0]
}

// usageEvent decodes a stream event that carries usage, or returns nil. Most events are
// content: they are recognised without being parsed, and kept as bytes for an estimate.
func usageEvent(data []byte) *completionText {
	if !hasUsageObject(data) {
		return nil
	}
	var c completionText
	if json.Unmarshal(data, &c, lenient) != nil || c.Usage == nil {
		return nil
	}
	return &c
}

// hasUsageObject reports whether data has a "usage" member whose value is an object, whatever
// whitespace the provider writes around the colon (Python's json.dumps writes "usage": {).
func hasUsageObject(data []byte) bool { return hasMember(data, `"usage"`, '{') }

// hasMember reports whether data has a member named name (quoted) whose value starts with
// first, whatever whitespace surrounds the colon. It looks without parsing: the events it
// checks are mostly content.
func hasMember(data []byte, name string, first byte) bool {
	for rest := data; ; {
		i := bytes.Index(rest, []byte(name))
		if i < 0 {
			return false
		}
		rest = bytes.TrimLeft(rest[i+len(name):], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			if v := bytes.TrimLeft(rest[1:], " \t\r\n"); len(v) > 0 && v[0] == first {
				return true
			}
		}
	}
}

// isUsageOnly reports whether an event is the usage-only chunk that closes an OpenAI stream.
func isUsageOnly(data []byte) bool {
	c := usageEvent(data)
	return c != nil && len(c.Choices) == 0 && (c.Usage.PromptTokens > 0 || c.Usage.CompletionTokens > 0)
}

// others is the provider's usage on other models than the one asked, when it reported usage.
func (m *meter) others() []otherUsage {
	if m.usage == nil {
		return nil
	}
	return m.usage.OtherModels
}

// progress is the usage of an answer still streaming, for a checkpoint: the provider's once it
// came, else the prompt and the completion text so far, counted as an estimate would count it
// (only the text since the last report is tokenized).
func (m *meter) progress(promptTokens func() int64) ir.Usage {
	if m.usage != nil {
		u := m.usage.billing()
		u.Images = m.images
		return u
	}
	m.fold()
	if m.text.Len() > m.counted {
		m.countedTokens += int64(billing.CountText(string(m.text.Bytes()[m.counted:])))
		m.counted = m.text.Len()
	}
	return ir.Usage{PromptTokens: promptTokens(), CompletionTokens: m.countedTokens, Images: m.images}
}

// result is the usage to bill and whether it is an estimate.
func (m *meter) result(promptTokens func() int64) (ir.Usage, bool) {
	if m.usage != nil {
		u := m.usage.billing()
		u.Images = m.images
		return u, false
	}
	if m.estimate == nil {
		// No usage: count what was sent (the stream events still raw decoded now).
		m.fold()
		m.events = nil
		m.estimate = &ir.Usage{PromptTokens: promptTokens(), CompletionTokens: int64(billing.CountText(m.text.String())), Images: m.images}
	}
	return *m.estimate, true
}
