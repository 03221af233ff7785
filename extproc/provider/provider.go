// Package provider is what the gateway's adapters to providers share: a request split into its
// top-level fields (Request), the upstream request an adapter makes (Upstream), the errors that
// say whose fault a failure is, and the readers of what clients send (JSON fields, images)
// whose refusals name the field. The adapters are in chat (a chat completion, one file per
// provider API) and task (a media task, one file per family), each chosen by an explicit
// switch (chat.For, task.For); the wire formats they speak are declared in extproc/apischema.
package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Request is a chat request already parsed into its top-level fields. Values stay raw so that
// fields the gateway does not touch (messages with large images) are never re-encoded.
type Request map[string]json.RawMessage

// ParseRequest splits a JSON object into its top-level fields. The values are subslices of
// body, not copies, and are not decoded: one pass over the body whatever its images weigh.
func ParseRequest(body []byte) (Request, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(body))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, errors.New("provider: request body is not a JSON object")
	}
	req := Request{}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, fmt.Errorf("provider: request body: %w", err)
		}
		name := tok.String() // before the next read voids the token
		v, err := dec.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("provider: request body: %w", err)
		}
		end := int(dec.InputOffset())
		req[name] = json.RawMessage(body[end-len(v) : end : end])
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, fmt.Errorf("provider: request body: %w", err)
	}
	return req, nil
}

// Encode writes the request back as a JSON object. Values are copied byte for byte: a 30 MiB
// base64 image is neither rescanned nor re-escaped. Keys are sorted for stable output.
func (r Request) Encode() []byte {
	keys := make([]string, 0, len(r))
	size := 2
	for k, v := range r {
		keys = append(keys, k)
		size += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	buf := bytes.NewBuffer(make([]byte, 0, size))
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		_ = enc.Encode(k)           // a string always encodes
		buf.Truncate(buf.Len() - 1) // Encode's newline
		buf.WriteByte(':')
		buf.Write(r[k])
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// ResponseTranslator converts one provider answer into OpenAI chat-completion form, including
// an OpenAI "usage" object (and, for streams, a final usage-only chunk with "choices": []
// before "data: [DONE]") so metering reads every provider the same way.
type ResponseTranslator interface {
	// Body converts a complete successful (2xx) JSON answer into a chat.completion object.
	Body(b []byte) ([]byte, error)
	// Chunk converts the next bytes of a successful SSE answer into chat.completion.chunk
	// events; end marks the last bytes. Input events may be split across calls: incomplete
	// ones are held until their end arrives. Output is whole "data: ...\n\n" events.
	Chunk(b []byte, end bool) ([]byte, error)
}

// Upstream is what an adapter produces for one attempt.
type Upstream struct {
	// Method is the HTTP method when it is not the client's (task queries are GETs).
	Method string
	Body   []byte
	// Path is the request path below the provider's base path (the base URL's path), e.g.
	// "/chat/completions", "/messages", "/models/gemini-2.5-flash:streamGenerateContent?alt=sse".
	Path    string
	Headers map[string]string // set on the upstream request; "" removes the header
	// Response turns a chat answer back into the OpenAI chat-completion shape; nil when the
	// provider already speaks it, and for tasks. One per attempt: stream translation keeps state.
	Response ResponseTranslator
	// Removed lists, sorted, what the adapter dropped inside fields it carries because the
	// provider has no equivalent, as field paths (tools[].function.strict, messages[].name):
	// the top-level fields the provider lacks never reach Chat, these do. The gateway adds them
	// to x-tollway-removed-params.
	Removed []string
}

// UpstreamFailure is a provider's failure inside a 2xx answer: an error it wrote into its stream
// or body, or a stream that ended before the answer did. Translators return it after what they
// translated before it; the client gets it as one error event (or an error answer) in the
// spec's shape, and the request is billed for what was sent, as for a cut stream.
type UpstreamFailure struct {
	Provider string // the API, for the message: "Anthropic", "Gemini"
	Code     string // the provider's error type or status, or upstream_error
	Message  string
}

func (f *UpstreamFailure) Error() string { return f.Provider + ": " + f.Message }

// ErrBadRequest marks a request an adapter cannot translate because of what the client sent (a
// tool call whose arguments are not a JSON object, a content part the provider lacks): the
// client's mistake, a 400, not a gateway fault.
var ErrBadRequest = errors.New("request cannot be translated")

// BlockedError is a prompt the provider refused to answer at all (Gemini's
// promptFeedback.blockReason, with HTTP 200). The gateway can answer it as a content filter
// refusal rather than an upstream failure.
type BlockedError struct {
	Provider string
	Reason   string // e.g. SAFETY, BLOCKLIST, PROHIBITED_CONTENT
	Message  string // the provider's explanation, if any
}

func (e *BlockedError) Error() string {
	s := e.Provider + " blocked the prompt (blockReason " + e.Reason + ")"
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// EncodeJSON encodes v without Go's HTML escaping, so text reads the same as it was sent.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Marshal is EncodeJSON for answer shapes, made of strings and numbers only, which
// always encode.
func Marshal(v any) []byte {
	b, err := EncodeJSON(v)
	if err != nil {
		panic(fmt.Sprintf("provider: marshal %T: %v", v, err))
	}
	return b
}

// Lenient reads providers' answers with encoding/json/v2 as encoding/json would: a provider's
// stray invalid UTF-8 byte or repeated member must not lose an answer (or its usage).
var Lenient = jsonv2.JoinOptions(jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))

// Tokens adds a provider's token counts. Usage is billed, so a bogus count can neither turn
// negative (it reads as 0) nor wrap around a huge sum (it saturates).
func Tokens(counts ...int64) int64 {
	var sum int64
	for _, c := range counts {
		if c > 0 {
			sum += min(c, math.MaxInt64-sum)
		}
	}
	return sum
}

// chunkWriter renders chat.completion.chunk events for one stream.
