package embeddings

import (
	"encoding/json"
	"fmt"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// toOpenAI speaks OpenAI's embeddings API, which OpenAI-compatible servers (vLLM, Ollama,
// Together, ...) and Tollway's demo model also accept: the request goes on as the client sent
// it, its model named for the provider, and the answer needs no translation.
type toOpenAI struct{}

func (toOpenAI) Embed(p *ir.Provider, model string, req provider.Request) (*provider.Upstream, error) {
	name, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("openai: model name: %w", err)
	}
	req["model"] = name
	auth := ""
	if p.APIKey != "" {
		auth = "Bearer " + p.APIKey
	}
	return &provider.Upstream{Body: req.Encode(), Path: "/embeddings", Headers: map[string]string{"authorization": auth}}, nil
}
