package gateway

// This file tells the callback guard (extproc/tasks, guard.go) which addresses are the
// gateway's own, so no tenant's callback_url reaches them: the listeners the configuration
// names, the internal listener of the child Envoy and the demo model server. The child Envoy's
// admin, xDS and ext_proc endpoints are unix sockets in the run directory, out of a callback's
// reach.

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/xds/ir"
)

// Names of the gateway's listeners, as refusals name them.
const (
	ownPublic   = "public listener (listen.public)"
	ownAdmin    = "admin listener (listen.admin)"
	ownXDS      = "xDS listener (listen.xds)"
	ownExtProc  = "ext_proc listener (listen.extproc)"
	ownInternal = "internal listener (the child Envoy's, for the gateway's own task requests)"
	ownDemo     = "demo model server"
)

// NewCallbackGuard is the guard for cfg: its allow-list and listeners, the internal listener
// when there is one.
func NewCallbackGuard(cfg *config.Config, allow []netip.Prefix, internal *ir.Listener) *tasks.Guard {
	g := &tasks.Guard{Allow: tasks.NewAllowList(allow), Own: &tasks.Listeners{}}
	for name, addr := range map[string]string{ownPublic: cfg.Listen.Public, ownAdmin: cfg.Listen.Admin, ownXDS: cfg.Listen.XDS, ownExtProc: cfg.Listen.ExtProc} {
		g.Own.Set(name, listenAddrs(addr)...)
	}
	if internal != nil {
		g.Own.Set(ownInternal, listenAddrs(net.JoinHostPort(internal.Address, strconv.Itoa(int(internal.Port))))...)
	}
	return g
}

// listenAddrs are the addresses a listen setting (host:port) binds: an empty host is every
// address (0.0.0.0), a host name what it resolves to now. None when it cannot be read.
func listenAddrs(addr string) []netip.AddrPort {
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(p, 10, 16)
	if err != nil || perr != nil {
		return nil
	}
	if host == "" {
		host = "0.0.0.0"
	}
	ips := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		ips = append(ips, a)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ips, _ = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	out := make([]netip.AddrPort, 0, len(ips))
	for _, a := range ips {
		out = append(out, netip.AddrPortFrom(a, uint16(port)))
	}
	return out
}
