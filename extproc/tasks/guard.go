package tasks

// The callback guard: where a client's callback_url may make the gateway connect. Checked at
// creation (the URL, its host resolved) and again at every connection a delivery makes (DNS
// may answer differently the second time). Two rules:
//
//   - never the gateway itself: an address of this machine (loopback, unspecified, any
//     interface's) on a port one of the gateway's listeners holds, or that listener's own
//     address, whatever callbacks.allow_private says;
//   - only public addresses: every IANA special-purpose range (ranges.go), and the IPv4
//     address inside every IPv6 form that carries one, unless allow_private names it; cloud
//     metadata addresses only when allow_private names the address itself.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Guard decides where callbacks may connect.
type Guard struct {
	Allow    *AllowList // callbacks.allow_private as configured now
	Own      *Listeners // the gateway's own listeners
	Resolver Resolver   // nil: net.DefaultResolver
}

// Resolver looks up a host's addresses (net.DefaultResolver; tests stand in).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL refuses a callback URL that is not http(s), carries credentials, or whose host
// (every address it resolves to) the guard refuses; the error names the host, why, and the fix.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	if len(raw) > 2048 {
		return fmt.Errorf("callback_url is over 2048 bytes")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return fmt.Errorf("callback_url %q must be an http or https URL with a host (and no credentials)", clip(raw))
	}
	port, err := urlPort(u)
	if err != nil {
		return err
	}
	host := u.Hostname()
	addrs, spelled, err := g.hostAddrs(ctx, host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if why := g.refusal(netip.AddrPortFrom(a, port)); why != "" {
			return fmt.Errorf("callback_url host %q is %s", clip(host), why)
		}
	}
	if spelled.IsValid() {
		return fmt.Errorf("callback_url host %q is the IPv4 address %s written in a legacy form that resolvers read differently: write it as %s", clip(host), spelled, spelled)
	}
	return nil
}

// urlPort is the URL's port, or its scheme's.
func urlPort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("callback_url port %q: want 1 to 65535", clip(p))
	}
	return uint16(n), nil
}

// hostAddrs are the addresses host names. spelled is set when host is an IPv4 address in a
// legacy numeric form (checked like any address, then refused for its spelling). Names under
// localhost are loopback (RFC 6761) whatever DNS says.
func (g *Guard) hostAddrs(ctx context.Context, host string) (addrs []netip.Addr, spelled netip.Addr, err error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, netip.Addr{}, nil
	}
	if a, numeric, ok := numericHost(host); numeric {
		if !ok {
			return nil, netip.Addr{}, fmt.Errorf("callback_url host %q is neither a host name nor an IP address", clip(host))
		}
		return []netip.Addr{a}, a, nil
	}
	if name := strings.ToLower(strings.TrimSuffix(host, ".")); name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}, netip.Addr{}, nil
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, netip.Addr{}, fmt.Errorf("callback_url host %q does not resolve: %w", clip(host), err)
	}
	if len(addrs) == 0 {
		return nil, netip.Addr{}, fmt.Errorf("callback_url host %q has no address", clip(host))
	}
	return addrs, netip.Addr{}, nil
}

// refusal says why a callback may not connect to ap, or "" when it may.
func (g *Guard) refusal(ap netip.AddrPort) string {
	a := ap.Addr().WithZone("").Unmap()
	cands := append([]netip.Addr{a}, embeddedIPv4(a)...)
	for _, c := range cands {
		if name := g.Own.reaches(c, ap.Port()); name != "" {
			return fmt.Sprintf("%s on port %d, the gateway's own %s: callbacks never go to the gateway itself, whatever callbacks.allow_private says", c, ap.Port(), name)
		}
	}
	allow := g.Allow.Prefixes()
	for i, c := range cands {
		why := forbidden(c, allow)
		if why == "" {
			continue
		}
		if i > 0 {
			why = fmt.Sprintf("%s inside %s", why, a)
		}
		return why + ": callbacks go to public addresses only; an operator can allow it with callbacks.allow_private"
	}
	return ""
}

// forbidden says what kind of non-public address a is ("a loopback address (127.0.0.2)"), or
// "" when it is public or allow lists it.
func forbidden(a netip.Addr, allow []netip.Prefix) string {
	for _, m := range metadata {
		if a == m && !slices.ContainsFunc(allow, func(p netip.Prefix) bool { return p.IsSingleIP() && p.Addr() == m }) {
			return fmt.Sprintf("a cloud metadata address (%s), allowed only when callbacks.allow_private names it alone", a)
		}
	}
	for _, p := range allow {
		if p.Contains(a) {
			return ""
		}
	}
	if why := specialWhy(a); why != "" {
		return fmt.Sprintf("%s (%s)", why, a)
	}
	return ""
}

// AllowList is callbacks.allow_private as configured now: a reload replaces it, and the next
// check (a creation, a delivery's connection) reads the new list.
type AllowList struct {
	p atomic.Pointer[[]netip.Prefix]
}

// NewAllowList makes a list holding p.
func NewAllowList(p []netip.Prefix) *AllowList {
	a := &AllowList{}
	a.Set(p)
	return a
}

// Set replaces the list.
func (a *AllowList) Set(p []netip.Prefix) { a.p.Store(&p) }

// Prefixes is the list now; a nil list allows nothing private.
func (a *AllowList) Prefixes() []netip.Prefix {
	if a == nil {
		return nil
	}
	if p := a.p.Load(); p != nil {
		return *p
	}
	return nil
}

// Listeners are the gateway's own listening addresses, by name ("admin listener (listen.admin)").
type Listeners struct {
	mu  sync.RWMutex
	own []ownListener
	// Local lists this machine's addresses; nil reads the interfaces (net.InterfaceAddrs) at
	// most every few seconds, so an address gained since the start counts too.
	Local func() []netip.Addr
	local localCache
}

type ownListener struct {
	name string
	at   netip.AddrPort
}

// Set records the addresses of the listener called name, replacing what it had; port 0 (not
// listening) is left out.
func (l *Listeners) Set(name string, at ...netip.AddrPort) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.own = slices.DeleteFunc(l.own, func(o ownListener) bool { return o.name == name })
	for _, ap := range at {
		if ap.Port() != 0 {
			l.own = append(l.own, ownListener{name, netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port())})
		}
	}
}

// reaches names the listener a connection to a:port would reach, or "": the listener's own
// address, or any address of this machine on its port (a wildcard bind answers on every one,
// and loopback answers on all of 127/8).
func (l *Listeners) reaches(a netip.Addr, port uint16) string {
	if l == nil {
		return ""
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	local := l.isLocal(a)
	for _, o := range l.own {
		if o.at.Port() == port && (local || o.at.Addr() == a) {
			return o.name
		}
	}
	return ""
}

// isLocal: a reaches this machine.
func (l *Listeners) isLocal(a netip.Addr) bool {
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	local := l.Local
	if local == nil {
		local = l.local.get
	}
	for _, m := range local() {
		if m.WithZone("").Unmap() == a {
			return true
		}
	}
	return false
}

// localCache holds the interfaces' addresses for a few seconds.
type localCache struct {
	mu    sync.Mutex
	at    time.Time
	addrs []netip.Addr
}

func (c *localCache) get() []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < 5*time.Second {
		return c.addrs
	}
	var addrs []netip.Addr // a new slice: callers may still read the last one
	if ifs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range ifs {
			if n, ok := ia.(*net.IPNet); ok {
				if a, ok := netip.AddrFromSlice(n.IP); ok {
					addrs = append(addrs, a.Unmap())
				}
			}
		}
	}
	c.addrs, c.at = addrs, time.Now()
	return addrs
}

// NewCallbackClient is the client deliveries use: every connection's address is checked by g
// again (DNS rebinding), no proxy is used, redirects are not followed, and a delivery takes at
// most 10 s.
func NewCallbackClient(g *Guard) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("callback: address %q: %w", address, err)
		}
		if why := g.refusal(ap); why != "" {
			return fmt.Errorf("callback: refusing to connect to %s: it is %s", ap, why)
		}
		return nil
	}}
	return &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{DialContext: d.DialContext, Proxy: nil, MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
