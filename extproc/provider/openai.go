package provider

import (
	"encoding/json"
	"fmt"

	"github.com/tollway/tollway/xds/ir"
)

// openAI speaks the OpenAI chat-completions API, which most providers and local servers
// (vLLM, Ollama, llama.cpp, Groq, Together, ...) also accept, and so does Tollway's own offline
// demo model (type demo).
type openAI struct{}

func init() {
	register(ir.ProviderTypeOpenAI, openAI{})
	register(ir.ProviderTypeDemo, openAI{})
}

// Parameters: the request goes on as the client sent it, fields unknown to OpenAI included.
func (openAI) Parameters() Parameters { return Parameters{Known: openAIParameters, PassUnknown: true} }

func (openAI) Chat(p *ir.Provider, model string, req Request) (*Upstream, error) {
	m, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("openai: model name: %w", err)
	}
	req["model"] = m
	body := req.Encode()
	auth := ""
	if p.APIKey != "" {
		auth = "Bearer " + p.APIKey
	}
	return &Upstream{Body: body, Path: "/chat/completions", Headers: map[string]string{"authorization": auth}}, nil
}
