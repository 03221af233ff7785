package extproc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// maxRetainedBody is the largest request body kept for a later prompt count; beyond it an
// estimated bill uses the prompt bound.
const maxRetainedBody = 1 << 20

// promptTokens counts the prompt with the tokenizer (once), for a bill the provider gave no
// usage for.
func (x *exchange) promptTokens() int64 {
	if x.promptCounted {
		return x.promptCount
	}
	x.promptCount, x.promptCounted = x.promptEstimate, true
	if x.body != nil {
		if n, err := billing.CountChatPrompt(x.body); err == nil {
			x.promptCount = int64(n)
		}
	}
	return x.promptCount
}

// defaultOutputCap bounds the hold for a request with no max_tokens on a model whose catalog
// gives neither max_output_length nor context_length.
const defaultOutputCap = 4096

// admit takes the hold for the worst case this request can cost (the prompt's token count plus
// the largest answer it may get) against both the account's credits and the key's monthly
// limit, in one atomic step, so concurrent requests cannot spend past either.
func (x *exchange) admit(body []byte) *core.APIError {
	b := x.s.billing
	if b != nil || x.plan.clientUsage || x.pay != nil {
		// A cheap strict bound of the prompt, added up while the request was validated; the
		// tokenizer only runs when usage has to be estimated (see promptTokens): for a bill, or
		// for a client that asked for usage from a provider that reported none.
		x.promptEstimate = x.plan.promptBound
		if len(body) <= maxRetainedBody {
			x.body = body
		}
	}
	if b == nil && x.pay == nil {
		return nil
	}
	if e := x.s.storeRefusal(); e != nil {
		return e // nothing could be billed: refused before any hold or payment
	}
	worst := x.worstCase()
	if x.pay != nil {
		// Paid through x402: the payment covers it, not the account's credits.
		return x.payAdmit(worst)
	}
	// Made durable with the settler's next batch: the record a restart bills if the request
	// never settles, its prompt at the bound the hold was sized with until a checkpoint counts
	// it. A request that settles before that batch is written leaves no row.
	u := ir.Usage{PromptTokens: min(x.promptEstimate, store.MaxTokens)}
	m := x.plan.model // priced by the writer, for the few holds it writes
	hold, err := b.Admit(x.key.Account, x.key.ID, x.key.MonthlyLimit, worst, x.billingID(),
		func(at time.Time) store.UsageRecord { return x.usageRecord(u, decimal.Zero, true, at) },
		func() decimal.Decimal { return m.Pricing.Cost(u) })
	if e := x.holdRefused(err, worst, "lower max_tokens"); e != nil {
		return e
	}
	x.hold = hold
	return nil
}

// worstCase is the most the planned request can cost: what a keyed request holds, and what an
// x402 endpoint without a price quotes.
func (x *exchange) worstCase() decimal.Decimal {
	// Any model of the chain may answer: hold for the most expensive. With n, each of the n
	// answers may be as long as the cap.
	worst := decimal.Zero
	for _, m := range x.plan.models {
		asked := x.plan.maxTokens
		if !m.CapCarried() {
			asked = 0 // some provider would not see the client's cap: it cannot bound the cost
		}
		out := outputCap(m, asked, x.promptEstimate) * max(x.plan.answers, 1)
		w := m.Pricing.WorstCase(x.promptEstimate, out)
		if m.Family == ir.ChatImageFamily {
			// An image model's answer is bounded by Gemini's own output limit when nothing
			// smaller caps it, and holds as many images as that budget pays for.
			if asked <= 0 && m.MaxOutputLength <= 0 {
				out = task.GeminiImageMaxOutput
			}
			w = m.Pricing.TaskWorstCase(x.promptEstimate, out, task.GeminiImagesBound(m.Variant, "", out), 0)
		}
		if w.GreaterThan(worst) {
			worst = w
		}
	}
	return worst
}

// holdRefused says why the ledger refused a hold of worst for the request's key (nil: it did
// not); lower names what the client can reduce.
func (x *exchange) holdRefused(err error, worst decimal.Decimal, lower string) *core.APIError {
	switch {
	case errors.Is(err, billing.ErrInsufficientCredits):
		e := core.Errorf(http.StatusPaymentRequired, "insufficient_credits",
			"account %q does not have the credits this request may cost (up to $%s); ask the gateway's operator to add credits, or %s",
			x.key.Account, worst.String(), lower)
		e.Operator = fmt.Sprintf("account %s does not have the credits its requests may cost: add credits with `tollway accounts credit %s AMOUNT`",
			x.key.Account, x.key.Account)
		return e
	case errors.Is(err, billing.ErrSpendLimit):
		return core.Errorf(http.StatusForbidden, "spend_limit_exceeded",
			"this key's monthly spend limit of $%s would be exceeded (this request may cost up to $%s); %s, wait for next month (UTC), or ask the gateway's operator to raise the limit (GET /v1/key shows what remains)",
			x.key.MonthlyLimit.String(), worst.String(), lower)
	case errors.Is(err, store.ErrUnavailable): // a budget slice ran out with the store down
		e := core.Errorf(http.StatusServiceUnavailable, "store_unavailable", "the gateway cannot reach its store to lease budget for this request; nothing was charged; retry later")
		e.Headers = map[string]string{"retry-after": "10"}
		return e
	case err != nil:
		return core.Errorf(http.StatusInternalServerError, "internal_error", "admission: %v", err)
	}
	return nil
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
func (x *exchange) settle() {
	if x.hold == nil {
		return
	}
	usage, estimated := x.meter.result(x.promptTokens)
	usage = storable(usage)
	metered, held := x.cost(usage), x.hold.Amount()
	hold := x.hold
	x.hold = nil
	hold.Settle(metered, func(cost decimal.Decimal, at time.Time) store.UsageRecord {
		if metered.GreaterThan(held) {
			billing.WarnOverage(x.s.log, x.provider, x.plan.model.ID, store.ShortID(x.requestID), metered, held)
		}
		x.bill = &billed{usage: usage, estimated: estimated, cost: cost}
		return x.usageRecord(usage, cost, estimated, at)
	})
}

// cost is what the answer cost: its usage at the answering model's prices, plus the usage the
// provider reports on other models (an Anthropic advisor's iterations), each at the token
// prices of the catalog model that serves it (Runtime.pricedAs; not its request price: they are
// part of this request). Usage on a model the catalog does not have is logged and not billed:
// the gateway has no price for it.
func (x *exchange) cost(u ir.Usage) decimal.Decimal {
	cost := x.plan.model.Pricing.Cost(u)
	for _, o := range x.meter.others() {
		ou := storable(usageBill(&o.Usage))
		m := x.rt.PricedAs(x.provider, o.Model)
		if m == nil {
			x.s.log.Warn("usage on a model the catalog does not price is not billed: add a catalog model for it on this provider to bill it",
				"model", o.Model, "provider", x.provider, "request_id", x.requestID, "prompt_tokens", ou.PromptTokens, "completion_tokens", ou.CompletionTokens)
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
func (x *exchange) release() {
	if x.hold != nil {
		x.hold.Release()
		x.hold = nil
	}
}

// finish runs when the ext_proc stream ends. A hold still open means the exchange ended early:
// if the provider had answered (a stream cut, a client gone mid-answer) the request is billed
// from what was sent; if not, nothing was delivered and the hold is released. A paid
// request's credential is no longer in use then.
func (x *exchange) finish() {
	defer x.endPaying()
	if x.responded && x.status < 400 {
		_ = x.paidSettle() // a paid stream cut before its end settles what was sent
		x.settle()
		return
	}
	x.release()
}

// billingID is the usage record's id (made once, so a request's hold and record share it):
// the request id for tracing plus a random suffix, because clients can set x-request-id and a
// repeated id must not make a request free.
func (x *exchange) billingID() string {
	if x.billID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		x.billID = x.requestID + "." + hex.EncodeToString(b[:])
	}
	return x.billID
}
