// Package ratelimit owns the per-key rate limits (requests and tokens per minute) in one
// gateway's memory: the GCRA (generic cell rate algorithm) with no burst, so a rate of L per
// minute admits a request once the previous ones' cost has (about: half a request's interval
// early, for jitter) drained at L per minute. In any 60-second window that lets through at most
// L requests plus one (or, for tokens, L tokens plus one request's); a fixed minute would let 2L
// through at its boundary. Refused requests cost nothing. Tokens are charged at admission from the
// request's prompt estimate and corrected at settlement (Grant.Settle) by what was used.
package ratelimit

import (
	"log/slog"
	"math"
	"sync"
	"time"
)

// Limits are rates per minute; 0 is no limit.
type Limits struct {
	Requests, Tokens int64
}

// Any reports whether l limits anything.
func (l Limits) Any() bool { return l.Requests > 0 || l.Tokens > 0 }

// Rate is one rate's state as the x-ratelimit headers say it: the limit per minute, what of it
// the next minute still has, and how long until it is whole again.
type Rate struct {
	Limit, Remaining int64
	Reset            time.Duration
}

// Status is both rates of a key (a zero Limit: that rate is not limited).
type Status struct {
	Requests, Tokens Rate
}

// Limiter keeps each limited owner's (a key id, a payer's address on an endpoint) theoretical
// arrival times: when its requests and its tokens will have drained.
type Limiter struct {
	now     func() time.Time
	mu      sync.Mutex
	owners  map[string]*owner
	swept   time.Time
	maxIdle int // owners kept before idle ones are swept

	// sharer, when set, grants this replica its shares of the rates (shared.go); renewed is
	// when it last renewed them; log hears of failures, at most once a minute (warned).
	sharer  Sharer
	renewed time.Time
	log     *slog.Logger
	warnMu  sync.Mutex
	warned  time.Time
}

type owner struct {
	requests, tokens time.Time   // theoretical arrival times (zero: drained)
	shared           *shareState // this replica's share, when the rates are shared
}

// New is a limiter on the clock now (nil: time.Now).
func New(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, owners: map[string]*owner{}, maxIdle: 4096}
}

// interval is how long cost units take to drain at limit per minute.
func interval(cost, limit int64) time.Duration {
	if limit <= 0 || cost == 0 {
		return 0
	}
	d := float64(cost) * float64(time.Minute) / float64(limit)
	return time.Duration(max(min(d, math.MaxInt64/4), -math.MaxInt64/4))
}

// Grant is an admitted request's charge, corrected once at its end.
type Grant struct {
	l       *Limiter
	id      string
	limits  Limits
	tokens  int64 // charged so far: the estimate at admission, then a stream's progress
	share   int64 // the share of the rates it was admitted under (ShareWhole alone)
	settled bool
	// Status is the owner's rates just after the admission, for the answer's headers.
	Status Status
}

// Admit charges one request of tokens (its prompt estimate) to id under limits, or refuses it:
// then wait is how long until it would be admitted (nothing is charged).
func (l *Limiter) Admit(id string, limits Limits, tokens int64) (g *Grant, wait time.Duration, st Status) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	o := l.owners[id]
	if o == nil {
		o = &owner{}
		l.owners[id] = o
	}
	share := int64(ShareWhole)
	if l.sharer != nil {
		share = l.shareOf(o, id, limits, tokens, now)
		if share <= 0 {
			return nil, renewEvery, status(o, limits, now) // none of the rate here until a renewal
		}
	}
	iv := func(cost, limit int64) time.Duration { return scaled(interval(cost, limit), share) }
	if limits.Requests > 0 && o.requests.Sub(now) > iv(1, limits.Requests)/2 {
		wait = o.requests.Sub(now) - iv(1, limits.Requests)/2
	}
	if limits.Tokens > 0 && o.tokens.After(now) {
		wait = max(wait, o.tokens.Sub(now))
	}
	if wait > 0 {
		return nil, wait, status(o, limits, now)
	}
	if limits.Requests > 0 {
		o.requests = later(o.requests, now).Add(iv(1, limits.Requests))
	}
	if limits.Tokens > 0 {
		o.tokens = later(o.tokens, now).Add(iv(tokens, limits.Tokens))
	}
	return &Grant{l: l, id: id, limits: limits, tokens: tokens, share: share, Status: status(o, limits, now)}, 0, Status{}
}

// shareOf counts an ask of the shared owner o and says this replica's share of its rates,
// asking the store for one the first time (the limiter's lock let go meanwhile).
func (l *Limiter) shareOf(o *owner, id string, limits Limits, tokens int64, now time.Time) int64 {
	if o.shared == nil {
		o.shared = &shareState{}
	}
	st := o.shared
	st.limits, st.lastAsk = limits, now
	st.requests++
	st.tokens += max(tokens, 0)
	if !st.granted {
		l.mu.Unlock()
		got := l.firstShare(id, now)
		l.mu.Lock()
		if !st.granted {
			st.share, st.granted = got, true
			st.reqPerMinute = float64(limits.Requests) // asked for the whole: so it seems until measured
			st.tokPerMinute = float64(limits.Tokens)
		}
	}
	return st.share
}

// Peek is id's rates now, charging nothing (an answer refused before admission).
func (l *Limiter) Peek(id string, limits Limits) Status {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.owners[id]
	if o == nil {
		o = &owner{}
	}
	return status(o, limits, now)
}

// Progress charges a stream's tokens as it goes: used so far (prompt and completion), beyond
// what the grant charged, is charged now. Before Settle only.
func (g *Grant) Progress(used int64) {
	if g == nil {
		return
	}
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if o := g.l.owners[g.id]; o != nil && !g.settled && used > g.tokens {
		g.charge(o, used, g.l.now())
	}
}

// Settle corrects the grant's tokens to used (prompt and completion), once; a later call does
// nothing.
func (g *Grant) Settle(used int64) {
	g.end(func(o *owner, now time.Time) { g.charge(o, used, now) })
}

// charge corrects the tokens charged to used: more is spent now (it drains from now on at the
// latest), less is given back.
func (g *Grant) charge(o *owner, used int64, now time.Time) {
	if g.limits.Tokens <= 0 {
		return
	}
	if extra := used - g.tokens; extra > 0 {
		o.tokens = later(o.tokens, now).Add(scaled(interval(extra, g.limits.Tokens), g.share))
	} else {
		o.tokens = o.tokens.Add(scaled(interval(extra, g.limits.Tokens), g.share))
	}
	g.tokens = used
}

// Refund gives the whole charge back (the gateway refused the request after admitting it: it
// reached no provider), once; after Settle it does nothing.
func (g *Grant) Refund() {
	g.end(func(o *owner, _ time.Time) {
		if g.limits.Requests > 0 {
			o.requests = o.requests.Add(-scaled(interval(1, g.limits.Requests), g.share))
		}
		if g.limits.Tokens > 0 {
			o.tokens = o.tokens.Add(-scaled(interval(g.tokens, g.limits.Tokens), g.share))
		}
	})
}

// end runs fn on the grant's owner, the first time a grant ends.
func (g *Grant) end(fn func(o *owner, now time.Time)) {
	if g == nil {
		return
	}
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if g.settled {
		return
	}
	g.settled = true
	if o := g.l.owners[g.id]; o != nil {
		fn(o, g.l.now())
	}
}

// sweep drops owners whose rates have drained, at most once a minute and only when there are
// many (payers' addresses come and go).
func (l *Limiter) sweep(now time.Time) {
	if len(l.owners) <= l.maxIdle || now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for id, o := range l.owners {
		if !o.requests.After(now) && !o.tokens.After(now) {
			delete(l.owners, id)
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// status is o's rates at now under limits.
func status(o *owner, limits Limits, now time.Time) Status {
	return Status{Requests: rate(o.requests, limits.Requests, now), Tokens: rate(o.tokens, limits.Tokens, now)}
}

// rate is one rate's headers: what has not drained by now is what the next minute lacks.
func rate(tat time.Time, limit int64, now time.Time) Rate {
	if limit <= 0 {
		return Rate{}
	}
	left := max(tat.Sub(now), 0)
	used := int64(math.Ceil(float64(left) * float64(limit) / float64(time.Minute)))
	return Rate{Limit: limit, Remaining: min(max(limit-used, 0), limit), Reset: left}
}
