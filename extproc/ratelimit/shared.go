package ratelimit

// Rates shared by replicas on one store (Share): this replica holds a share of each limited
// owner's rates (store.RateShares, in parts per million) and admits in memory against that
// share of each limit, in the same sliding window as alone (local: the limit times the share,
// rounded up). It renews every share it holds at once, every renewEvery, asking for what its
// own traffic of the last period needs with headroom, and never less than what its window
// still counts (a share is never given up while what it admitted is in the window); the store
// grants shares so that the live ones never add up to more than the whole, and splits it in
// proportion to what the replicas ask for when they ask for more. That split can cut a share
// below what its replica admitted in the last minute, and the share freed is another's at
// once: so a share that grows is usable only once it has been held 61 seconds (usable: the
// least share held over the last 61 s), and in any 60-second window the replicas together
// admit at most the limit plus one request per replica (each admits at most its rounded-up
// share, and at any instant the shares add up to at most the whole). An owner's first share
// on a replica is usable at once (what was free in the store; a share freed by a split in the
// last minute may then let a little more through while the replicas' traffic shifts). The
// store is called once a renewal per replica, whatever the traffic, plus once for an owner a
// replica meets for the first time. An owner asked for nothing for idleAfter, with nothing
// left in its window, is given up. While the store cannot be reached, each replica keeps the
// shares it holds, and an owner it meets then gets the whole (it limits alone).

import (
	"log/slog"
	"math"
	"time"
)

// Share timing: how often shares are renewed, how long a grant lasts (the store frees it for
// the others after that), and when an owner's idle share is given up.
const (
	renewEvery = time.Second
	shareTTL   = 3 * time.Second
	idleAfter  = 10 * time.Second
	// headroom is what a replica asks for beyond what its traffic needed, so that growing
	// traffic finds share at the next renewal.
	headroom = 1.5
	// demandSpan is the time constant of a replica's measure of an owner's traffic: long
	// enough that a slow owner's share does not swing between its requests.
	demandSpan = 10 * time.Second
)

// ShareWhole is a whole rate in parts per million (store.ShareWhole).
const ShareWhole = 1_000_000

// Sharer grants this replica its shares of owners' rates (store.RateShares bound to it).
type Sharer interface {
	ShareRates(wants map[string]int64, now, expires time.Time) (map[string]int64, error)
}

// Share makes l hold shares of its owners' rates from s, shared with the other replicas on
// the same store; call it before l admits anything, and Renew every renewEvery (RenewEvery).
func (l *Limiter) Share(s Sharer, log *slog.Logger) {
	l.sharer, l.log = s, log
}

// RenewEvery is how often Renew must run when the rates are shared.
func RenewEvery() time.Duration { return renewEvery }

// shareState is an owner's share and the traffic it asked for since the last renewal.
type shareState struct {
	held     []heldShare // the shares granted over the last 61 s, oldest first
	granted  bool        // the store granted one at least once
	limits   Limits
	requests int64 // asked for since the last renewal, admitted or not
	tokens   int64
	lastAsk  time.Time
	// perMinute are the requests and tokens a minute asked for here, a moving average over
	// about demandSpan.
	reqPerMinute, tokPerMinute float64
}

// heldShare is a share granted at a time (in force until the next one).
type heldShare struct {
	at    time.Time
	share int64 // parts per million; 0: none (refused until a renewal grants some)
}

// shareAge is how long a share must have been held to be usable in full: the window's 61
// seconds, after which what another replica admitted on it has left every window.
const shareAge = buckets * time.Second

// local is a replica's limit at share of limit: rounded up (so it is at least one of a
// rate it holds any of), 0 without a share.
func local(limit, share int64) int64 {
	if share >= ShareWhole || limit <= 0 {
		return limit
	}
	if share <= 0 {
		return 0
	}
	return int64(math.Ceil(float64(limit) * float64(share) / ShareWhole))
}

// usable is the share this replica may admit at now: the least it held over the last 61 s
// (since its first grant).
func (s *shareState) usable(now time.Time) int64 {
	for len(s.held) > 1 && !s.held[1].at.After(now.Add(-shareAge)) {
		s.held = s.held[1:]
	}
	least := int64(ShareWhole)
	for _, h := range s.held {
		least = min(least, h.share)
	}
	return least
}

// sooner is wait, or sooner the time the usable share may grow (the last of its least
// shares leaving the 61 s), for a request refused at now.
func (s *shareState) sooner(wait time.Duration, now time.Time) time.Duration {
	if s == nil || len(s.held) == 0 {
		return max(wait, time.Millisecond)
	}
	least, n := s.usable(now), len(s.held)
	for i := n - 2; i >= 0 && s.held[n-1].share > least; i-- {
		if s.held[i].share == least { // the last of the least: gone 61 s after the next
			wait = min(wait, s.held[i+1].at.Add(shareAge).Sub(now))
			break
		}
	}
	return max(wait, time.Millisecond)
}

// want is the share this replica asks for: what its traffic (averaged over about demandSpan,
// with what came in the last period) needs of limits, with headroom, at least a hundredth and
// at most the whole, and never less than used (what its window counts, in parts of the
// whole); once idle (nothing asked for idleAfter, or two of the rate's intervals) only used,
// so 0 gives it up.
func (s *shareState) want(period time.Duration, now time.Time, used int64) int64 {
	if now.Sub(s.lastAsk) >= max(idleAfter, 2*interval(1, s.limits.Requests)) {
		return min(used, ShareWhole)
	}
	a := min(1, float64(period)/float64(demandSpan))
	perMinute := float64(time.Minute) / float64(period)
	s.reqPerMinute = a*float64(s.requests)*perMinute + (1-a)*s.reqPerMinute
	s.tokPerMinute = a*float64(s.tokens)*perMinute + (1-a)*s.tokPerMinute
	s.requests, s.tokens = 0, 0
	need := 0.0
	if s.limits.Requests > 0 {
		need = max(need, s.reqPerMinute/float64(s.limits.Requests))
	}
	if s.limits.Tokens > 0 {
		need = max(need, s.tokPerMinute/float64(s.limits.Tokens))
	}
	return min(max(int64(need*headroom*ShareWhole), ShareWhole/100, used), ShareWhole)
}

// used is what o's windows count at now, in parts of the whole of its limits (rounded up).
func (o *owner) used(limits Limits) int64 {
	var u int64
	for _, r := range []struct{ sum, limit int64 }{{o.requests.sum, limits.Requests}, {o.tokens.sum, limits.Tokens}} {
		if r.limit > 0 {
			u = max(u, int64(math.Ceil(float64(r.sum)*ShareWhole/float64(r.limit))))
		}
	}
	return u
}

// reshare makes share o's share from now (what was admitted stays counted in the window).
func (s *shareState) reshare(share int64, now time.Time) {
	if n := len(s.held); n == 0 || s.held[n-1].share != share {
		s.held = append(s.held, heldShare{now, share})
	}
}

// firstShare asks the store for a share of an owner this replica meets for the first time,
// outside the limiter's lock: the whole when the store cannot be reached.
func (l *Limiter) firstShare(id string, now time.Time) int64 {
	got, err := l.sharer.ShareRates(map[string]int64{id: ShareWhole}, now, now.Add(shareTTL))
	if err != nil {
		l.warnShare(err)
		return ShareWhole
	}
	return got[id]
}

// Renew renews every share this replica holds, asking for what each owner's traffic since
// the last renewal needs, and gives up idle ones.
func (l *Limiter) Renew() {
	now := l.now()
	l.mu.Lock()
	period := now.Sub(l.renewed)
	if l.renewed.IsZero() || period <= 0 || period > 10*renewEvery {
		period = renewEvery
	}
	l.renewed = now
	wants := map[string]int64{}
	for id, o := range l.owners {
		if o.shared != nil && o.shared.granted {
			o.advance(now)
			wants[id] = o.shared.want(period, now, o.used(o.shared.limits))
		}
	}
	l.mu.Unlock()
	if len(wants) == 0 {
		return
	}
	got, err := l.sharer.ShareRates(wants, now, now.Add(shareTTL))
	if err != nil {
		l.warnShare(err) // the shares held stay in force: the others cannot grow theirs either
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, w := range wants {
		o := l.owners[id]
		switch {
		case o == nil || o.shared == nil:
		case w == 0:
			o.shared = nil // idle, its window empty: given up
		default:
			o.shared.reshare(got[id], now)
		}
	}
}

// warnShare logs a renewal the store refused, at most once a minute.
func (l *Limiter) warnShare(err error) {
	l.warnMu.Lock()
	defer l.warnMu.Unlock()
	if now := time.Now(); now.Sub(l.warned) >= time.Minute {
		l.warned = now
		if l.log != nil {
			l.log.Warn("rate limit shares cannot be renewed in the store: this replica keeps the shares it holds, and limits an owner it meets now alone", "error", err)
		}
	}
}
