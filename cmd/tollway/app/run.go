package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// maxGRPCMessage fits a 32 MiB body plus its rewrite in one ext_proc message.
const maxGRPCMessage = 2 * ir.BufferLimitBytes

// ext_proc's HTTP/2 flow-control windows, per stream and per connection (Envoy's workers each
// hold one connection): wide enough that a message of a few MiB needs no window update.
const (
	extProcStreamWindow = 16 << 20
	extProcConnWindow   = 64 << 20
)

// runGateway is `tollway run`: one process that owns the store, serves xDS, ext_proc and the
// admin API, and supervises Envoy until ctx ends (graceful drain) or Envoy dies (error).
func runGateway(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	log := newLogger(stderr, cfg.Log.Level)
	adminToken, err := cfg.adminToken()
	if err != nil {
		return err
	}
	// external: Envoys started elsewhere (tollway bootstrap) connect over TCP; none is ours.
	external := cfg.Envoy.Mode == envoyExternal
	var envoyBin string
	if !external {
		if envoyBin, err = envoy.FindBinary(cfg.Envoy.Bin); err != nil {
			return err
		}
	}
	st, err := bbolt.Open(cfg.Store.Path)
	if err != nil {
		return err
	}
	defer st.Close()
	// Known within a second: a store that cannot make records durable refuses billable work.
	st.Watch(bbolt.HealthOptions{Reserve: bbolt.DefaultReserve, MinFree: bbolt.DefaultMinFree, Changed: storeChanged(log.With("component", "store"))})
	settleCut(log.With("component", "ledger"), st)
	stopPruning := st.StartPruning(store.PruneOptions{
		Retention:     time.Duration(cfg.Store.UsageRetentionDays) * 24 * time.Hour,
		TaskRetention: time.Duration(cfg.Store.TaskRetentionDays) * 24 * time.Hour,
		Log:           log.With("component", "store"),
	})
	defer stopPruning()

	// Sockets and the bootstrap live in a private directory; unix sockets need no ports, so
	// nothing collides with other gateways or tests on the machine.
	runDir, releaseRunDir, err := makeRunDir(log)
	if err != nil {
		return err
	}
	defer releaseRunDir()
	sock := func(n string) string { return filepath.Join(runDir, n) }

	adminLn, err := net.Listen("tcp", cfg.Listen.Admin)
	if err != nil {
		return fmt.Errorf("listen.admin %s: %w (is another tollway running? change listen.admin)", cfg.Listen.Admin, err)
	}
	if !external {
		if err := portFree(cfg.Listen.Public); err != nil {
			adminLn.Close()
			return err
		}
	}
	xdsNet, xdsAddr, extNet, extAddr := "unix", sock("xds.sock"), "unix", sock("extproc.sock")
	if external {
		xdsNet, xdsAddr, extNet, extAddr = "tcp", cfg.Listen.XDS, "tcp", cfg.Listen.ExtProc
	}
	xdsLn, err := net.Listen(xdsNet, xdsAddr)
	if err != nil {
		adminLn.Close()
		return fmt.Errorf("listen.xds %s: %w", xdsAddr, err)
	}
	extLn, err := net.Listen(extNet, extAddr)
	if err != nil {
		adminLn.Close()
		xdsLn.Close()
		return fmt.Errorf("listen.extproc %s: %w", extAddr, err)
	}

	ctrl := xds.New(log.With("component", "xds"))
	var bill *extproc.Billing
	var ledger *billing.Ledger
	var settle store.Recorder
	if cfg.Billing.Enabled {
		if ledger, err = loadLedger(st, time.Now()); err != nil {
			return err
		}
		settle = newSettler(log.With("component", "ledger"), st)
		defer settle.Close() // after the servers stop: every settled request reaches the store
		bill = newBilling(ledger, settle)
	}
	ext := extproc.NewServer(log.With("component", "extproc"), extproc.Compile(&ir.Gateway{}, nil), bill)
	ext.SetStoreCheck(st.Unavailable)
	demoSrv := &demoServer{log: log.With("component", "demo")}
	defer demoSrv.close() // runs after Envoy stopped, so answers being drained can finish
	// The gateway's own task requests go through an internal listener of its own Envoy; with
	// external Envoys there is none (several may share a host), so media tasks are off.
	var internal *ir.Listener
	if !external {
		if internal, err = freeLoopback(); err != nil {
			return err
		}
	}
	allowed, err := cfg.callbackAllow()
	if err != nil {
		return err
	}
	guard := newCallbackGuard(cfg, allowed, internal)
	demoSrv.own = guard.Own
	gw := &gateway{log: log, store: st, xds: ctrl, ext: ext, ledger: ledger, settler: settle, demo: demoSrv, internal: internal, callbacks: guard}
	if bill != nil { // x402 needs billing
		gw.settlements = extproc.NewSettlements(st, log.With("component", "x402"))
		n, err := gw.settlements.Resume()
		if err != nil { // the rest still resume
			log.Error("pending x402 settlements that cannot be read stay in the store, unresolved", "error", err)
		}
		if n > 0 {
			log.Info("pending x402 settlements resumed", "settlements", n)
		}
	}
	taskSvc := &tasks.Service{Store: st, Envoy: &tasks.Envoy{},
		Log: log.With("component", "tasks"), Now: time.Now, Catalog: ext.TaskCatalog, RefreshEvery: 3 * time.Second,
		ImageLife: time.Duration(cfg.Store.ImageRetentionHours) * time.Hour, MaxAge: cfg.Tasks.MaxAge, UnknownGrace: cfg.Tasks.UnknownGrace}
	if cfg.Metrics.Enabled {
		gw.metrics = newMetricsEndpoint(observe(ctrl, ext, ledger, bill, taskSvc, gw.settlements, st, settle))
	}
	if internal != nil {
		taskSvc.Envoy.Addr = fmt.Sprintf("%s:%d", internal.Address, internal.Port)
		ext.SetTasks(&extproc.Tasks{Service: taskSvc, Callbacks: guard})
		if _, err := ext.RestoreTaskHolds(st); err != nil {
			return fmt.Errorf("running tasks: %w", err)
		}
		if n, err := taskSvc.Resume(); err != nil {
			return fmt.Errorf("running tasks: %w", err)
		} else if n > 0 {
			log.Info("running tasks resumed", "tasks", n)
		}
	} else {
		ext.SetTasksOff("media tasks need the gateway's own Envoy (envoy.mode: child) to send its task requests through; this gateway serves external Envoys (envoy.mode: external)")
	}

	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	xdsGRPC := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	ctrl.Register(serveCtx, xdsGRPC)
	// Fixed flow-control windows turn off grpc-go's BDP estimation, which pinged Envoy after
	// received data on every busy connection: 4-7% of the CPU per request (Envoy + Tollway) in
	// two same-run A/B benches, the builds' turns swapped (README, Performance). The windows only bound unread data.
	extOpts := []grpc.ServerOption{grpc.MaxRecvMsgSize(maxGRPCMessage), grpc.MaxSendMsgSize(maxGRPCMessage),
		grpc.InitialWindowSize(extProcStreamWindow), grpc.InitialConnWindowSize(extProcConnWindow)}
	procs := newProcTuner(log.With("component", "procs"))
	if procs != nil {
		extOpts = append(extOpts, grpc.StreamInterceptor(procs.interceptor()))
	}
	extGRPC := grpc.NewServer(extOpts...)
	extprocv3.RegisterExternalProcessorServer(extGRPC, ext)
	accesslogv3.RegisterAccessLogServiceServer(extGRPC, ext.RefusalLog()) // providers refusing the gateway's credential

	var reloadMu sync.Mutex
	reload := func() error {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		next, err := cfg.reread()
		if err != nil {
			return badRequest(err.Error())
		}
		if err := gw.applyConfig(context.Background(), next); err != nil {
			return err
		}
		// Credentials were read again: providers that refused them are tried at once.
		ext.RetryRefusedProviders()
		return nil
	}
	adminSrv := &http.Server{Handler: gw.adminHandler(cfg.Listen.Admin, adminToken, reload), ReadHeaderTimeout: 5 * time.Second}

	var wg sync.WaitGroup
	serve := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				log.Error("server stopped", "server", name, "error", err)
			}
		}()
	}
	serve("xds", func() error { return xdsGRPC.Serve(xdsLn) })
	serve("extproc", func() error { return extGRPC.Serve(extLn) })
	if procs != nil {
		serve("procs", func() error { procs.run(serveCtx); return nil })
	}
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = adminSrv.Shutdown(shutdownCtx)
		extGRPC.GracefulStop()
		stopServing()
		xdsGRPC.Stop()
		wg.Wait()
	}()

	// The first snapshot is in the cache before Envoy asks for it, and the admin API only
	// accepts changes once there is a configuration to change.
	if err := gw.applyConfig(ctx, cfg); err != nil {
		adminLn.Close()
		return err
	}
	serve("admin", func() error { return adminSrv.Serve(adminLn) })
	// Running tasks advance and their callbacks go out without anybody asking.
	if internal != nil {
		serve("task poller", func() error { taskSvc.Poll(serveCtx, time.Second, 8); return nil })
	}
	if gw.settlements != nil {
		serve("x402 settlements", func() error { gw.settlements.Run(serveCtx); return nil })
	}
	serve("keys used", func() error {
		saveKeysUsed(serveCtx, log.With("component", "keys"), st, ext, keysUsedEvery)
		return nil
	})
	deliverer := &tasks.Deliverer{Store: st, Client: tasks.NewCallbackClient(guard), Log: log.With("component", "callbacks"), Now: time.Now}
	serve("callbacks", func() error { deliverer.Run(serveCtx, time.Second); return nil })
	if cfg.path != "" {
		stopWatch, err := watchFile(cfg.path, log, func() {
			if err := reload(); err != nil {
				log.Error("config reload failed; keeping the running configuration", "file", cfg.path, "error", err)
			}
		})
		if err != nil {
			log.Warn("config file is not watched; use POST /admin/v1/reload", "error", err)
		} else {
			defer stopWatch()
		}
	}

	if external {
		// Envoys connect when they will; each keeps its last configuration while Tollway is
		// away, and refuses traffic cleanly while ext_proc is unreachable (fail closed).
		fmt.Fprintf(stdout, "tollway ready envoy=external xds=%s extproc=%s admin=http://%s\n", cfg.Listen.XDS, cfg.Listen.ExtProc, cfg.Listen.Admin)
		log.Info("tollway ready for external envoys", "xds", cfg.Listen.XDS, "extproc", cfg.Listen.ExtProc, "admin", cfg.Listen.Admin)
		<-ctx.Done()
		log.Info("stopped", "cause", context.Cause(ctx))
		return nil
	}

	limits := cfg.limits()
	boot, err := envoy.Bootstrap(envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "unix", Address: sock("xds.sock")},
		ExtProc: envoy.Endpoint{Network: "unix", Address: sock("extproc.sock")},
		Admin:   envoy.Endpoint{Network: "unix", Address: sock("envoy-admin.sock")},
		Limits:  limits,
	})
	if err != nil {
		return err
	}
	bootJSON, err := envoy.MarshalBootstrap(boot)
	if err != nil {
		return err
	}
	if err := os.WriteFile(sock("bootstrap.json"), bootJSON, 0o600); err != nil {
		return fmt.Errorf("write bootstrap: %w", err)
	}
	if err := envoy.RaiseFileLimit(); err != nil {
		log.Warn("Envoy keeps the inherited file descriptor limit", "error", err)
	}
	launch := envoy.LaunchConfig{
		Binary:        envoyBin,
		BootstrapPath: sock("bootstrap.json"),
		AdminSocket:   sock("envoy-admin.sock"),
		LogLevel:      cfg.Envoy.LogLevel,
		DrainTime:     cfg.Envoy.DrainTimeout,
		Concurrency:   envoyWorkers(cfg.Envoy.Concurrency),
		FullLog:       strings.EqualFold(cfg.Log.Level, "debug"),
		AccessLog:     stdout, // the access log's lines (log.access: stdout); Envoy logs on stderr
	}
	// startEnvoy starts Envoy and waits until it serves the configuration the control plane
	// holds now (at start, the first snapshot; after a crash, the current one).
	startEnvoy := func(ctx context.Context, first bool) (*envoy.Process, error) {
		_ = os.Remove(launch.AdminSocket) // a killed Envoy leaves its socket behind
		proc, err := envoy.Start(log, launch, stderr)
		if err != nil {
			return nil, err
		}
		err = proc.WaitReady(ctx, 30*time.Second, func() error {
			if s := ctrl.Status(); s.LastRejection != "" && first {
				return fmt.Errorf("envoy rejected the configuration: %s", s.LastRejection)
			}
			return nil
		})
		if err == nil {
			// LIVE is not enough: every resource type of the snapshot must be accepted, and the
			// providers' first health checks done.
			err = ctrl.WaitAccepted(ctx, ctrl.Status().Version, 10*time.Second)
		}
		if err != nil {
			proc.Stop()
			return nil, err
		}
		if err := proc.WaitHealthChecked(ctx, 5*time.Second); err != nil {
			log.Warn("serving before every provider was health-checked", "error", err)
		}
		return proc, nil
	}
	proc, err := startEnvoy(ctx, true)
	if err != nil {
		return err
	}
	gw.setEnvoy(proc)
	// The child Envoy is supervised: restarted when it exits unexpectedly (the requests it cut
	// end their ext_proc streams, which settles or releases their holds), given up on after
	// repeated fast failures.
	sup := envoy.NewSupervisor(log, proc, func(ctx context.Context) (*envoy.Process, error) { return startEnvoy(ctx, false) })
	sup.OnRestart = gw.setEnvoy
	gw.supervisor.Store(sup)
	go sup.Run(serveCtx)
	defer func() { sup.Stop(); sup.Current().Stop() }()
	logFileLimit(log, proc, limits)
	fmt.Fprintf(stdout, "tollway ready base_url=http://%s/v1 admin=http://%s envoy_pid=%d\n", cfg.Listen.Public, cfg.Listen.Admin, proc.Pid())
	log.Info("tollway ready", "base_url", "http://"+cfg.Listen.Public+"/v1", "admin", cfg.Listen.Admin, "envoy", envoyBin, "envoy_workers", launch.Concurrency)

	go pollHealth(serveCtx, sup.Current, func(h map[string]bool) { ext.SetHealth(h); gw.health.Store(&h) })

	select {
	case <-ctx.Done():
		log.Info("draining: open requests may finish, new connections are refused; a second signal stops at once",
			"cause", context.Cause(ctx), "timeout", cfg.Envoy.DrainTimeout)
		force := forceOf(ctx)
		sup.Stop()
		open := sup.Current().Drain(force, "http."+ir.ListenerName+".downstream_rq_active", cfg.Envoy.DrainTimeout)
		if force.Err() != nil {
			log.Warn("stopping at once: a second signal arrived during the drain", "cause", context.Cause(force), "open_requests_cut", open)
		} else if open > 0 {
			log.Warn("drain timeout reached; open requests were cut", "open_requests_cut", open, "timeout", cfg.Envoy.DrainTimeout)
		}
		log.Info("stopped")
		return nil
	case <-sup.Failed():
		return fmt.Errorf("envoy exited unexpectedly and could not be kept running: %w", sup.Err())
	}
}

// logFileLimit says what file descriptor limit Envoy runs with and about how many requests it can
// hold open with it. It warns only when that is under half of limits.max_concurrent_requests: a
// limit a little short of the maximum (a hard limit of 20,000 against the default 10,000
// requests) is common and worth a line, not an alarm.
func logFileLimit(log *slog.Logger, proc *envoy.Process, limits ir.Limits) {
	nofile, err := proc.FileLimit()
	if err != nil {
		log.Warn("cannot read Envoy's file descriptor limit", "error", err)
		return
	}
	need := envoy.FileDescriptors(limits)
	limit := uint64(limits.Requests())
	holds := limit
	if fixed := need - 2*limit; nofile < need { // two descriptors per open request, plus a fixed part
		holds = 0
		if nofile > fixed {
			holds = (nofile - fixed) / 2
		}
	}
	if holds < limit/2 {
		log.Warn("Envoy may run out of file descriptors well before limits.max_concurrent_requests; raise the hard RLIMIT_NOFILE (systemd LimitNOFILE=, ulimit -Hn) or lower the limit",
			"envoy_nofile", nofile, "needs", need, "holds_about", holds, "max_concurrent_requests", limits.Requests())
		return
	}
	log.Info("envoy file descriptor limit", "envoy_nofile", nofile, "holds_about", holds, "max_concurrent_requests", limits.Requests())
}

// pollHealth keeps the view of provider health current: ext_proc's (for the catalog's
// is_ready) and the admin API's (the console's provider list), through set.
func pollHealth(ctx context.Context, proc func() *envoy.Process, set func(map[string]bool)) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if h, err := proc().ClusterHealth(ctx); err == nil {
			byProvider := make(map[string]bool, len(h))
			for name, ok := range h {
				if p, found := strings.CutPrefix(name, ir.ClusterPrefix); found {
					byProvider[p] = ok
				}
			}
			set(byProvider)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen.public %s: %w (another process holds the port; change listen.public)", addr, err)
	}
	return ln.Close()
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
