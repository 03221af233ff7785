package core

// A keyed request's rate limits (its key's requests and tokens per minute, extproc/ratelimit,
// and its route's, all keys together): admitted with its prompt estimate before any hold is
// taken, refused with 429 rate_limit_exceeded and Retry-After, and the x-ratelimit-* headers on
// every answer to a key with limits (or through a route with limits), as OpenAI sends them.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/xds/ir"
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

// RateOwner is whom a request's rates are counted for and under which limits: its key, its
// route, or a paid endpoint's payer (x402/paid). Limits of zero limit nothing.
type RateOwner struct {
	ID     string
	Limits ratelimit.Limits
	// Route is the route's id when the owner is a route (every request through it, all keys
	// together): its refusal names it, and its headers show only when the key has none.
	Route string
}

// RouteOwner is route r as a rate owner: every request made through it.
func RouteOwner(r *ir.Route) RateOwner {
	return RateOwner{ID: "route:" + r.ID, Route: r.ID,
		Limits: ratelimit.Limits{Requests: r.RateLimits.RequestsPerMinute, Tokens: r.RateLimits.TokensPerMinute}}
}

// keyOwner is the request's key as a rate owner (zero without a key).
func (x *Exchange) keyOwner() RateOwner {
	if x.Key == nil {
		return RateOwner{}
	}
	return RateOwner{ID: "key:" + x.Key.ID, Limits: x.Key.Rates}
}

// AdmitRate counts the request, with tokens (its prompt's bound), against its key's rates, or
// refuses it with 429 rate_limit_exceeded: charged nothing, held nothing. The one step every
// keyed request takes before its hold (chat, a media create, and what reuses their admission).
// count (nil: none) is the request's tokens counted by the tokenizer, taken instead of the
// bound where the bound alone is over a tokens limit (AdmitRateAs).
func (x *Exchange) AdmitRate(tokens int64, count func() int64) *APIError {
	x.rateTokens, x.rateCount = tokens, count
	return x.AdmitRateAs(x.keyOwner())
}

// AdmitRates is AdmitRate, then, for a request made through route r (nil: a model named
// directly), the same count against the route's rates: the request must pass both (a route's
// refusal gives the key's count back, as every refusal does).
func (x *Exchange) AdmitRates(tokens int64, count func() int64, r *ir.Route) *APIError {
	if e := x.AdmitRate(tokens, count); e != nil {
		return e
	}
	if r == nil {
		return nil
	}
	x.rateRoute = RouteOwner(r)
	return x.AdmitRateAs(x.rateRoute)
}

// AdmitRateAs counts the request against o's rates too (a paid endpoint's payer), with the
// tokens its key's step counted.
func (x *Exchange) AdmitRateAs(o RateOwner) *APIError {
	if !o.Limits.Any() || x.Shared == nil || x.Rates == nil {
		return nil
	}
	if l := o.Limits.Tokens; l > 0 && x.rateTokens > l && x.rateCount != nil {
		// The bound (a byte a token) is about four times an English text's tokens: a request
		// over the whole limit by it is counted (once) before it is refused as never fitting.
		x.rateTokens = min(x.rateTokens, max(x.rateCount(), 0))
		x.rateCount = nil
	}
	g, wait, st := x.Rates.Admit(o.ID, o.Limits, x.rateTokens)
	if g == nil {
		return rateRefusal(o, x.rateTokens, wait, st)
	}
	x.rateGrants = append(x.rateGrants, rateGrant{g, o.Limits, o.Route != ""})
	return nil
}

// rateGrant is one admitted charge of the request, under its owner's limits.
type rateGrant struct {
	*ratelimit.Grant
	limits ratelimit.Limits
	route  bool // the route's, all keys together
}

// RateCountsTokens reports whether the request was admitted under a tokens rate: its usage is
// then metered to correct the count (SettleRate).
func (x *Exchange) RateCountsTokens() bool {
	for _, g := range x.rateGrants {
		if g.limits.Tokens > 0 {
			return true
		}
	}
	return false
}

// ProgressRate charges a stream's tokens used so far (prompt and completion) as it goes.
func (x *Exchange) ProgressRate(used int64) {
	for _, g := range x.rateGrants {
		g.Progress(used)
	}
}

// SettleRate corrects the request's tokens to used (prompt and completion) at its settlement.
func (x *Exchange) SettleRate(used int64) {
	for _, g := range x.rateGrants {
		g.Settle(used)
	}
}

// refundRate gives an admitted request's charges back when the gateway refuses it before any
// provider answered (a hold refused, a rewrite failed).
func (x *Exchange) refundRate() {
	if x.Responded {
		return
	}
	for _, g := range x.rateGrants {
		g.Refund()
	}
	x.rateGrants = nil // the answer's headers show the rates as the refund left them
}

// RateHeaders are the x-ratelimit headers of the request's answer; nil for a request no rate
// limits (no key, a key without limits through no route with limits). OpenAI sends one set:
// a payer's, else its key's, else its route's when the key has none.
func (x *Exchange) RateHeaders() map[string]string {
	var route *rateGrant
	for i := len(x.rateGrants) - 1; i >= 0; i-- {
		g := &x.rateGrants[i]
		if !g.route {
			return rateHeaders(g.Status) // a payer's, admitted after its key
		}
		route = g
	}
	if route != nil {
		return rateHeaders(route.Status)
	}
	o := x.keyOwner()
	if !o.Limits.Any() {
		o = x.rateRoute
	}
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
