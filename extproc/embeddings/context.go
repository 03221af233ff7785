package embeddings

// The model's context_length, per input: an input longer than the model takes is refused
// before the request is admitted (no rate spent, no hold, no provider asked), where the
// provider would refuse it after all of them (OpenAI: 400 "This model's maximum context
// length is 8192 tokens").

import (
	"fmt"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
)

// firstModel is the model the request's first attempt runs: the pinned model, or the first
// of its chain (a route's first model with a provider that can take traffic). A provider's
// 400 ends the chain, so an input over this model's limit is never served.
func (p *plan) firstModel(rt *core.Runtime) *core.Model {
	if ch := rt.Chains[p.cluster]; p.pinned == "" && len(ch) > 0 {
		if m := rt.Models[ch[0].Model]; m != nil {
			return m
		}
	}
	return p.model
}

// fitsContext refuses an input whose own tokens (a token array's length, a text's count with
// the gateway's tokenizer) exceed the first model's context_length. The special tokens a
// provider may add (specialTokens, for the hold) are not counted: OpenAI's limit is on the
// input's own tokens. A text no longer in bytes than the limit is not counted (a token spans
// at least a byte), and at most maxCounted bytes of text are counted per request (about
// 170 ms): what is beyond is the provider's to refuse, as without context_length.
func (p *plan) fitsContext(rt *core.Runtime, req *request) *core.APIError {
	m := p.firstModel(rt)
	limit := m.ContextLength
	if limit <= 0 {
		return nil
	}
	over := func(i int, n string) *core.APIError {
		return bad("invalid_request", "%s is %s tokens; model %s takes at most %d per input: split it or shorten it", at(i, req.single), n, m.ID, limit)
	}
	for i, ids := range req.tokens {
		if n := int64(len(ids)); n > limit {
			return over(i, fmt.Sprint(n))
		}
	}
	budget := maxCounted
	for i, t := range req.texts {
		if int64(len(t)) <= limit || budget <= 0 {
			continue
		}
		part := provider.Cut(t, budget)
		budget -= len(part)
		n := int64(billing.CountText(part))
		switch {
		case n > limit && len(part) == len(t):
			return over(i, fmt.Sprint(n))
		case n > limit:
			return over(i, fmt.Sprintf("over %d", n-1)) // a cut text's count may gain a token at the cut
		}
	}
	return nil
}
