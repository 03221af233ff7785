package chat

// A chat request's money: the hold for its worst case taken at admission (billing.Books.Admit),
// a stream's progress checkpointed on it, and the bill settled from the metered usage at the
// answer's end, or the hold released.

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// maxRetainedBody is the largest request body kept for a later prompt count; beyond it an
// estimated bill uses the prompt bound.
const maxRetainedBody = 1 << 20

// promptTokens counts the prompt with the tokenizer (once), for a bill the provider gave no
// usage for.
func (c *Processor) promptTokens() int64 {
	if c.promptCounted {
		return c.promptCount
	}
	c.promptCount, c.promptCounted = c.promptEstimate, true
	if c.body != nil {
		if n, err := billing.CountChatPrompt(c.body); err == nil {
			c.promptCount = int64(n)
		}
	}
	return c.promptCount
}

// defaultOutputCap bounds the hold for a request with no max_tokens on a model whose catalog
// gives neither max_output_length nor context_length.
const defaultOutputCap = 4096

// admit takes the hold for the worst case this request can cost (the prompt's token count plus
// the largest answer it may get) against both the account's credits and the key's monthly
// limit, in one atomic step, so concurrent requests cannot spend past either.
func (c *Processor) admit(body []byte) *core.APIError {
	x := c.x
	b := x.Books
	// A cheap strict bound of the prompt, added up while the request was validated; the
	// tokenizer only runs when usage has to be estimated (promptTokens, once): for a rate the
	// bound alone is over, for a bill, or for a client that asked for usage from a provider
	// that reported none.
	c.promptEstimate = c.plan.promptBound
	var count func() int64
	if len(body) <= maxRetainedBody {
		c.body, count = body, c.promptTokens
	}
	// Rate limits first: a refused request holds nothing and reaches no facilitator.
	if e := x.AdmitRates(c.plan.promptBound, count, c.plan.route); e != nil {
		return e
	}
	if b == nil && !c.plan.clientUsage && c.pay == nil && !x.RateCountsTokens() {
		c.promptEstimate, c.body = 0, nil // nothing will estimate usage: the body is not kept
	}
	if b == nil && c.pay == nil {
		return nil
	}
	if e := x.StoreRefusal(); e != nil {
		return e // nothing could be billed: refused before any hold or payment
	}
	worst := c.worstCase()
	if c.pay != nil {
		// Paid through x402: the payment covers it, not the account's credits.
		c.paidHold = worst
		return c.pay.Admit(worst, c.paidBill)
	}
	// Made durable with the settler's next batch: the record a restart bills if the request
	// never settles, its prompt at the bound the hold was sized with until a checkpoint counts
	// it (priced by the writer, for the few holds it writes). A request that settles before
	// that batch is written leaves no row.
	u := ir.Usage{PromptTokens: min(c.promptEstimate, store.MaxTokens)}
	hold, err := b.Admit(c.owner(), worst, c.metered(u, decimal.Zero, true), c.plan.model.Pricing)
	if e := core.HoldRefused(err, x.Key, worst, "lower max_tokens"); e != nil {
		return e
	}
	c.hold = hold
	return nil
}

// worstCase is the most the planned request can cost: what a keyed request holds, and what an
// x402 endpoint without a price quotes.
func (c *Processor) worstCase() decimal.Decimal {
	// Any model of the chain may answer: hold for the most expensive. With n, each of the n
	// answers may be as long as the cap.
	worst := decimal.Zero
	for _, m := range c.plan.models {
		asked := c.plan.maxTokens
		if !m.CapCarried() {
			asked = 0 // some provider would not see the client's cap: it cannot bound the cost
		}
		out := outputCap(m, asked, c.promptEstimate) * max(c.plan.answers, 1)
		w := m.Pricing.WorstCase(c.promptEstimate, out)
		if m.Family == ir.ChatImageFamily {
			// An image model's answer is bounded by Gemini's own output limit when nothing
			// smaller caps it, and holds as many images as that budget pays for.
			if asked <= 0 && m.MaxOutputLength <= 0 {
				out = task.GeminiImageMaxOutput
			}
			w = m.Pricing.TaskWorstCase(c.promptEstimate, out, task.GeminiImagesBound(m.Variant, "", out), 0)
		}
		if w.GreaterThan(worst) {
			worst = w
		}
	}
	return worst
}

// outputCap is the largest answer m can give this request.
func outputCap(m *core.Model, asked, prompt int64) int64 {
	switch {
	case asked > 0 && m.MaxOutputLength > 0 && asked > m.MaxOutputLength:
		return m.MaxOutputLength
	case asked > 0:
		return asked
	case m.MaxOutputLength > 0:
		return m.MaxOutputLength
	case m.ContextLength > prompt:
		return m.ContextLength - prompt
	}
	return defaultOutputCap
}

// settle bills the request from the provider's usage, or from a token count of what was sent:
// at most its hold (no settlement exceeds its hold; what the provider reported beyond it is
// the record's overage, counted and logged for the operator).
func (c *Processor) settle() {
	c.settleRate()
	if c.hold == nil {
		return
	}
	x := c.x
	usage, estimated := c.meter.result(c.promptTokens)
	usage = storable(usage)
	metered, held := c.cost(usage), c.hold.Amount()
	hold := c.hold
	c.hold = nil
	if metered.GreaterThan(held) {
		billing.WarnOverage(x.Log, x.Provider, c.plan.model.ID, store.ShortID(x.RequestID), metered, held)
	}
	span := x.StartSpan(spans.Settlement)
	cost := hold.Settle(c.metered(usage, metered, estimated))
	x.Bill = &core.Billed{Usage: usage, Estimated: estimated, Cost: cost}
	x.EndSettlement(span, c.plan.model.ID)
}

// settleRate corrects the tokens the request's rate limit counted (its prompt's bound) to its
// usage, prompt and completion, once: a stream's at its end.
func (c *Processor) settleRate() {
	if !c.x.RateCountsTokens() {
		return
	}
	u, _ := c.meter.result(c.promptTokens)
	c.x.SettleRate(u.PromptTokens + u.CompletionTokens)
}

// rateProgressEvery is how often a stream's tokens are charged to its rates as it goes.
const rateProgressEvery = time.Second

// rateProgress charges the tokens a stream has passed so far to its rates, at most once a
// rateProgressEvery, so a long stream counts while it runs and not only at its end.
func (c *Processor) rateProgress(progress func() ir.Usage) {
	if !c.x.RateCountsTokens() {
		return
	}
	now := time.Now()
	if now.Sub(c.rateProgressed) < rateProgressEvery {
		return
	}
	c.rateProgressed = now
	u := progress()
	c.x.ProgressRate(u.PromptTokens + u.CompletionTokens)
}

// paidBill is what a paid request's answer cost, from its metered usage, at most its hold
// (the worst case priced at admission), and its usage record, the rest its overage.
func (c *Processor) paidBill() (decimal.Decimal, store.UsageRecord) {
	usage, estimated := c.meter.result(c.promptTokens)
	usage = storable(usage)
	cost, over := billing.Cap(c.cost(usage), c.paidHold)
	rec := c.owner().Record(c.metered(usage, cost, estimated), time.Time{})
	rec.Overage = over
	return cost, rec
}

// cost is what the answer cost: its usage at the answering model's prices, plus the usage the
// provider reports on other models (an Anthropic advisor's iterations), each at the token
// prices of the catalog model that serves it (Runtime.pricedAs; not its request price: they are
// part of this request). Usage on a model the catalog does not have is logged and not billed:
// the gateway has no price for it.
func (c *Processor) cost(u ir.Usage) decimal.Decimal {
	x := c.x
	cost := c.plan.model.Pricing.Cost(u)
	for _, o := range c.meter.others() {
		ou := storable(usageBill(&o.Usage))
		m := x.RT.PricedAs(x.Provider, o.Model)
		if m == nil {
			x.Log.Warn("usage on a model the catalog does not price is not billed: add a catalog model for it on this provider to bill it",
				"model", o.Model, "provider", x.Provider, "request_id", x.RequestID, "prompt_tokens", ou.PromptTokens, "completion_tokens", ou.CompletionTokens)
			continue
		}
		cost = cost.Add(m.Pricing.TokenCost(ou))
	}
	return cost
}

// storable bounds a provider's reported usage to what a usage record holds (0 to
// store.MaxTokens each, cached within prompt), so the bill and the record agree and the store
// never refuses a record the ledger was already debited for.
func storable(u ir.Usage) ir.Usage {
	clamp := func(n int64) int64 { return min(max(n, 0), store.MaxTokens) }
	u.PromptTokens, u.CompletionTokens, u.Images = clamp(u.PromptTokens), clamp(u.CompletionTokens), clamp(u.Images)
	u.CachedTokens = min(clamp(u.CachedTokens), u.PromptTokens)
	u.ImageTokens = min(clamp(u.ImageTokens), u.CompletionTokens)
	return u
}

// release drops the hold without billing (the request was refused or the provider failed).
func (c *Processor) release() {
	if c.hold != nil {
		c.hold.Release()
		c.hold = nil
	}
}

// checkpoint records how far a streaming answer has come (billing.Hold.Progress): its prompt
// counted and the completion passed so far (or the provider's usage, once sent), what a restart
// bills if the stream is cut with the gateway.
func (c *Processor) checkpoint() {
	c.rateProgress(func() ir.Usage { return c.meter.progress(c.promptTokens) })
	if !c.hold.Due() {
		return
	}
	u := storable(c.meter.progress(c.promptTokens))
	c.hold.Progress(c.metered(u, c.plan.model.Pricing.Cost(u), true))
}

// owner is whom the request's hold bills, and its usage record's fixed fields.
func (c *Processor) owner() billing.Owner {
	k := c.x.Key
	return billing.Owner{Account: k.Account, KeyID: k.ID, Limit: k.MonthlyLimit, RequestID: c.x.BillingID(), Route: c.plan.routeID()}
}

// metered is the request's usage u at cost as its usage record says it.
func (c *Processor) metered(u ir.Usage, cost decimal.Decimal, estimated bool) billing.Metered {
	return billing.Metered{Model: c.plan.model.ID, Provider: c.x.Provider, Usage: u, Cost: cost, Estimated: estimated}
}
