// Package embeddings holds the embeddings adapters: one file per (client API, provider API)
// pair, each turning the client's OpenAI embeddings request into its provider's request and
// the provider's answer back into OpenAI's (openai_openai.go: passed as is, the model named
// for the provider; openai_gemini.go: Gemini's batchEmbedContents, both ways). For chooses one
// by an explicit switch. The shapes are extproc/apischema's.
package embeddings

import (
	"fmt"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// Adapter builds the upstream request of an embeddings request for one provider API.
type Adapter interface {
	// Embed rewrites req (already validated, the gateway's own fields removed) for provider p,
	// whose name of the catalog model is model. The Upstream's Response translates a 2xx
	// answer back (nil: the provider answers in OpenAI's shape).
	Embed(p *ir.Provider, model string, req provider.Request) (*provider.Upstream, error)
}

// For returns the adapter that speaks the embeddings API to a provider of type providerType.
func For(providerType string) (Adapter, error) {
	switch providerType {
	case ir.ProviderTypeOpenAI, ir.ProviderTypeDemo:
		return toOpenAI{}, nil
	case ir.ProviderTypeGemini:
		return toGemini{}, nil
	}
	return nil, fmt.Errorf("provider: no embeddings adapter for type %q", providerType)
}
