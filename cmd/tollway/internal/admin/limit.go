package admin

// Guessing the admin token: each wrong bearer token or console sign-in is logged (WARN, the
// source address, never the token), and after maxAuthFailures of them from one source within
// authWindow, that source's attempts are answered 429 with Retry-After, the right token
// included (else guessing would go on), until the oldest failure is a window old. Other sources
// are unaffected. A source is an IPv4 address or an IPv6 /64 (one host's usual allotment).

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

const (
	maxAuthFailures = 10
	authWindow      = time.Minute
	// maxAuthSources bounds memory: past it the source that failed longest ago is forgotten.
	maxAuthSources = 4096
)

type authLimiter struct {
	mu    sync.Mutex
	fails map[netip.Prefix][]time.Time // failures within the window, oldest first
	now   func() time.Time
	log   *slog.Logger
}

func newAuthLimiter(log *slog.Logger) *authLimiter {
	return &authLimiter{fails: map[netip.Prefix][]time.Time{}, now: time.Now, log: log}
}

// source is the client's address as the limiter counts it; false when RemoteAddr is no IP.
func source(r *http.Request) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}, false
	}
	a := ap.Addr().WithZone("").Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p, true
	}
	return netip.PrefixFrom(a, 32), true
}

// recent drops failures older than the window and returns what is left.
func (l *authLimiter) recent(src netip.Prefix, now time.Time) []time.Time {
	f := l.fails[src]
	i := 0
	for i < len(f) && now.Sub(f[i]) >= authWindow {
		i++
	}
	if f = f[i:]; len(f) == 0 {
		delete(l.fails, src)
		return nil
	}
	l.fails[src] = f
	return f
}

// refuse answers 429 and reports true when r's source may not try now.
func (l *authLimiter) refuse(w http.ResponseWriter, r *http.Request) bool {
	src, ok := source(r)
	if !ok {
		return false
	}
	l.mu.Lock()
	now := l.now()
	f := l.recent(src, now)
	l.mu.Unlock()
	if len(f) < maxAuthFailures {
		return false
	}
	wait := f[len(f)-maxAuthFailures].Add(authWindow).Sub(now)
	secs := max(1, int((wait+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeErr(w, &adminRefusal{http.StatusTooManyRequests, "too_many_failed_attempts",
		strconv.Itoa(maxAuthFailures) + " wrong admin tokens came from " + src.Addr().String() + " within a minute: it may try again in " + strconv.Itoa(secs) +
			" s (Retry-After); other addresses are unaffected. Check the token the client sends (admin.token, TOLLWAY_ADMIN_TOKEN)"})
	return true
}

// fail records a wrong token from r's source (via: bearer token or console sign-in) and logs it.
func (l *authLimiter) fail(r *http.Request, via string) {
	src, ok := source(r)
	l.mu.Lock()
	n := 0
	if ok {
		now := l.now()
		if _, known := l.fails[src]; !known && len(l.fails) >= maxAuthSources {
			l.forgetOldest()
		}
		l.fails[src] = append(l.recent(src, now), now)
		n = len(l.fails[src])
	}
	l.mu.Unlock()
	addr := r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	l.log.Warn("admin authentication failed: wrong admin token", "source", addr, "via", via, "path", r.URL.Path, "failures_last_minute", n)
	if n == maxAuthFailures {
		l.log.Warn("admin authentication: this source gets 429 until its failures are a minute old", "source", addr, "failures", n)
	}
}

// forgetOldest drops the source whose latest failure is the oldest.
func (l *authLimiter) forgetOldest() {
	var oldest netip.Prefix
	var at time.Time
	for src, f := range l.fails {
		if last := f[len(f)-1]; at.IsZero() || last.Before(at) {
			oldest, at = src, last
		}
	}
	delete(l.fails, oldest)
}

// succeed clears r's source: an operator who mistyped starts afresh once signed in.
func (l *authLimiter) succeed(r *http.Request) {
	if src, ok := source(r); ok {
		l.mu.Lock()
		delete(l.fails, src)
		l.mu.Unlock()
	}
}
