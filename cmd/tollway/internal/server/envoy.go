package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/xds/ir"
)

// envoyRunner starts the child Envoy and supervises it: restarted when it exits unexpectedly
// (the requests it cut end their ext_proc streams, which settles or releases their holds),
// given up on after repeated fast failures.
type envoyRunner struct {
	p      *process
	launch envoy.LaunchConfig
	limits ir.Limits
	first  *envoy.Process // the Envoy started first
	sup    *envoy.Supervisor
	// stopSup ends the supervisor's context (a restart under way gives up); supDone is closed
	// when its Run returned.
	stopSup context.CancelFunc
	supDone chan struct{}
}

// start writes the bootstrap, starts Envoy and waits until it serves the first snapshot, then
// starts the supervisor.
func (e *envoyRunner) start(ctx context.Context) error {
	p := e.p
	if err := e.prepare(); err != nil {
		return err
	}
	proc, err := e.startEnvoy(ctx, true)
	if err != nil {
		return err
	}
	e.first = proc
	p.gw.SetEnvoy(proc)
	var restarting atomic.Int64 // when the dead Envoy's replacement was started
	e.sup = envoy.NewSupervisor(p.log, proc, func(ctx context.Context) (*envoy.Process, error) {
		restarting.Store(time.Now().UnixNano())
		return e.startEnvoy(ctx, false)
	})
	e.sup.OnRestart = func(proc *envoy.Process) {
		p.gw.SetEnvoy(proc)
		p.ext.EnvoyRestarted(time.Unix(0, restarting.Load())) // the answers the dead Envoy held are over
	}
	p.gw.SetSupervisor(e.sup)
	// The supervisor outlives ctx: a signal drains Envoy (wait), it does not stop supervising.
	var supCtx context.Context
	supCtx, e.stopSup = context.WithCancel(context.Background())
	e.supDone = make(chan struct{})
	go func() {
		defer close(e.supDone)
		e.sup.Run(supCtx)
	}()
	logFileLimit(p.log, proc, e.limits)
	return nil
}

// prepare writes the bootstrap into the run directory and sets how Envoy is launched.
func (e *envoyRunner) prepare() error {
	p := e.p
	e.limits = p.cfg.IRLimits()
	boot, err := envoy.Bootstrap(envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "unix", Address: p.sock("xds.sock")},
		ExtProc: envoy.Endpoint{Network: "unix", Address: p.sock("extproc.sock")},
		Admin:   envoy.Endpoint{Network: "unix", Address: p.sock("envoy-admin.sock")},
		Limits:  e.limits,
	})
	if err != nil {
		return err
	}
	bootJSON, err := envoy.MarshalBootstrap(boot)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.sock("bootstrap.json"), bootJSON, 0o600); err != nil {
		return fmt.Errorf("write bootstrap: %w", err)
	}
	if err := envoy.RaiseFileLimit(); err != nil {
		p.log.Warn("Envoy keeps the inherited file descriptor limit", "error", err)
	}
	e.launch = envoy.LaunchConfig{
		Binary:        p.envoyBin,
		BootstrapPath: p.sock("bootstrap.json"),
		AdminSocket:   p.sock("envoy-admin.sock"),
		LogLevel:      p.cfg.Envoy.LogLevel,
		DrainTime:     p.cfg.Envoy.DrainTimeout,
		Concurrency:   envoyWorkers(p.cfg.Envoy.Concurrency),
		FullLog:       strings.EqualFold(p.cfg.Log.Level, "debug"),
		AccessLog:     p.stdout, // the access log's lines (log.access: stdout); Envoy logs on stderr
	}
	return nil
}

// startEnvoy starts Envoy and waits until it serves the configuration the control plane holds
// now (at start, the first snapshot; after a crash, the current one).
func (e *envoyRunner) startEnvoy(ctx context.Context, first bool) (*envoy.Process, error) {
	p := e.p
	_ = os.Remove(e.launch.AdminSocket) // a killed Envoy leaves its socket behind
	proc, err := envoy.Start(p.log, e.launch, p.stderr)
	if err != nil {
		return nil, err
	}
	err = proc.WaitReady(ctx, 30*time.Second, func() error {
		if s := p.ctrl.Status(); s.LastRejection != "" && first {
			return fmt.Errorf("envoy rejected the configuration: %s", s.LastRejection)
		}
		return nil
	})
	if err == nil {
		// LIVE is not enough: every resource type of the snapshot must be accepted, and the
		// providers' first health checks done.
		err = p.ctrl.WaitAccepted(ctx, p.ctrl.Status().Version, 10*time.Second)
	}
	if err != nil {
		proc.Stop()
		return nil, err
	}
	if err := proc.WaitHealthChecked(ctx, 5*time.Second); err != nil {
		p.log.Warn("serving before every provider was health-checked", "error", err)
	}
	return proc, nil
}

// stop stops Envoy and its supervisor; once it returns, no Envoy of this gateway runs (one a
// restart under way was starting included) and the supervisor's goroutine has ended.
func (e *envoyRunner) stop() {
	e.sup.Stop()
	e.sup.Current().Stop()
	e.stopSup()
	<-e.supDone
	e.sup.Current().Stop() // one the supervisor started while it was being stopped
}

// ready says the gateway serves.
func (e *envoyRunner) ready(context.Context) error {
	p, proc := e.p, e.first
	fmt.Fprintf(p.stdout, "tollway ready base_url=http://%s/v1 admin=http://%s envoy_pid=%d\n", p.cfg.Listen.Public, p.cfg.Listen.Admin, proc.Pid())
	p.log.Info("tollway ready", "base_url", "http://"+p.cfg.Listen.Public+"/v1", "admin", p.cfg.Listen.Admin, "envoy", p.envoyBin, "envoy_workers", e.launch.Concurrency)
	return nil
}

// wait serves until ctx ends, then drains Envoy: open requests may finish, up to
// envoy.drain_timeout, unless the force context (WithForce) ends first; or until Envoy cannot be
// kept running.
func (e *envoyRunner) wait(ctx context.Context) error {
	p := e.p
	select {
	case <-ctx.Done():
		p.log.Info("draining: open requests may finish, new connections are refused; a second signal stops at once",
			"cause", context.Cause(ctx), "timeout", p.cfg.Envoy.DrainTimeout)
		force := forceOf(ctx)
		e.sup.Stop()
		open := e.sup.Current().Drain(force, "http."+ir.ListenerName+".downstream_rq_active", p.cfg.Envoy.DrainTimeout)
		if force.Err() != nil {
			p.log.Warn("stopping at once: a second signal arrived during the drain", "cause", context.Cause(force), "open_requests_cut", open)
		} else if open > 0 {
			p.log.Warn("drain timeout reached; open requests were cut", "open_requests_cut", open, "timeout", p.cfg.Envoy.DrainTimeout)
		}
		p.log.Info("stopped")
		return nil
	case <-e.sup.Failed():
		return fmt.Errorf("envoy exited unexpectedly and could not be kept running: %w", e.sup.Err())
	}
}

// pollHealth keeps the view of provider health current: ext_proc's (for the catalog's
// is_ready) and the admin API's (the console's provider list).
func (e *envoyRunner) pollHealth(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if h, err := e.sup.Current().ClusterHealth(ctx); err == nil {
			byProvider := make(map[string]bool, len(h))
			for name, ok := range h {
				if p, found := strings.CutPrefix(name, ir.ClusterPrefix); found {
					byProvider[p] = ok
				}
			}
			e.p.gw.SetHealth(byProvider)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
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
