// Package chat holds the chat-completion adapters: one file per (client API, provider API)
// pair, each turning the client's OpenAI chat request into its provider's request and the
// provider's answer back into OpenAI's (openai_openai.go, openai_anthropic.go,
// openai_gemini.go, and openai_gemini_image.go for Gemini's image models, family I3). For
// chooses one by an explicit switch. The shapes are extproc/apischema's; what the adapters
// share of the OpenAI side is request.go (reading the request) and answer.go (writing answers,
// reading event streams).
package chat

import (
	"fmt"
	"slices"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// Adapter builds the upstream request of a chat completion for one provider API.
type Adapter interface {
	// Chat rewrites req (already stripped of gateway-only and unsupported fields) for provider p
	// serving catalog model m, whose name at the provider is model.
	Chat(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error)
	// Parameters says which request fields, beyond model, messages, stream and
	// stream_options (which every adapter carries), reach the provider.
	Parameters() Parameters
}

// For returns the adapter that speaks the client's chat API to a provider of type providerType
// for a catalog model of media family family ("" for a chat model).
func For(providerType, family string) (Adapter, error) {
	if family == ir.ChatImageFamily { // served by providers of type gemini (ir.MediaFamilies)
		return toGeminiImage{}, nil
	}
	switch providerType {
	case ir.ProviderTypeOpenAI, ir.ProviderTypeDemo:
		return toOpenAI{}, nil
	case ir.ProviderTypeAnthropic:
		return toAnthropic{}, nil
	case ir.ProviderTypeGemini:
		return toGemini{}, nil
	}
	return nil, fmt.Errorf("provider: no adapter for type %q", providerType)
}

// MaxToolCallID bounds the tool call ids a client sends back (assistant tool_calls[].id and
// tool messages' tool_call_id). Gemini's thought signatures travel inside the ids the gateway
// hands out (see geminiCallID), and they run to a few kilobytes.
const MaxToolCallID = 16384

// CredentialRefusal is implemented by translators whose provider refuses a bad credential
// with a status other than 401 (Gemini answers a bad API key with 400 INVALID_ARGUMENT), so
// the gateway can treat it as the 401 it means: retried elsewhere, never blamed on the client.
type CredentialRefusal interface {
	// RefusesCredential reports whether an error answer refuses the gateway's credential.
	RefusesCredential(status int, body []byte) bool
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
