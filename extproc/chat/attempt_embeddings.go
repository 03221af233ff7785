package chat

import (
	"errors"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/embeddings"
	"github.com/tollway/tollway/xds/ir"
)

// EmbedRequest builds the upstream request of one attempt of an embeddings request (POST
// /v1/embeddings): the client's body for catalog model m on provider p, without the gateway's
// own fields, in p's API (extproc/provider/embeddings). The router-level filter validated it.
func EmbedRequest(body []byte, m *core.Model, p *ir.Provider) (*provider.Upstream, error) {
	req, err := provider.SplitValidated(body)
	if err != nil {
		return nil, err
	}
	target := m.UpstreamName(p.Name)
	if target == "" {
		return nil, errors.New("provider " + p.Name + " does not serve model " + m.ID)
	}
	for _, f := range core.GatewayFields {
		delete(req, f)
	}
	adapter, err := embeddings.For(p.Type)
	if err != nil {
		return nil, err
	}
	return adapter.Embed(p, target, req)
}
