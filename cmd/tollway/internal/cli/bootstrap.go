package cli

import (
	"context"
	"fmt"
	"net"
	"regexp"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/xds/ir"
)

const bootstrapHelp = `  tollway bootstrap --node NAME [--listen HOST:PORT] [--control HOST] [--envoy-admin HOST:PORT]
                                                      print the Envoy bootstrap (JSON) for an Envoy Tollway does not start
                                                      (tollway run --envoy external): envoy -c FILE
`

// nodeName: what a node id may be (it appears in logs, status and the admin API).
var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// cmdBootstrap is `tollway bootstrap`: the same bootstrap the child Envoy gets, for an Envoy
// started elsewhere. It reaches Tollway over TCP at listen.xds and listen.extproc (or at
// --control, the host name Envoys dial, e.g. a Kubernetes Service), identifies itself as NAME,
// and serves its public listener at --listen (default listen.public).
func cmdBootstrap(_ context.Context, c *cli, args []string) error {
	fs := c.flags("bootstrap")
	node := fs.String("node", "", "this Envoy's node id (letters, digits, . _ -)")
	listen := fs.String("listen", "", "this Envoy's public listener, host:port (default listen.public)")
	control := fs.String("control", "", "the host Envoy dials for xDS and ext_proc (default listen.xds's host)")
	admin := fs.String("envoy-admin", "127.0.0.1:0", "Envoy's own admin listener (port 0: any free port)")
	pos, err := c.parse(fs, args, map[string][]string{"": {"node", "listen", "control", "envoy-admin"}})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: bootstrap takes only flags:\n%s", ErrUsage, bootstrapHelp)
	}
	if !nodeName.MatchString(*node) {
		return fmt.Errorf("%w: --node %q: give this Envoy a name of letters, digits, '.', '_' or '-' (at most 128), e.g. --node edge-1", ErrUsage, *node)
	}
	if _, err := ir.ParseListen(*listen); *listen != "" && err != nil {
		return fmt.Errorf("%w: --listen %q: want host:port, e.g. 0.0.0.0:8080", ErrUsage, *listen)
	}
	if _, port, err := net.SplitHostPort(*admin); err != nil || port == "" {
		return fmt.Errorf("%w: --envoy-admin %q: want host:port, e.g. 127.0.0.1:9901 (keep it on loopback)", ErrUsage, *admin)
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	dial := func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		if *control != "" {
			host = *control
		} else if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = "127.0.0.1" // Tollway listens everywhere: a local Envoy dials loopback
		}
		return net.JoinHostPort(host, port)
	}
	b, err := envoy.Bootstrap(envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "tcp", Address: dial(cfg.Listen.XDS)},
		ExtProc: envoy.Endpoint{Network: "tcp", Address: dial(cfg.Listen.ExtProc)},
		Admin:   envoy.Endpoint{Network: "tcp", Address: *admin},
		Limits:  cfg.IRLimits(),
		Node:    *node,
		Listen:  *listen,
	})
	if err != nil {
		return err
	}
	out, err := envoy.MarshalBootstrap(b)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, string(out))
	return err
}
