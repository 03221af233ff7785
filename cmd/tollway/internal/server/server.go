// Package server is `tollway run`: one process that owns the store, serves xDS, ext_proc and the
// admin API, and supervises Envoy until ctx ends (graceful drain) or Envoy dies (error). Run
// starts the process's parts as a list of runners (runners.go) and stops them in reverse: the
// store, the run directory and the listeners first, then the components, the servers and the
// background loops, the first configuration, the config watch and Envoy last; Envoy stops first,
// the xDS server after ext_proc and the loops, the store last.
package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/gateway"
	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/spool"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// process is one `tollway run`: its configuration, what it holds and its parts, filled in as its
// runners start.
type process struct {
	// sharedRates: the rate limits are shares of the whole among replicas (ratelimit.go).
	sharedRates    bool
	cfg            *config.Config
	log            *slog.Logger
	stdout, stderr io.Writer
	adminToken     string
	// external: Envoys started elsewhere (tollway bootstrap) connect over TCP; none is ours.
	external bool
	envoyBin string

	st          store.Store
	changes     <-chan store.Change // the store's, from its opening on (changes.go)
	unsubscribe func()              // ends changes
	replica     *replica            // this process in the store's registry of replicas
	stopPruning func()
	runDir      string
	releaseDir  func()
	listeners   listeners
	ledger      *billing.Ledger // nil when billing is off
	// ledgerAccounts are the accounts the ledger holds, for changes.go to add new ones.
	ledgerAccounts map[string]bool
	settle         store.Recorder // nil when billing is off
	spool          *spool.Spool   // the settle Recorder with driver postgres; nil otherwise
	bill           *extproc.Billing
	ctrl           *xds.Server
	ext            *extproc.Server
	tracer         *spans.Tracer // ext_proc's spans (nil: tracing off)
	gw             *gateway.Gateway
	guard          *tasks.Guard
	// settlements resolves x402 settlements whose outcome was unknown; nil when billing is off.
	settlements *paid.Settlements
	taskSvc     *tasks.Service
	internal    *ir.Listener // the child Envoy's listener for the gateway's own task requests
	procs       *procTuner   // nil: GOMAXPROCS is left alone
	xdsGRPC     *grpc.Server
	extGRPC     *grpc.Server
	adminSrv    *http.Server
	loops       *loops
	reload      func() error // reads the configuration file again and applies it
	envoy       *envoyRunner // nil with external Envoys
}

// Run runs the gateway for cfg until ctx ends (a drain: open requests finish; a second
// cancellation, WithForce's, cuts it short) or Envoy cannot be kept running (an error).
func Run(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) error {
	p, err := newProcess(cfg, stdout, stderr)
	if err != nil {
		return err
	}
	var rs runners
	defer rs.stop()
	if err := rs.start(ctx, p.runners()...); err != nil {
		return err
	}
	return p.wait(ctx)
}

// newProcess checks what needs no resources: the admin token resolves and, for a child Envoy,
// its binary is found.
func newProcess(cfg *config.Config, stdout, stderr io.Writer) (*process, error) {
	// Tollway writes access log lines of its own (a fast-lane stream's) beside Envoy's.
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	p := &process{cfg: cfg, log: newLogger(stderr, cfg.Log.Level), stdout: stdout, stderr: stderr,
		external: cfg.Envoy.Mode == config.EnvoyExternal, loops: newLoops()}
	var err error
	if p.adminToken, err = cfg.AdminToken(); err != nil {
		return nil, err
	}
	if !p.external {
		if p.envoyBin, err = envoy.FindBinary(cfg.Envoy.Bin); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// runners are the parts in the order they start.
func (p *process) runners() []runner {
	xdsServer, extServer, adminServer := p.servers()
	rs := []runner{
		{name: "store", start: p.openStore, stop: p.closeStore},
		{name: "run directory", start: p.makeRunDir, stop: p.removeRunDir},
		{name: "listeners", start: p.listen, stop: p.listeners.close},
		{name: "billing", start: p.startBilling, stop: p.stopBilling},
		p.tracing(),
		{name: "gateway", start: p.buildGateway, stop: func() { p.gw.Close() }},
		xdsServer,
		p.loops.barrier(),
		extServer,
	}
	if p.procs = newProcTuner(p.log.With("component", "procs")); p.procs != nil {
		rs = append(rs, p.loops.loop("procs", p.procs.run))
	}
	// The first snapshot is in the cache before Envoy asks for it, and the admin API only
	// accepts changes once there is a configuration to change.
	rs = append(rs, runner{name: "configuration", start: func(ctx context.Context) error { return p.gw.ApplyConfig(ctx, p.cfg) }},
		adminServer)
	rs = append(rs, p.backgroundLoops()...)
	if p.cfg.Path() != "" {
		rs = append(rs, p.configWatch())
	}
	if p.external {
		return append(rs, runner{name: "ready", start: p.readyExternal})
	}
	p.envoy = &envoyRunner{p: p}
	return append(rs, runner{name: "envoy", start: p.envoy.start, stop: p.envoy.stop},
		runner{name: "ready", start: p.envoy.ready},
		p.loops.loop("provider health", p.envoy.pollHealth))
}

// backgroundLoops: running tasks advance (with the child Envoy only: task requests go through
// its internal listener), their callbacks go out, x402 settlements resolve (billing on: paid
// endpoints need it) and when keys were used is saved, without anybody asking.
func (p *process) backgroundLoops() []runner {
	var rs []runner
	if !p.external {
		rs = append(rs, p.loops.loop("task poller", func(ctx context.Context) { p.taskSvc.Poll(ctx, time.Second, 8) }))
	}
	if p.cfg.Billing.Enabled {
		rs = append(rs, p.loops.loop("x402 settlements", func(ctx context.Context) { p.settlements.Run(ctx) }),
			p.loops.loop("budget slices", p.runSlices))
	}
	rs = append(rs, p.loops.loop("replica heartbeat", func(ctx context.Context) { p.replica.run(ctx) }),
		p.loops.loop("changes", p.followChanges))
	rs = append(rs, p.loops.loop("rate limit shares", p.runRateShares))
	rs = append(rs, p.loops.loop("keys used", func(ctx context.Context) {
		saveKeysUsed(ctx, p.log.With("component", "keys"), p.st, p.ext, keysUsedEvery)
	}))
	return append(rs, p.loops.loop("callbacks", func(ctx context.Context) {
		d := &tasks.Deliverer{Store: p.st, Client: tasks.NewCallbackClient(p.guard), Log: p.log.With("component", "callbacks"), Now: time.Now,
			Owner: p.replica.me.Name}
		d.Run(ctx, time.Second)
	}))
}

// readyExternal says the gateway serves external Envoys: they connect when they will; each
// keeps its last configuration while Tollway is away, and refuses traffic cleanly while
// ext_proc is unreachable (fail closed).
func (p *process) readyExternal(context.Context) error {
	l := p.cfg.Listen
	fmt.Fprintf(p.stdout, "tollway ready envoy=external xds=%s extproc=%s admin=http://%s\n", l.XDS, l.ExtProc, l.Admin)
	p.log.Info("tollway ready for external envoys", "xds", l.XDS, "extproc", l.ExtProc, "admin", l.Admin)
	return nil
}

// wait serves until ctx ends (external Envoys: nothing to drain; the child Envoy: drained) or
// the child Envoy cannot be kept running.
func (p *process) wait(ctx context.Context) error {
	if p.external {
		<-ctx.Done()
		p.log.Info("stopped", "cause", context.Cause(ctx))
		return nil
	}
	return p.envoy.wait(ctx)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// freeLoopback picks a free port on 127.0.0.1 for Envoy's internal listener.
func freeLoopback() (*ir.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("internal listener port: %w", err)
	}
	defer ln.Close()
	return &ir.Listener{Address: "127.0.0.1", Port: uint32(ln.Addr().(*net.TCPAddr).Port)}, nil
}

// lockedWriter writes one line (one Write) at a time: Envoy's access log lines, Tollway's own
// and its log share stdout and stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// setAccessLog gives ext_proc the access log's destination (log.access) for the lines it
// writes itself: a fast-lane stream's, whose bill is known only after Envoy's line is due.
func (p *process) setAccessLog() error {
	switch a := p.cfg.AccessLog(); {
	case a.Off:
	case a.Path == "":
		p.ext.SetAccessLog(p.stdout)
	case a.Path == "/dev/stderr":
		p.ext.SetAccessLog(p.stderr)
	default:
		f, err := os.OpenFile(a.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("log.access: %w", err)
		}
		p.ext.SetAccessLog(&lockedWriter{w: f}) // O_APPEND: each line lands whole after Envoy's
	}
	return nil
}
