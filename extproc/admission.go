package extproc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
)

// maxRetainedBody is the largest request body kept for a later prompt count; beyond it an
// estimated bill uses the prompt bound.
const maxRetainedBody = 1 << 20

// defaultOutputCap bounds the hold for a request with no max_tokens on a model whose catalog
// gives neither max_output_length nor context_length.
const defaultOutputCap = 4096

// admit takes the hold for the worst case this request can cost (the prompt's token count plus
// the largest answer it may get) against both the account's credits and the key's monthly
// limit, in one atomic step, so concurrent requests cannot spend past either.
func (x *exchange) admit(body []byte) *APIError {
	b := x.s.billing
	if b == nil {
		return nil
	}
	// The hold uses a cheap strict bound of the prompt; the tokenizer only runs when a bill has
	// to be estimated (see promptTokens).
	bound, err := billing.PromptBound(body)
	if err != nil {
		return apiErr(http.StatusBadRequest, "invalid_messages", "messages could not be read: %v", err)
	}
	prompt := int64(bound)
	// Any model of the chain may answer: hold for the most expensive.
	worst := decimal.Zero
	for _, m := range x.plan.models {
		if w := m.Pricing.WorstCase(prompt, outputCap(m, x.plan.maxTokens, prompt)); w.GreaterThan(worst) {
			worst = w
		}
	}
	hold, err := b.Ledger.Reserve(x.key.Account, x.key.ID, x.key.MonthlyLimit, worst, b.Now())
	switch {
	case errors.Is(err, billing.ErrInsufficientCredits):
		return apiErr(http.StatusPaymentRequired, "insufficient_credits",
			"account %q does not have the credits this request may cost (up to $%s); add credits with `tollway accounts credit %s AMOUNT`, or lower max_tokens",
			x.key.Account, worst.String(), x.key.Account)
	case errors.Is(err, billing.ErrSpendLimit):
		return apiErr(http.StatusForbidden, "spend_limit_exceeded",
			"this key's monthly spend limit of $%s would be exceeded (this request may cost up to $%s); raise the limit, lower max_tokens, or wait for next month (UTC)",
			x.key.MonthlyLimit.String(), worst.String())
	case err != nil:
		return apiErr(http.StatusInternalServerError, "internal_error", "admission: %v", err)
	}
	bl := &bill{billing: b, hold: hold, key: x.key, plan: x.plan, model: x.plan.model, requestID: x.requestID, promptEstimate: prompt}
	if len(body) <= maxRetainedBody {
		bl.body = body
	}
	x.meterID = x.s.handOff(bl)
	return nil
}

// outputCap is the largest answer m can give this request.
func outputCap(m *model, asked, prompt int64) int64 {
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

// bill is the money of one admitted request: its hold, and what is known of its answer. The
// router-level exchange takes the hold; from then on the metering stream owns the bill and
// settles or releases it exactly once.
type bill struct {
	billing        *Billing
	hold           *billing.Reservation
	key            *keyInfo
	plan           *chatPlan
	model          *model // the model that answered (the plan's until the answer says)
	requestID      string
	promptEstimate int64  // strict bound of the prompt's tokens, sized the hold
	body           []byte // the request, kept (when small) to count its prompt if a bill is estimated

	meter     meter
	status    int
	responded bool   // response headers arrived: the provider answered
	provider  string // the provider that answered
}

// served records which attempt answered ("<provider>/<catalog model>"); that model's prices bill it.
func (bl *bill) served(rt *Runtime, v string) {
	if p, m := servedBy(rt, v); p != "" {
		bl.provider = p
		if m != nil {
			bl.model = m
		}
	}
}

// promptTokens counts the prompt with the tokenizer, for a bill the provider gave no usage for.
func (bl *bill) promptTokens() int64 {
	if bl.body != nil {
		if n, err := billing.CountChatPrompt(bl.body); err == nil {
			return int64(n)
		}
	}
	return bl.promptEstimate
}

// finish ends the bill: a request that got a successful answer is billed, from the provider's
// usage or an estimate of what was sent (a stream cut, a client gone mid-answer); one that got
// no answer, or an error, is released.
func (bl *bill) finish() {
	if bl.responded && bl.status < 400 {
		bl.settle()
		return
	}
	bl.release()
}

// settle bills the request from the provider's usage, or from a token count of what was sent.
func (bl *bill) settle() {
	if bl.hold == nil {
		return
	}
	b := bl.billing
	usage, estimated := bl.meter.result(bl.promptTokens)
	cost := bl.model.Pricing.Cost(usage)
	b.Ledger.Settle(bl.hold, cost)
	bl.hold = nil
	b.Record(store.UsageRecord{
		RequestID:        bl.billingID(),
		KeyID:            bl.key.ID,
		Account:          bl.key.Account,
		Model:            bl.model.ID,
		Provider:         bl.provider,
		Route:            bl.plan.routeID(),
		PromptTokens:     usage.PromptTokens,
		CompletionTokens: usage.CompletionTokens,
		CachedTokens:     usage.CachedTokens,
		Cost:             cost,
		Estimated:        estimated,
		Time:             b.Now().UTC(),
	})
}

// release drops the hold without billing (the request was refused or the provider failed).
func (bl *bill) release() {
	if bl.hold != nil {
		bl.billing.Ledger.Release(bl.hold)
		bl.hold = nil
	}
}

// billingID makes the usage record's id: the request id for tracing plus a random suffix,
// because clients can set x-request-id and a repeated id must not make a request free.
func (bl *bill) billingID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return bl.requestID + "." + hex.EncodeToString(b[:])
}
