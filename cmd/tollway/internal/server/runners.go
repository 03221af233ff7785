package server

import (
	"context"
	"sync"
)

// runner is one part of `tollway run`. start returns once the part runs; stop returns once it
// has stopped and every goroutine it started has ended. Either may be nil.
type runner struct {
	name  string
	start func(ctx context.Context) error
	stop  func()
}

// runners starts parts in the order given and stops the started ones in reverse: what a part
// needs is started before it and stopped after it. A part that fails to start stops those
// started before it (Run defers stop).
type runners struct {
	started []runner
}

// start starts list in order; on the first failure it returns that error, unwrapped: the parts'
// own errors name the problem and its fix.
func (rs *runners) start(ctx context.Context, list ...runner) error {
	for _, r := range list {
		if r.start != nil {
			if err := r.start(ctx); err != nil {
				return err
			}
		}
		rs.started = append(rs.started, r)
	}
	return nil
}

// stop stops the started parts, the last started first.
func (rs *runners) stop() {
	for i := len(rs.started) - 1; i >= 0; i-- {
		if stop := rs.started[i].stop; stop != nil {
			stop()
		}
	}
	rs.started = nil
}

// loops are the gateway's background loops (the task poller, callbacks, settlements, when keys
// were used, GOMAXPROCS, provider health): each is started as a runner of its own, and all of
// them stop together when the barrier runner stops. The barrier is listed after the xDS server
// and before ext_proc, so the loops stop once ext_proc stopped serving (every key use is in for
// the last save) and before the xDS server does.
type loops struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newLoops() *loops {
	l := &loops{}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// loop is a runner that runs fn until the loops stop.
func (l *loops) loop(name string, fn func(ctx context.Context)) runner {
	return runner{name: name, start: func(context.Context) error {
		l.wg.Go(func() { fn(l.ctx) })
		return nil
	}}
}

// barrier is the runner that stops the loops and waits for them.
func (l *loops) barrier() runner {
	return runner{name: "background loops", stop: func() {
		l.cancel()
		l.wg.Wait()
	}}
}
