package chat

// This file owns the answer and its meter. The client's view of a successful answer: the model
// field names the catalog model that answered (not the provider's name for it), the usage chunk
// the gateway asked for on the client's behalf is removed, and, with billing, the answer is
// metered on its way through (meter, at the end of the file).

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/tollway/tollway/extproc/core"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/sse"
	"github.com/tollway/tollway/xds/ir"
)

// answer rewrites one successful answer, whole or streamed.
type answer struct {
	model   []byte // the catalog model id as a JSON string
	modelID string
	meter   *meter // nil without billing
	// dropUsage removes the usage-only chunk: the gateway asks every streaming provider for
	// usage, and clients that did not ask must not get it, billing on or off.
	dropUsage bool
	frames    sse.Framer
	dec       *jsontext.Decoder // reused for every event of a stream
	none      bytes.Buffer      // what dec reads between events, so it never pins a chunk

	// requestID goes into error events, which carry it like every other error.
	requestID string
	// promptTokens, when set, makes a stream that ends ([DONE]) without any usage get a usage
	// chunk estimated from what was sent: the client asked for usage (stream_options
	// include_usage) and the provider reported none. Needs meter.
	promptTokens func() int64
	last         []byte // the last content event's data: the id and created of an added chunk

	// beforeDone, when set, adds events just before [DONE] (a paid stream's settlement).
	beforeDone func() []byte

	// How the stream ended so far: a stream whose body ends with none of these was cut short
	// by its provider, and the client must not take it for a whole answer.
	sawFinish, sawDone, sawError bool
}

func newAnswer(modelID string, m *meter, dropUsage bool) *answer {
	q, _ := json.Marshal(modelID) // a string always encodes
	return &answer{model: q, modelID: modelID, meter: m, dropUsage: dropUsage}
}

// body rewrites a whole JSON answer; changed is false when it goes on as it came.
func (a *answer) body(b []byte) (out []byte, changed bool) {
	if a.meter != nil {
		a.meter.body(b)
	}
	return replaceModel(a.decoder(b), b, a.model)
}

// decoder returns the answer's decoder, reset to read b.
func (a *answer) decoder(b []byte) *jsontext.Decoder {
	if a.dec == nil {
		a.dec = jsontext.NewDecoder(bytes.NewBuffer(b), lenient)
	} else {
		a.dec.Reset(bytes.NewBuffer(b), lenient)
	}
	return a.dec
}

// chunk rewrites the next piece of an event stream. Whole events go out at once; an event
// whose end has not arrived yet is held until it has (or the stream ends), so no event reaches
// the client half rewritten and the stream is never buffered beyond one event.
func (a *answer) chunk(b []byte, end bool) (out []byte, changed bool) {
	held := a.frames.Pending()
	out = make([]byte, 0, len(b)+64)
	_ = a.frames.Feed(b, end, func(ev []byte) error {
		data := sse.Data(ev)
		if len(data) == 0 || data[0] != '{' {
			if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
				a.sawDone = true
				if a.promptTokens != nil && a.meter != nil && a.meter.usage == nil {
					out = a.appendEstimatedUsage(out)
				}
				if a.beforeDone != nil {
					out = append(out, a.beforeDone()...)
				}
			}
			out = append(out, ev...) // [DONE], comments, keep-alives
			return nil
		}
		if !a.sawFinish && hasMember(data, `"finish_reason"`, '"') {
			a.sawFinish = true
		}
		if e, ok := errorEvent(data, a.requestID); ok {
			a.sawError = true
			if a.meter != nil {
				a.meter.event(data) // what came before is billed; the error itself says nothing
			}
			out = append(out, sse.ReplaceData(ev, e)...)
			return nil
		}
		if a.promptTokens != nil {
			a.last = append(a.last[:0], data...)
		}
		usageOnly := false
		if a.meter != nil {
			usageOnly = a.meter.event(data)
		} else if a.dropUsage {
			usageOnly = isUsageOnly(data)
		}
		if usageOnly && a.dropUsage {
			return nil // the gateway asked for it on the client's behalf
		}
		if !usageOnly && a.promptTokens != nil && a.meter.usage == nil && hasUsageObject(data) {
			if c := usageEvent(data); c != nil && len(c.Choices) == 0 {
				// A usage chunk without counts is no usage: the answer is billed from an estimate,
				// and the client gets that estimate at [DONE] instead of a free-looking zero.
				return nil
			}
		}
		d, ok := replaceModel(a.decoder(data), data, a.model)
		// The decoder reads the chunk in place: left on it, it would keep the chunk (and the
		// message it came in) alive for as long as the stream stays open.
		a.dec.Reset(&a.none, lenient)
		if ok {
			out = append(out, sse.ReplaceData(ev, d)...)
			return nil
		}
		out = append(out, ev...)
		return nil
	})
	if end && !a.sawFinish && !a.sawDone && !a.sawError {
		// The provider ended its body without finishing the answer (no finish_reason, no
		// [DONE]): one error event, so that no client takes a cut answer for a whole one.
		e := core.Errorf(http.StatusBadGateway, "upstream_error", "the provider's stream ended before the answer finished (no finish_reason and no [DONE]): the answer is incomplete")
		out = append(append(append(out, "data: "...), e.Body(a.requestID)...), "\n\n"...)
		a.sawError = true
	}
	if !held && !a.frames.Pending() && bytes.Equal(out, b) {
		return b, false
	}
	return out, true
}

// replaceModel sets the top-level "model" string of a JSON object to model (a JSON string),
// copying the rest byte for byte; dec reads obj. It reports false, and returns obj, when there
// is nothing to change: no such field, or it already says model.
func replaceModel(dec *jsontext.Decoder, obj, model []byte) ([]byte, bool) {
	if !bytes.Contains(obj, []byte(`"model"`)) {
		return obj, false
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return obj, false
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return obj, false
		}
		if name.String() != "model" || dec.PeekKind() != '"' {
			if dec.SkipValue() != nil {
				return obj, false
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil || bytes.Equal(v, model) {
			return obj, false
		}
		end := int(dec.InputOffset())
		start := end - len(v)
		out := make([]byte, 0, len(obj)-len(v)+len(model))
		return append(append(append(out, obj[:start]...), model...), obj[end:]...), true
	}
	return obj, false
}

// errorEvent rewrites a stream's error event (OpenAI's {"error": {...}} mid-stream, or one a
// translator wrote for a provider's failure) into the spec's error shape with the request's id.
// Events with choices are content, whatever their text says, and are not decoded.
func errorEvent(data []byte, requestID string) ([]byte, bool) {
	if !bytes.Contains(data, []byte(`"error"`)) || bytes.Contains(data, []byte(`"choices"`)) {
		return nil, false
	}
	var ev struct {
		Error jsontext.Value `json:"error"`
	}
	if jsonv2.Unmarshal(data, &ev, lenient) != nil || len(ev.Error) == 0 || string(ev.Error) == "null" {
		return nil, false
	}
	e := &core.APIError{Code: "upstream_error", Message: "the provider failed mid-stream"}
	core.ReadProviderError(json.RawMessage(ev.Error), e)
	return e.Body(requestID), true
}

// appendEstimatedUsage adds the usage chunk a provider did not send, estimated from what was
// sent (and billed the same way, marked estimated), in the shape of the stream's own chunks.
func (a *answer) appendEstimatedUsage(out []byte) []byte {
	u, _ := a.meter.result(a.promptTokens)
	var last struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
	}
	_ = jsonv2.Unmarshal(a.last, &last, lenient)
	chunk := openai.ChatCompletionChunk{Header: openai.Header{ID: last.ID, Object: openai.ObjectChunk, Created: last.Created, Model: a.modelID},
		Choices: []openai.ChunkChoice{}, Usage: &openai.Usage{
			PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens,
			PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: u.CachedTokens}, Estimated: true,
		}}
	b, _ := jsonv2.Marshal(chunk) // strings and numbers always encode
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// Metering: what an answer cost, read from the provider's usage or estimated from its text.

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
// what a tokenizer can count when the provider reports none (text, reasoning text, and
// tool-call names and arguments). A message (a whole answer) and a delta (a chunk) are both read, so an answer
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
			b.WriteString(m.ReasoningFields.Text()) // billed as output, whether or not an answer follows
			b.WriteString(m.Content.String())       // an image's data URL is not text
			for _, tc := range m.ToolCalls {
				b.WriteString(tc.Function.Name)
				b.WriteString(tc.Function.Arguments)
			}
		}
		if d := ch.Delta; d != nil {
			b.WriteString(d.ReasoningFields.Text())
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
	if jsonv2.Unmarshal(b, &c, lenient) != nil {
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
		if len(line) > 0 && jsonv2.Unmarshal(line, &c, lenient) == nil {
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
	if jsonv2.Unmarshal(data, &c, lenient) != nil || c.Usage == nil {
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
