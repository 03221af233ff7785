package server

// GOMAXPROCS follows ext_proc's load. A quiet gateway (a sidecar, a team's gateway at tens of
// requests a second) pays for every idle P: each ext_proc message that wakes a goroutine also
// wakes a second thread to spin for work that is not there, and the ext_proc hops move between
// threads. One P runs the whole conversation on one thread. Under load the other cores are
// worth it (p99 at 500-1,000 requests/s). An explicit GOMAXPROCS in the environment wins.
// The child Envoy's worker count comes from the same view of the CPUs (envoyWorkers).

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

const (
	procsTick = 250 * time.Millisecond
	// Messages a second on ext_proc's streams (a plain request is about 6, a streamed answer
	// one more per chunk). Below quietRate for quietFor, one P; above busyRate, all of them at
	// once. The gap between the two keeps a steady load from flapping.
	quietRate = 600
	busyRate  = 1200
	quietFor  = 2 * time.Second
)

// startProcs is GOMAXPROCS as the process started, before the tuner moved it: the CPUs Go may
// use (the affinity mask and the cgroup's CPU limit), or GOMAXPROCS from the environment.
var startProcs = runtime.GOMAXPROCS(0)

// envoyWorkers is the child Envoy's --concurrency. Envoy's own default is every hardware thread
// of the host whatever the container's CPU limit, so a pod limited to 2 CPUs on a 64-core node
// would run 64 workers, each with its own connections to every provider and to ext_proc, taking
// turns in 2 CPUs' worth of time.
func envoyWorkers(configured int) int {
	if configured > 0 {
		return configured
	}
	return startProcs
}

// procTuner counts ext_proc messages and sets GOMAXPROCS from their rate.
type procTuner struct {
	msgs atomic.Int64
	// asleep: quiet with no traffic at all, the ticker stopped so an idle gateway does not wake
	// four times a second; the next message wakes it.
	asleep atomic.Bool
	wake   chan struct{}
	log    *slog.Logger
	set    func(n int) // runtime.GOMAXPROCS, or a test's recorder
	reset  func()      // runtime.SetDefaultGOMAXPROCS
	quiet  bool
	calm   time.Duration // how long the rate has been under quietRate
}

// newProcTuner is nil (no tuning) when GOMAXPROCS is pinned or there is one CPU anyway.
func newProcTuner(log *slog.Logger) *procTuner {
	if os.Getenv("GOMAXPROCS") != "" || startProcs <= 1 {
		return nil
	}
	return &procTuner{log: log, wake: make(chan struct{}, 1), set: func(n int) { runtime.GOMAXPROCS(n) }, reset: runtime.SetDefaultGOMAXPROCS}
}

// interceptor counts each message ext_proc receives: an atomic add and load, no allocation.
func (p *procTuner) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &countedStream{ServerStream: ss, p: p})
	}
}

type countedStream struct {
	grpc.ServerStream
	p *procTuner
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.p.msgs.Add(1)
		// After the add: either sleep sees the count, or this sees asleep and wakes it.
		if s.p.asleep.Load() {
			select {
			case s.p.wake <- struct{}{}:
			default:
			}
		}
	}
	return err
}

// run samples the rate every procsTick until ctx ends, then gives the default back.
func (p *procTuner) run(ctx context.Context) {
	t := time.NewTicker(procsTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if p.quiet {
				p.reset()
			}
			return
		case <-t.C:
			n := p.msgs.Swap(0)
			p.observe(float64(n) / procsTick.Seconds())
			if n == 0 && p.quiet {
				p.sleep(ctx, t)
			}
		}
	}
}

// sleep stops the ticker until a message arrives (or ctx ends); a burst then gets its cores
// back within one procsTick.
func (p *procTuner) sleep(ctx context.Context, t *time.Ticker) {
	t.Stop()
	p.asleep.Store(true)
	if p.msgs.Load() == 0 {
		select {
		case <-p.wake:
		case <-ctx.Done():
		}
	}
	p.asleep.Store(false)
	t.Reset(procsTick)
}

// observe moves to one P after quietFor under quietRate, and back at the first tick over busyRate.
func (p *procTuner) observe(rate float64) {
	switch {
	case rate > busyRate:
		p.calm = 0
		if p.quiet {
			p.quiet = false
			p.reset()
			p.log.Debug("ext_proc busy: GOMAXPROCS back to its default", "messages_per_s", int(rate))
		}
	case rate < quietRate:
		p.calm += procsTick
		if !p.quiet && p.calm >= quietFor {
			p.quiet = true
			p.set(1)
			p.log.Debug("ext_proc quiet: GOMAXPROCS 1", "messages_per_s", int(rate))
		}
	default:
		p.calm = 0
	}
}
