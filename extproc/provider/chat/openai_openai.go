package chat

import (
	"encoding/json"
	"fmt"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// toOpenAI speaks the OpenAI chat-completions API, which most providers and local servers
// (vLLM, Ollama, llama.cpp, Groq, Together, ...) also accept, and so does Tollway's own offline
// demo model (type demo).
type toOpenAI struct{}

// Parameters: the request goes on as the client sent it, fields unknown to OpenAI included.
func (toOpenAI) Parameters() Parameters {
	return Parameters{Known: openAIParameters, PassUnknown: true}
}

func (toOpenAI) Chat(p *ir.Provider, _ *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	name, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("openai: model name: %w", err)
	}
	req["model"] = name
	body := req.Encode()
	auth := ""
	if p.APIKey != "" {
		auth = "Bearer " + p.APIKey
	}
	return &provider.Upstream{Body: body, Path: "/chat/completions", Headers: map[string]string{"authorization": auth}}, nil
}
