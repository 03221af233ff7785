package app

// GOMAXPROCS follows ext_proc's load. A quiet gateway (a sidecar, a team's gateway at tens of
// requests a second) pays for every idle P: each ext_proc message that wakes a goroutine also
// wakes a second thread to spin for work that is not there, and the ext_proc hops move between
// threads. One P runs the whole conversation on one thread. Under load the other cores are
// worth it (p99 at 500-1,000 requests/s). An explicit GOMAXPROCS in the environment wins.

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

// procTuner counts ext_proc messages and sets GOMAXPROCS from their rate.
type procTuner struct {
	msgs  atomic.Int64
	log   *slog.Logger
	set   func(n int) // runtime.GOMAXPROCS, or a test's recorder
	reset func()      // runtime.SetDefaultGOMAXPROCS
	quiet bool
	calm  time.Duration // how long the rate has been under quietRate
}

// newProcTuner is nil (no tuning) when GOMAXPROCS is pinned or there is one CPU anyway.
func newProcTuner(log *slog.Logger) *procTuner {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) <= 1 {
		return nil
	}
	return &procTuner{log: log, set: func(n int) { runtime.GOMAXPROCS(n) }, reset: runtime.SetDefaultGOMAXPROCS}
}

// interceptor counts each message ext_proc receives: one atomic add, no allocation per message.
func (p *procTuner) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &countedStream{ServerStream: ss, n: &p.msgs})
	}
}

type countedStream struct {
	grpc.ServerStream
	n *atomic.Int64
}

func (s *countedStream) RecvMsg(m any) error {
	s.n.Add(1)
	return s.ServerStream.RecvMsg(m)
}

// run samples the rate every procsTick until ctx ends, then gives the default back.
func (p *procTuner) run(ctx context.Context) {
	t := time.NewTicker(procsTick)
	defer t.Stop()
	defer p.reset()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.observe(float64(p.msgs.Swap(0)) / procsTick.Seconds())
		}
	}
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
