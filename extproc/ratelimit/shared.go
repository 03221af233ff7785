package ratelimit

// Rates shared by replicas on one store (Share): this replica holds a share of each limited
// owner's rates (store.RateShares, in parts per million) and admits at that share of them in
// memory, with the same GCRA as alone (the intervals stretched by the share). It renews every
// share it holds at once, every renewEvery, asking for what its own traffic of the last period
// needs with headroom; the store grants shares so that the live ones never add up to more than
// the whole, and splits it in proportion to what the replicas ask for when they ask for more.
// So in any 60-second window the replicas together admit at most the limit plus one request
// per replica (each admits its share of the limit plus one), and the store is called once a
// renewal per replica, whatever the traffic, plus once for an owner a replica meets for the
// first time. An owner asked for nothing for idleAfter is given up. While the store cannot be
// reached, each replica keeps the shares it holds, and an owner it meets then gets the whole
// (it limits alone).

import (
	"log/slog"
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
	share    int64 // parts per million; 0: none (refused until a renewal grants some)
	granted  bool  // the store granted one at least once
	limits   Limits
	requests int64 // asked for since the last renewal, admitted or not
	tokens   int64
	lastAsk  time.Time
	// perMinute are the requests and tokens a minute asked for here, a moving average over
	// about demandSpan.
	reqPerMinute, tokPerMinute float64
}

// scaled is d stretched by a share: the interval at share of the rate.
func scaled(d time.Duration, share int64) time.Duration {
	if share == ShareWhole {
		return d
	}
	return time.Duration(float64(d) * ShareWhole / float64(share))
}

// want is the share this replica asks for: what its traffic (averaged over about demandSpan,
// with what came in the last period) needs of limits, with headroom, at least a hundredth and
// at most the whole; 0 once idle (nothing asked for idleAfter, or two of the rate's intervals).
func (s *shareState) want(period time.Duration, now time.Time) int64 {
	if now.Sub(s.lastAsk) >= max(idleAfter, 2*interval(1, s.limits.Requests)) {
		return 0
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
	return min(max(int64(need*headroom*ShareWhole), ShareWhole/100), ShareWhole)
}

// reshare makes share o's share from now: what its theoretical arrival times are ahead of now
// is stretched by the old share over the new, so what was admitted counts at the new rate.
func (o *owner) reshare(share int64, now time.Time) {
	old := o.shared.share
	o.shared.share = share
	if old == share || old <= 0 || share <= 0 {
		return
	}
	for _, tat := range []*time.Time{&o.requests, &o.tokens} {
		if tat.After(now) {
			*tat = now.Add(time.Duration(float64(tat.Sub(now)) * float64(old) / float64(share)))
		}
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
			wants[id] = o.shared.want(period, now)
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
			// Idle: given up; its arrival times stay (at the whole rate's scale) until swept.
			o.reshare(ShareWhole, now)
			o.shared = nil
		default:
			o.reshare(got[id], now)
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
