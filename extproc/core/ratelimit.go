package core

// A keyed request's rate limits (its key's requests and tokens per minute, extproc/ratelimit):
// admitted with its prompt estimate before any hold is taken, refused with 429
// rate_limit_exceeded and Retry-After, and the x-ratelimit-* headers on every answer to a key
// with limits, as OpenAI sends them.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tollway/tollway/extproc/ratelimit"
)

// The x-ratelimit headers, OpenAI's names.
const (
	hdrLimitRequests     = "x-ratelimit-limit-requests"
	hdrRemainingRequests = "x-ratelimit-remaining-requests"
	hdrResetRequests     = "x-ratelimit-reset-requests"
	hdrLimitTokens       = "x-ratelimit-limit-tokens"
	hdrRemainingTokens   = "x-ratelimit-remaining-tokens"
	hdrResetTokens       = "x-ratelimit-reset-tokens"
)

// RateOwner is who a request's rates are counted for and under which limits: its key, or a
// paid endpoint's payer (x402/paid). A zero RateOwner limits nothing.
type RateOwner struct {
	ID     string
	Limits ratelimit.Limits
}

// rateOwner is the request's: set by the paid endpoint, else its key's.
func (x *Exchange) rateOwner() RateOwner {
	if x.RateBy.ID != "" {
		return x.RateBy
	}
	if x.Key == nil || x.Shared == nil || x.Rates == nil {
		return RateOwner{}
	}
	return RateOwner{ID: "key:" + x.Key.ID, Limits: x.Key.Rates}
}

// AdmitRate counts the request, with tokens (its prompt estimate), against its owner's rates,
// or refuses it with 429 rate_limit_exceeded: charged nothing, held nothing. The one step every
// keyed request takes before its hold (chat, a media create, and what reuses their admission).
func (x *Exchange) AdmitRate(tokens int64) *APIError {
	o := x.rateOwner()
	if !o.Limits.Any() || x.rateGrant != nil || x.Shared == nil || x.Rates == nil {
		return nil
	}
	g, wait, st := x.Rates.Admit(o.ID, o.Limits, tokens)
	if g == nil {
		return rateRefusal(o, wait, st)
	}
	x.rateGrant = g
	return nil
}

// RateCountsTokens reports whether the request was admitted under a tokens rate: its usage is
// then metered to correct the count (SettleRate).
func (x *Exchange) RateCountsTokens() bool {
	return x.rateGrant != nil && x.rateOwner().Limits.Tokens > 0
}

// SettleRate corrects the request's tokens to used (prompt and completion) at its settlement.
func (x *Exchange) SettleRate(used int64) { x.rateGrant.Settle(used) }

// refundRate gives an admitted request's charge back when the gateway refuses it before any
// provider answered (a hold refused, a rewrite failed).
func (x *Exchange) refundRate() {
	if x.rateGrant != nil && !x.Responded {
		x.rateGrant.Refund()
		x.rateGrant = nil // the answer's headers show the rates as the refund left them
	}
}

// RateHeaders are the x-ratelimit headers of the request's answer; nil for a request no rate
// limits (no key, a key without limits).
func (x *Exchange) RateHeaders() map[string]string {
	if x.rateGrant != nil {
		return rateHeaders(x.rateGrant.Status)
	}
	o := x.rateOwner()
	if !o.Limits.Any() || x.Shared == nil || x.Rates == nil {
		return nil
	}
	return rateHeaders(x.Rates.Peek(o.ID, o.Limits))
}

// rateHeaders are st as OpenAI's headers; a rate that is not limited has none.
func rateHeaders(st ratelimit.Status) map[string]string {
	h := map[string]string{}
	for _, r := range []struct {
		rate                    ratelimit.Rate
		limit, remaining, reset string
	}{
		{st.Requests, hdrLimitRequests, hdrRemainingRequests, hdrResetRequests},
		{st.Tokens, hdrLimitTokens, hdrRemainingTokens, hdrResetTokens},
	} {
		if r.rate.Limit == 0 {
			continue
		}
		h[r.limit] = strconv.FormatInt(r.rate.Limit, 10)
		h[r.remaining] = strconv.FormatInt(r.rate.Remaining, 10)
		h[r.reset] = ResetText(r.rate.Reset)
	}
	return h
}

// ResetText is a reset time as OpenAI writes it: "1s", "6m0s", "17ms" (Go's duration text, to
// the millisecond; up to the next millisecond so a reset is never early).
func ResetText(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	d = (d + time.Millisecond - 1).Truncate(time.Millisecond)
	if d >= time.Second {
		d = d.Round(10 * time.Millisecond)
	}
	return fmt.Sprint(d)
}
