package embeddings

import (
	"encoding/json"
	"errors"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
)

// answer rewrites a successful answer for the client and settles its bill: model names the
// catalog model (as on chat), and usage is the provider's, or the input counted here when the
// provider reports none (Gemini), the bill then an estimate. The vectors pass byte for byte.
func (p *Processor) answer(body []byte) ([]byte, error) {
	ans, err := provider.ParseRequest(body)
	if err != nil {
		return nil, err
	}
	if _, ok := ans["data"]; !ok {
		return nil, errors.New(`no "data" member`)
	}
	var usage openai.EmbeddingsUsage
	estimated := false
	if raw, ok := ans["usage"]; !ok || json.Unmarshal(raw, &usage) != nil || usage.PromptTokens <= 0 {
		n := p.countTokens()
		usage, estimated = openai.EmbeddingsUsage{PromptTokens: n, TotalTokens: n}, true
		ans["usage"] = provider.Marshal(usage)
	}
	ans["model"] = provider.Marshal(p.plan.model.ID)
	p.settle(usage.PromptTokens, estimated)
	return ans.Encode(), nil
}
