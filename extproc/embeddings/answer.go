package embeddings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
)

// answer rewrites a successful answer for the client and settles its bill: model names the
// catalog model (as on chat), and usage is the provider's, or the input counted here when the
// provider reports none (Gemini), the bill then an estimate. The vectors pass byte for byte.
// An answer without one embedding per input is none (the client's inputs and vectors would
// not line up): refused, as Gemini's translation refuses it.
func (p *Processor) answer(body []byte) ([]byte, error) {
	ans, err := provider.ParseRequest(body)
	if err != nil {
		return nil, fmt.Errorf("answered with no embeddings list: %w", err)
	}
	data, ok := ans["data"]
	if !ok {
		return nil, errors.New(`answered with no embeddings list (no "data" member)`)
	}
	if n, err := count(data); err != nil {
		return nil, fmt.Errorf("answered with no embeddings list: %w", err)
	} else if n != p.req.inputs() {
		return nil, fmt.Errorf("answered %d embeddings for %d inputs", n, p.req.inputs())
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

// count is how many values the JSON array list holds (skipped, not decoded).
func count(list []byte) (int, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(list))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '[' {
		return 0, errors.New(`"data" is not a list`)
	}
	n := 0
	for dec.PeekKind() != ']' {
		if err := dec.SkipValue(); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}
