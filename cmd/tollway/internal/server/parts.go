package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/tollway/tollway/cmd/tollway/internal/admin"
	"github.com/tollway/tollway/cmd/tollway/internal/gateway"
	"github.com/tollway/tollway/cmd/tollway/internal/metrics"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// The gateway's components and its three servers: xDS, ext_proc and the admin API.

// maxGRPCMessage fits a 32 MiB body plus its rewrite in one ext_proc message.
const maxGRPCMessage = 2 * ir.BufferLimitBytes

// ext_proc's HTTP/2 flow-control windows, per stream and per connection (Envoy's workers each
// hold one connection): wide enough that a message of a few MiB needs no window update.
const (
	extProcStreamWindow = 16 << 20
	extProcConnWindow   = 64 << 20
)

// buildGateway makes the components (the control plane, ext_proc, the gateway that applies
// configuration to both, media tasks, metrics) and the servers that will serve them; it picks
// up what the last run left: pending x402 settlements, running tasks and their holds.
func (p *process) buildGateway(context.Context) error {
	log := p.log
	p.ctrl = xds.New(log.With("component", "xds"))
	p.ext = extproc.NewServer(log.With("component", "extproc"), extproc.Compile(&ir.Gateway{}, nil), p.bill)
	p.ext.SetStoreCheck(p.durable().Unavailable)
	p.ext.SetTracer(p.tracer)
	p.sharedRates = p.shareRates()
	if err := p.setAccessLog(); err != nil {
		return err
	}
	if p.spool != nil {
		// Billable chat is admitted on the spool's health; a credential's claim and a task
		// are written to the database itself (docs/operations.md#database-down).
		p.ext.SetSharedStoreCheck(p.st.Unavailable)
	}
	// The gateway's own task requests go through an internal listener of its own Envoy; with
	// external Envoys there is none (several may share a host), so media tasks are off.
	if !p.external {
		var err error
		if p.internal, err = freeLoopback(); err != nil {
			return err
		}
	}
	allowed, err := p.cfg.CallbackAllow()
	if err != nil {
		return err
	}
	p.guard = gateway.NewCallbackGuard(p.cfg, allowed, p.internal)
	if p.bill != nil { // x402 needs billing
		p.settlements = paid.NewSettlements(p.st, log.With("component", "x402"))
	}
	p.gw = gateway.New(gateway.Options{Log: log, Store: p.st, XDS: p.ctrl, Ext: p.ext, Internal: p.internal, Callbacks: p.guard, Settlements: p.settlements})
	p.resumeSettlements()
	p.taskSvc = &tasks.Service{Store: p.st, Envoy: &tasks.Envoy{},
		Log: log.With("component", "tasks"), Now: time.Now, Catalog: p.ext.TaskCatalog, RefreshEvery: 3 * time.Second,
		ImageLife: time.Duration(p.cfg.Store.ImageRetentionHours) * time.Hour, MaxAge: p.cfg.Tasks.MaxAge, UnknownGrace: p.cfg.Tasks.UnknownGrace,
		Owner: p.replica.me.Name, Lease: p.cfg.Replica.Lease} // a task is polled by one replica, taken over within replica.lease
	var m *metrics.Metrics
	if p.cfg.Metrics.Enabled {
		m = observe(p.ctrl, p.ext, p.ledger, p.bill, p.taskSvc, p.settlements, p.durable(), p.settle)
		observeShared(m, p.st, p.spool)
	}
	if err := p.resumeTasks(); err != nil {
		return err
	}
	p.reload = p.reloader()
	p.buildServers(m)
	return nil
}

// resumeSettlements picks up the x402 settlements whose outcome was unknown at the last stop.
func (p *process) resumeSettlements() {
	if p.settlements == nil {
		return
	}
	n, err := p.settlements.Resume()
	if err != nil { // the rest still resume
		p.log.Error("pending x402 settlements that cannot be read stay in the store, unresolved", "error", err)
	}
	if n > 0 {
		p.log.Info("pending x402 settlements resumed", "settlements", n)
	}
}

// resumeTasks gives ext_proc the media tasks and picks up the running ones, or turns media
// tasks off for external Envoys.
func (p *process) resumeTasks() error {
	if p.internal == nil {
		p.ext.SetTasksOff("media tasks need the gateway's own Envoy (envoy.mode: child) to send its task requests through; this gateway serves external Envoys (envoy.mode: external)")
		return nil
	}
	p.taskSvc.Envoy.Addr = fmt.Sprintf("%s:%d", p.internal.Address, p.internal.Port)
	p.ext.SetTasks(&tasks.Endpoints{Service: p.taskSvc, Callbacks: p.guard})
	n, err := p.taskSvc.Resume()
	if err != nil {
		return fmt.Errorf("running tasks: %w", err)
	}
	// Only the tasks this replica now polls are held again: it bills them when they end; the
	// others' replicas hold theirs.
	if _, err := p.ext.RestoreTaskHolds(polledTasks{p.st, p.taskSvc}); err != nil {
		return fmt.Errorf("running tasks: %w", err)
	}
	if n > 0 {
		p.log.Info("running tasks resumed", "tasks", n)
	}
	return nil
}

// buildServers makes the xDS, ext_proc and admin servers (m: the metrics; nil when off).
func (p *process) buildServers(m *metrics.Metrics) {
	p.xdsGRPC = grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	p.ctrl.Register(p.loops.ctx, p.xdsGRPC)
	// Fixed flow-control windows turn off grpc-go's BDP estimation, which pinged Envoy after
	// received data on every busy connection: 4-7% of the CPU per request (Envoy + Tollway) in two
	// same-run A/B benches, the builds' turns swapped (docs/performance.md). The windows only bound
	// unread data.
	extOpts := []grpc.ServerOption{grpc.MaxRecvMsgSize(maxGRPCMessage), grpc.MaxSendMsgSize(maxGRPCMessage),
		grpc.InitialWindowSize(extProcStreamWindow), grpc.InitialConnWindowSize(extProcConnWindow)}
	if p.procs != nil {
		extOpts = append(extOpts, grpc.StreamInterceptor(p.procs.interceptor()))
	}
	p.extGRPC = grpc.NewServer(extOpts...)
	extprocv3.RegisterExternalProcessorServer(p.extGRPC, p.ext)
	accesslogv3.RegisterAccessLogServiceServer(p.extGRPC, p.ext.RefusalLog()) // providers refusing the gateway's credential
	p.adminSrv = &http.Server{Handler: admin.Handler(admin.Options{Listen: p.cfg.Listen.Admin, Token: p.adminToken, Log: p.log,
		Store: p.st, Apply: p.gw, Runtime: p.gw, XDS: p.ctrl, Ext: p.ext, Ledger: p.ledger, Settler: p.settle, Metrics: m, Reload: p.reload, Replica: p.replica.me.Name}),
		ReadHeaderTimeout: 5 * time.Second}
}

// reloader reads the configuration file again and applies it, one reload at a time (POST
// /admin/v1/reload and the config watch).
func (p *process) reloader() func() error {
	var mu sync.Mutex
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		next, err := p.cfg.Reread()
		if err != nil {
			return admin.BadRequest(err.Error())
		}
		if err := p.gw.ApplyConfig(context.Background(), next); err != nil {
			return err
		}
		// Credentials were read again: providers that refused them are tried at once.
		p.ext.RetryRefusedProviders()
		return nil
	}
}

// server is the runner of a server: start runs serve in a goroutine, stop calls halt and returns
// once serve has returned. A server that stops for another reason than being stopped says so.
func (p *process) server(name string, serve func() error, halt func()) runner {
	done := make(chan struct{})
	return runner{name: name, start: func(context.Context) error {
		go func() {
			defer close(done)
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				p.log.Error("server stopped", "server", name, "error", err)
			}
		}()
		return nil
	}, stop: func() {
		halt()
		<-done
	}}
}

// tracing is the runner of ext_proc's tracer (tracing:; nil when off). It stops after ext_proc:
// the last spans (settlements from the answer log) go out before the process ends.
func (p *process) tracing() runner {
	return runner{name: "tracing", start: func(context.Context) error {
		var err error
		p.tracer, err = spans.Start(p.cfg.IRTracing())
		return err
	}, stop: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.tracer.Shutdown(ctx); err != nil {
			p.log.Warn("tracing: spans could not be sent to the collector", "error", err)
		}
	}}
}

// servers are the runners of the xDS server, ext_proc and the admin API. ext_proc's open streams
// may end when it stops (Envoy is gone by then, so they do at once); the admin API's requests
// under way may finish, for up to 5 s.
func (p *process) servers() (xdsServer, extServer, adminServer runner) {
	xdsServer = p.server("xds", func() error { return p.xdsGRPC.Serve(p.listeners.xds) }, func() { p.xdsGRPC.Stop() })
	extServer = p.server("extproc", func() error { return p.extGRPC.Serve(p.listeners.ext) }, func() { p.extGRPC.GracefulStop() })
	adminServer = p.server("admin", func() error { return p.adminSrv.Serve(p.listeners.admin) }, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.adminSrv.Shutdown(ctx)
	})
	return xdsServer, extServer, adminServer
}
