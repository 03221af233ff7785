package recorded

import "github.com/shopspring/decimal"

// Prices are a catalog model's prices in USD per unit, as the catalog writes them ("" is 0).
type Prices struct {
	Prompt, Completion, CacheRead, Request, Image string
}

func (p Prices) of(s string) decimal.Decimal {
	if s == "" {
		return decimal.Zero
	}
	return decimal.RequireFromString(s)
}

// Bill is what the gateway must bill for a recording's answer, restated from docs/money.md's
// rules rather than shared with the gateway: the model's prices for its usage (uncached prompt
// tokens, cached ones at the cache-read price when it has one, output tokens, the request),
// the image price per image where the model has one, the images' output tokens then not
// billed again; usage on another model at that model's prices (others, by the provider's name
// for it), nothing where the catalog has none. ok is false when the recording reports no usage
// to bill from (the bill is then an estimate).
func (e *Expected) Bill(model Prices, others map[string]Prices) (cost decimal.Decimal, ok bool) {
	u := e.Usage
	if u == nil || u.Prompt == 0 && u.Completion == 0 {
		return decimal.Zero, false
	}
	completion := u.Completion
	if model.of(model.Image).IsPositive() && e.Images > 0 {
		completion -= u.ImageTokens
	}
	cost = tokensCost(model, u.Prompt, u.Cached, completion).
		Add(model.of(model.Request)).
		Add(model.of(model.Image).Mul(decimal.NewFromInt(e.Images)))
	for _, o := range u.Others {
		if p, priced := others[o.Model]; priced {
			cost = cost.Add(tokensCost(p, o.Prompt, o.Cached, o.Completion))
		}
	}
	return cost, true
}

func tokensCost(p Prices, prompt, cached, completion int64) decimal.Decimal {
	if !p.of(p.CacheRead).IsPositive() {
		cached = 0 // no cache price: cached tokens are prompt tokens
	}
	return p.of(p.Prompt).Mul(decimal.NewFromInt(prompt - cached)).
		Add(p.of(p.CacheRead).Mul(decimal.NewFromInt(cached))).
		Add(p.of(p.Completion).Mul(decimal.NewFromInt(completion)))
}
