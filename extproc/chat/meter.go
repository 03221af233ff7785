package chat

// Metering: what an answer cost, read from the provider's usage or estimated from its text.

import (
	"bytes"

	"github.com/go-json-experiment/json"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// lenient reads providers' answers as encoding/json did (provider.Lenient): a provider's stray
// invalid UTF-8 or repeated member must not cost the usage (encoding/json/v2 is fast on large
// answers).
var lenient = provider.Lenient

// usageBill is what the bill reads of an answer's usage.
func usageBill(u *openai.Usage) ir.Usage {
	out := ir.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.ImageTokens = u.CompletionTokensDetails.ImageTokens
	}
	return out
}

// completionText is a whole answer or a stream event as the meter reads it: its usage, and
// what a tokenizer can count when the provider reports none (text and tool-call names and
// arguments). A message (a whole answer) and a delta (a chunk) are both read, so an answer
// that mixes the two forms is still counted.
type completionText struct {
	Choices []struct {
		Message *openai.ResponseMessage `json:"message"`
		Delta   *openai.Delta           `json:"delta"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

func (c *completionText) appendText(b *bytes.Buffer) {
	for _, ch := range c.Choices {
		if m := ch.Message; m != nil {
			b.WriteString(m.Content.String()) // an image's data URL is not text
			for _, tc := range m.ToolCalls {
				b.WriteString(tc.Function.Name)
				b.WriteString(tc.Function.Arguments)
			}
		}
		if d := ch.Delta; d != nil {
			if d.Content != nil {
				b.WriteString(*d.Content)
			}
			for _, tc := range d.ToolCalls {
				b.WriteString(tc.Function.Name)
				b.WriteString(tc.Function.Arguments)
			}
		}
	}
}

// images counts the image parts of the answer's messages (an image model's answer, see
// provider/chat's openai_gemini_image.go), each billed at the model's image price.
func (c *completionText) images() int64 {
	var n int64
	for _, ch := range c.Choices {
		if ch.Message != nil {
			n += ch.Message.Content.Images()
		}
	}
	return n
}

// meter follows one answer to find what it cost: the provider's usage when it reports it, a
// token count of what was sent when it does not (cut streams, disconnects).
type meter struct {
	usage  *openai.Usage
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
func (m *meter) others() []openai.ModelUsage {
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
		u := usageBill(m.usage)
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
		u := usageBill(m.usage)
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
