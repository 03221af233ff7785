package envoy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Supervisor keeps a child Envoy running: when it exits unexpectedly it is started again, at
// once the first time (requests in between get connection errors, never wrong answers), then
// with growing pauses while it keeps failing fast. After MaxFastFailures exits in a row that each
// came within FastFailure of their start, it gives up: Failed is closed and Err says why, and
// the gateway exits non-zero rather than flap for ever.
type Supervisor struct {
	log   *slog.Logger
	start func(context.Context) (*Process, error)

	// FastFailure: an Envoy that exits sooner than this after starting failed fast.
	FastFailure time.Duration
	// MaxFastFailures in a row make the supervisor give up.
	MaxFastFailures int
	// MaxBackoff bounds the pause before a restart.
	MaxBackoff time.Duration
	// OnRestart is called with each restarted Envoy once it is ready.
	OnRestart func(*Process)

	mu       sync.Mutex
	cur      *Process
	started  time.Time
	restarts int
	lastExit string
	failed   chan struct{}
	err      error
	stopped  bool
}

// NewSupervisor supervises first, a ready Envoy; start starts another and waits until it is
// ready (or fails).
func NewSupervisor(log *slog.Logger, first *Process, start func(context.Context) (*Process, error)) *Supervisor {
	return &Supervisor{log: log, start: start, cur: first, started: time.Now(), failed: make(chan struct{}),
		FastFailure: 10 * time.Second, MaxFastFailures: 5, MaxBackoff: 5 * time.Second}
}

// Current is the Envoy running now (or the one that last exited, during a restart).
func (s *Supervisor) Current() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Restarts is how many times Envoy was restarted, and why it last exited.
func (s *Supervisor) Restarts() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts, s.lastExit
}

// Failed is closed when the supervisor gave up; Err then says why.
func (s *Supervisor) Failed() <-chan struct{} { return s.failed }

// Err is why the supervisor gave up; valid after Failed.
func (s *Supervisor) Err() error { return s.err }

// Stop ends supervision: an exit from now on is expected (the gateway is stopping it).
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// Run supervises until ctx ends, Stop is called, or it gives up.
func (s *Supervisor) Run(ctx context.Context) {
	fast := 0 // exits and failed starts in a row, each soon after the last start
	for {
		p := s.Current()
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
		}
		s.mu.Lock()
		stopped, lived := s.stopped, time.Since(s.started)
		s.lastExit = p.Err().Error()
		s.mu.Unlock()
		if stopped || ctx.Err() != nil {
			return
		}
		if lived < s.FastFailure {
			fast++
		} else {
			fast = 1
		}
		s.log.Error("ENVOY EXITED unexpectedly; restarting it", "error", p.Err(), "pid", p.Pid(), "lived", lived.Round(time.Millisecond))
		for {
			if fast >= s.MaxFastFailures {
				s.giveUp(fmt.Errorf("envoy failed %d times in a row within %s of starting; last exit: %w", fast, s.FastFailure, p.Err()))
				return
			}
			// The first restart is at once; then 250 ms, 500 ms ... up to MaxBackoff.
			if fast > 1 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(min(s.MaxBackoff, 250*time.Millisecond<<(fast-2))):
				}
			}
			np, err := s.start(ctx)
			if err == nil {
				s.mu.Lock()
				s.cur, s.started = np, time.Now()
				s.restarts++
				n := s.restarts
				s.mu.Unlock()
				s.log.Warn("envoy restarted", "pid", np.Pid(), "restarts", n)
				if s.OnRestart != nil {
					s.OnRestart(np)
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.log.Error("envoy did not start again", "error", err)
			fast++
		}
	}
}

func (s *Supervisor) giveUp(err error) {
	s.log.Error("giving up on envoy", "error", err)
	s.err = err
	close(s.failed)
}
