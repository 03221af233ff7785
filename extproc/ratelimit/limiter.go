// Package ratelimit owns the rate limits of keys, routes and payers (requests and tokens per
// minute) in one gateway's memory: a sliding window of per-second counts (window.go) over the
// last minute, so an owner may spend its whole minute's allowance at once (a burst, as OpenAI's
// limits allow) and still at most the limit passes in any 60-second window (a fixed minute would
// let 2x through at its boundary). Refused requests cost nothing. Tokens are charged at
// admission from the request's prompt estimate and corrected at settlement (Grant.Settle) by
// what was used.
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

// Limiter keeps each limited owner's (a key id, a payer's address on an endpoint) windows:
// what its requests and its tokens counted in each second of the last minute.
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
	requests, tokens window
	shared           *shareState // this replica's share, when the rates are shared
}

// advance moves o's windows to now.
func (o *owner) advance(now time.Time) {
	o.requests.advance(second(now))
	o.tokens.advance(second(now))
}

// New is a limiter on the clock now (nil: time.Now).
func New(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, owners: map[string]*owner{}, maxIdle: 4096}
}

// interval is how long cost units take at limit per minute (a share's idle rule).
func interval(cost, limit int64) time.Duration {
	if limit <= 0 || cost == 0 {
		return 0
	}
	d := float64(cost) * float64(time.Minute) / float64(limit)
	return time.Duration(max(min(d, math.MaxInt64/4), -math.MaxInt64/4))
}

// TooLarge is the wait of a request refused because its cost alone is over its owner's whole
// limit: it can never pass (a request of more tokens than the tokens per minute).
const TooLarge = time.Minute

// Grant is an admitted request's charge, corrected once at its end.
type Grant struct {
	l       *Limiter
	id      string
	limits  Limits
	sec     int64    // the second (bucket) the request was counted in
	tokens  int64    // charged so far: the estimate at admission, then a stream's progress
	charged []charge // where the tokens were counted, oldest first
	settled bool
	// Status is the owner's rates just after the admission, for the answer's headers.
	Status Status
}

// Admit charges one request of tokens (its prompt estimate) to id under limits, or refuses it:
// then wait is how long until it would fit (nothing is charged); TooLarge when its tokens
// alone are over the whole limit.
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
	}
	o.advance(now)
	if limits.Tokens > 0 && tokens > limits.Tokens {
		return nil, TooLarge, status(o, limits, share, now)
	}
	if share <= 0 {
		return nil, o.shared.sooner(renewEvery, now), status(o, limits, share, now) // none of the rate here yet
	}
	if wait = o.wait(limits, share, tokens, now); wait > 0 {
		if l.sharer != nil {
			wait = o.shared.sooner(wait, now)
		}
		return nil, wait, status(o, limits, share, now)
	}
	sec := second(now)
	if limits.Requests > 0 {
		o.requests.add(sec, 1)
	}
	if limits.Tokens > 0 {
		o.tokens.add(sec, tokens)
	}
	g = &Grant{l: l, id: id, limits: limits, sec: sec, tokens: tokens, Status: status(o, limits, share, now)}
	if limits.Tokens > 0 && tokens > 0 {
		g.charged = []charge{{sec, tokens}}
	}
	return g, 0, Status{}
}

// wait is how long until a request of tokens fits in o's windows at share of limits (0: it
// fits now); renewEvery when it cannot fit this replica's share (a renewal may grow it).
func (o *owner) wait(limits Limits, share, tokens int64, now time.Time) time.Duration {
	var wait time.Duration
	for _, r := range []struct {
		w           *window
		cost, limit int64
	}{{&o.requests, 1, limits.Requests}, {&o.tokens, tokens, limits.Tokens}} {
		if r.limit <= 0 {
			continue
		}
		d, ok := r.w.wait(r.cost, local(r.limit, share), now)
		if !ok {
			d = renewEvery
		}
		wait = max(wait, d)
	}
	return wait
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
			st.granted = true
			st.held = []heldShare{{now, got}}
			st.reqPerMinute = float64(limits.Requests) // asked for the whole: so it seems until measured
			st.tokPerMinute = float64(limits.Tokens)
		}
	}
	return st.usable(now)
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
	o.advance(now)
	share := int64(ShareWhole)
	if o.shared != nil && o.shared.granted {
		share = o.shared.usable(now)
	}
	return status(o, limits, share, now)
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

// charge is tokens a grant counted in a second.
type charge struct{ sec, n int64 }

// charge corrects the tokens charged to used: more is counted in the current second, less is
// given back from the seconds the grant counted them in (the newest first) while they are in
// the window.
func (g *Grant) charge(o *owner, used int64, now time.Time) {
	if g.limits.Tokens <= 0 {
		return
	}
	if extra := used - g.tokens; extra > 0 {
		sec := second(now)
		o.tokens.add(sec, extra)
		if n := len(g.charged); n > 0 && g.charged[n-1].sec == sec {
			g.charged[n-1].n += extra
		} else {
			for len(g.charged) > 0 && !o.tokens.holds(g.charged[0].sec) {
				g.charged = g.charged[1:] // left the window: past correcting (a long stream's stay few)
			}
			g.charged = append(g.charged, charge{sec, extra})
		}
	} else {
		g.giveBack(o, -extra, now)
	}
	g.tokens = used
}

// giveBack takes n of the grant's tokens back from the seconds it counted them in, the newest
// first, while they are in the window (what left it is past correcting).
func (g *Grant) giveBack(o *owner, n int64, now time.Time) {
	o.tokens.advance(second(now))
	for i := len(g.charged) - 1; i >= 0 && n > 0; i-- {
		c := &g.charged[i]
		back := min(n, c.n)
		if o.tokens.holds(c.sec) {
			o.tokens.add(c.sec, -back)
		}
		c.n -= back
		n -= back
	}
}

// Refund gives the whole charge back (the gateway refused the request after admitting it: it
// reached no provider) from the grant's second while it is in the window, once; after Settle
// it does nothing.
func (g *Grant) Refund() {
	g.end(func(o *owner, now time.Time) {
		o.advance(now)
		if g.limits.Requests > 0 {
			o.requests.add(g.sec, -1)
		}
		if g.limits.Tokens > 0 {
			g.giveBack(o, g.tokens, now)
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

// sweep drops owners whose windows are empty and that hold no share, at most once a minute
// and only when there are many (payers' addresses come and go).
func (l *Limiter) sweep(now time.Time) {
	if len(l.owners) <= l.maxIdle || now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for id, o := range l.owners {
		if o.advance(now); o.requests.sum == 0 && o.tokens.sum == 0 && o.shared == nil {
			delete(l.owners, id)
		}
	}
}

// status is o's rates at now under limits, this replica holding share of them.
func status(o *owner, limits Limits, share int64, now time.Time) Status {
	return Status{
		Requests: rate(&o.requests, limits.Requests, share, now),
		Tokens:   rate(&o.tokens, limits.Tokens, share, now),
	}
}

// rate is one rate's headers: the limit, what of it the window leaves (this replica's part
// shown at the whole's scale), and how long until the window holds nothing.
func rate(w *window, limit, share int64, now time.Time) Rate {
	if limit <= 0 {
		return Rate{}
	}
	left := max(local(limit, share)-w.sum, 0)
	if share != ShareWhole {
		left = 0
		if share > 0 {
			left = int64(math.Floor(float64(max(local(limit, share)-w.sum, 0)) * ShareWhole / float64(share)))
		}
	}
	return Rate{Limit: limit, Remaining: min(left, limit), Reset: w.reset(now)}
}
