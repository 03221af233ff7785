// Package provider holds one adapter per upstream API kind. An adapter turns the client's
// OpenAI-shaped chat request into the provider's request; later adapters also translate
// responses back.
package provider

import (
	"encoding/json"
	"fmt"

	"github.com/tollway/tollway/xds/ir"
)

// Request is a chat request already parsed into its top-level fields. Values stay raw so that
// fields the gateway does not touch (messages with large images) are never re-encoded.
type Request map[string]json.RawMessage

// Upstream is what an adapter produces for one attempt.
type Upstream struct {
	Body    []byte
	Headers map[string]string // set on the upstream request; "" removes the header
}

// Adapter builds the upstream request for one provider kind.
type Adapter interface {
	// Chat rewrites req (already stripped of gateway-only and unsupported fields) for provider p,
	// whose model name is model.
	Chat(p *ir.Provider, model string, req Request) (*Upstream, error)
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
