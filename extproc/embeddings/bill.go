package embeddings

// An embeddings request's money: the hold for its worst case taken at admission through the
// chat path's Books (the account's credits and the key's monthly limit, in one atomic step),
// and the bill settled from the input tokens at the answering model's prompt price.

import (
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// admit holds the most the request can cost: its input's token bound at the most expensive
// model of its chain (an embedding has no output tokens).
func (p *Processor) admit() *core.APIError {
	x := p.x
	bound := min(p.req.bound, store.MaxTokens)
	// Rate limits first, with the input's bound (corrected to the tokens billed at settle; its
	// count where the bound alone is over a limit): a refused request holds nothing.
	var count func() int64
	if bound <= maxCounted {
		count = p.countTokens
	}
	if e := x.AdmitRates(bound, count, p.plan.route); e != nil {
		return e
	}
	b := x.Books
	if b == nil {
		return nil
	}
	if e := x.StoreRefusal(); e != nil {
		return e // nothing could be billed: refused before any hold
	}
	worst := decimal.Zero
	for _, m := range p.plan.models {
		worst = decimal.Max(worst, m.Pricing.WorstCase(bound, 0))
	}
	// Made durable with the settler's next batch, as a chat's: what a restart bills if the
	// request never settles, its input at the bound the hold was sized with.
	u := ir.Usage{PromptTokens: bound}
	hold, err := b.Admit(p.owner(), worst, p.metered(u, decimal.Zero, true), p.plan.model.Pricing)
	if e := core.HoldRefused(err, x.Key, worst, "send fewer or shorter inputs"); e != nil {
		return e
	}
	p.hold = hold
	return nil
}

// maxCounted is the largest input bound counted by the tokenizer for a rate the bound alone
// is over (about 170 ms of it); a larger one is refused by its bound.
const maxCounted = 1 << 20

// countTokens counts the input's tokens when the provider reports none (Gemini): a token
// array's length, a text's count with the tokenizer that estimates chat prompts
// (billing.CountText, o200k_base).
func (p *Processor) countTokens() int64 {
	var n int64
	for _, t := range p.req.texts {
		n += int64(billing.CountText(t))
	}
	for _, ids := range p.req.tokens {
		n += int64(len(ids))
	}
	return n
}

// settle bills the answer's input tokens at the answering model's prices (at most the hold;
// what the provider reported beyond it is the record's overage).
func (p *Processor) settle(tokens int64, estimated bool) {
	x := p.x
	u := ir.Usage{PromptTokens: min(max(tokens, 0), store.MaxTokens)}
	if x.RateCountsTokens() {
		x.SettleRate(u.PromptTokens)
	}
	if p.hold == nil {
		return
	}
	metered, held := p.plan.model.Pricing.Cost(u), p.hold.Amount()
	if metered.GreaterThan(held) {
		billing.WarnOverage(x.Log, x.Provider, p.plan.model.ID, store.ShortID(x.RequestID), metered, held)
	}
	hold := p.hold
	p.hold = nil
	span := x.StartSpan(spans.Settlement)
	cost := hold.Settle(p.metered(u, metered, estimated))
	x.Bill = &core.Billed{Usage: u, Estimated: estimated, Cost: cost}
	x.EndSettlement(span, p.plan.model.ID)
}

// release drops the hold unbilled (the request was refused, or its provider failed).
func (p *Processor) release() {
	if p.hold != nil {
		p.hold.Release()
		p.hold = nil
	}
}

// owner is whom the hold bills, and its usage record's fixed fields.
func (p *Processor) owner() billing.Owner {
	k := p.x.Key
	return billing.Owner{Account: k.Account, KeyID: k.ID, Limit: k.MonthlyLimit, RequestID: p.x.BillingID(), Route: p.plan.routeID()}
}

// metered is the request's usage at cost as its usage record says it: a chat record's shape,
// the model an embeddings model, no completion tokens.
func (p *Processor) metered(u ir.Usage, cost decimal.Decimal, estimated bool) billing.Metered {
	return billing.Metered{Model: p.plan.model.ID, Provider: p.x.Provider, Usage: u, Cost: cost, Estimated: estimated}
}
