// Package provider holds one adapter per upstream API kind. An adapter turns the client's
// OpenAI-shaped chat request into the provider's request; later adapters also translate
// responses back.
package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/xds/ir"
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

// Upstream is what an adapter produces for one attempt.
type Upstream struct {
	// Method is the HTTP method when it is not the client's (task queries are GETs).
	Method string
	Body   []byte
	// Path is the request path below the provider's base path (the base URL's path), e.g.
	// "/chat/completions", "/messages", "/models/gemini-2.5-flash:streamGenerateContent?alt=sse".
	Path    string
	Headers map[string]string // set on the upstream request; "" removes the header
	// Response turns the provider's answer back into the OpenAI chat-completion shape; nil when
	// the provider already speaks it. One per attempt: stream translation keeps state.
	Response ResponseTranslator
	// Removed lists, sorted, what the adapter dropped inside fields it carries because the
	// provider has no equivalent, as field paths (tools[].function.strict, messages[].name):
	// the top-level fields the provider lacks never reach Chat, these do. The gateway adds them
	// to x-tollway-removed-params.
	Removed []string
}

// MaxToolCallID bounds the tool call ids a client sends back (assistant tool_calls[].id and
// tool messages' tool_call_id). Gemini's thought signatures travel inside the ids the gateway
// hands out (see geminiCallID), and they run to a few kilobytes.
const MaxToolCallID = 16384

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

// CredentialRefusal is implemented by translators whose provider refuses a bad credential
// with a status other than 401 (Gemini answers a bad API key with 400 INVALID_ARGUMENT), so
// the gateway can treat it as the 401 it means: retried elsewhere, never blamed on the client.
type CredentialRefusal interface {
	// RefusesCredential reports whether an error answer refuses the gateway's credential.
	RefusesCredential(status int, body []byte) bool
}

// Adapter builds the upstream request for one provider kind.
type Adapter interface {
	// Chat rewrites req (already stripped of gateway-only and unsupported fields) for provider p,
	// whose model name is model.
	Chat(p *ir.Provider, model string, req Request) (*Upstream, error)
	// Parameters says which request fields, beyond model, messages, stream and
	// stream_options (which every adapter carries), reach the provider.
	Parameters() Parameters
}

// Parameters are the request fields an adapter carries to its provider.
type Parameters struct {
	Known []string // fields the adapter carries (translated, for APIs other than OpenAI's)
	// PassUnknown: fields outside Known go on as they are (OpenAI-compatible servers take
	// extensions of their own); otherwise they are dropped.
	PassUnknown bool
	// Fixed are the fields of Known taken only at their default value (n: 1, one answer):
	// carried, so that another value is refused by name rather than dropped, and not listed
	// by the catalog, which lists what a model honours.
	Fixed []string
}

// Listed are the fields the catalog lists: Known less Fixed.
func (p Parameters) Listed() []string {
	return slices.DeleteFunc(slices.Clone(p.Known), func(f string) bool { return slices.Contains(p.Fixed, f) })
}

// openAIParameters are the OpenAI chat-completions fields beyond model, messages and streaming
// that the catalog lists for OpenAI-shaped providers.
var openAIParameters = []string{
	"frequency_penalty", "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "n",
	"parallel_tool_calls", "presence_penalty", "reasoning_effort", "response_format", "seed",
	"stop", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
}

var adapters = map[string]Adapter{}

func register(kind string, a Adapter) { adapters[kind] = a }

// For returns the adapter of a provider type.
func For(kind string) (Adapter, error) {
	a, ok := adapters[kind]
	if !ok {
		return nil, fmt.Errorf("provider: no adapter for type %q", kind)
	}
	return a, nil
}
