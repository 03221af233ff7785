package extproc

import (
	"bytes"
	"encoding/json"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/xds/ir"
)

// upstreamUsage is OpenAI's usage object, with the cached-prompt detail.
type upstreamUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *upstreamUsage) billing() ir.Usage {
	out := ir.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
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
	Content   *string `json:"content"`
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
		b.WriteString(*m.Content)
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

// meter follows one response to find what it cost: the provider's usage when it reports it, a
// token count of what was sent when it does not (cut streams, disconnects).
type meter struct {
	usage  *upstreamUsage
	text   bytes.Buffer // completion text of a whole answer, for the estimate
	events []byte       // a stream's content events, undecoded until an estimate needs them

	// SSE state: an event may be split across body chunks, so the tail of the last chunk that
	// did not end an event is carried over.
	carry []byte
	// dropUsage removes the usage-only chunk the gateway asked for on the client's behalf.
	dropUsage bool
}

// body reads a whole (non-streamed) JSON response.
func (m *meter) body(b []byte) {
	var c completionText
	if json.Unmarshal(b, &c) != nil {
		return
	}
	m.usage = c.Usage
	c.appendText(&m.text)
}

// chunk reads one piece of an SSE stream and returns what to send to the client: the same bytes,
// or, when the usage event must be hidden, the bytes without it. Complete events are passed as
// soon as they are whole; an incomplete tail is held until its end arrives (or end of stream).
func (m *meter) chunk(b []byte, end bool) (out []byte, changed bool) {
	if !m.dropUsage {
		m.scan(b)
		return b, false // nothing to remove: bytes pass as they came
	}
	buf := b
	if len(m.carry) > 0 {
		buf = append(m.carry, b...)
		m.carry = nil
		changed = true
	}
	var kept bytes.Buffer
	for len(buf) > 0 {
		i := eventEnd(buf)
		if i < 0 {
			if end {
				kept.Write(buf) // a final event without its blank line: pass it as is
				break
			}
			m.carry = append([]byte(nil), buf...)
			changed = true
			break
		}
		ev := buf[:i]
		buf = buf[i:]
		if m.event(ev) {
			changed = true
			continue
		}
		kept.Write(ev)
	}
	if !changed {
		return b, false
	}
	return kept.Bytes(), true
}

// scan reads events without changing the bytes.
func (m *meter) scan(b []byte) {
	buf := append(m.carry, b...)
	m.carry = nil
	for {
		i := eventEnd(buf)
		if i < 0 {
			break
		}
		m.event(buf[:i])
		buf = buf[i:]
	}
	if len(buf) > 0 {
		m.carry = append([]byte(nil), buf...)
	}
}

// eventEnd returns the length of the first complete SSE event in b (through its blank line), or -1.
func eventEnd(b []byte) int {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\n' && b[i+1] == '\n' {
			return i + 2
		}
		if b[i] == '\n' && b[i+1] == '\r' && i+2 < len(b) && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// event reads one SSE event; it reports whether the event must be dropped.
func (m *meter) event(ev []byte) (drop bool) {
	for _, line := range bytes.Split(ev, []byte("\n")) {
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if len(data) == 0 || data[0] != '{' {
			continue // [DONE] or keep-alive
		}
		// Most events are content: keep their bytes for an estimate and parse nothing. Only the
		// event that carries usage is decoded on the request path.
		if !bytes.Contains(data, []byte(`"usage":{`)) {
			m.events = append(append(m.events, data...), '\n')
			continue
		}
		var c completionText
		if json.Unmarshal(data, &c) != nil {
			continue
		}
		c.appendText(&m.text)
		if c.Usage != nil && (c.Usage.PromptTokens > 0 || c.Usage.CompletionTokens > 0) {
			m.usage = c.Usage
			if m.dropUsage && len(c.Choices) == 0 {
				drop = true
			}
		}
	}
	return drop
}

// result is the usage to bill and whether it is an estimate.
func (m *meter) result(promptTokens func() int64) (ir.Usage, bool) {
	if m.usage != nil {
		return m.usage.billing(), false
	}
	// No usage: count what was sent (stream events kept raw until now).
	for _, line := range bytes.Split(m.events, []byte("\n")) {
		var c completionText
		if len(line) > 0 && json.Unmarshal(line, &c) == nil {
			c.appendText(&m.text)
		}
	}
	return ir.Usage{PromptTokens: promptTokens(), CompletionTokens: int64(billing.CountText(m.text.String()))}, true
}
