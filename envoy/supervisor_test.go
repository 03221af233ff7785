package envoy

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeProc is a Process whose exit the test decides.
func fakeProc(pid int) *Process {
	p := &Process{cmd: exec.Command("true"), done: make(chan struct{})}
	p.cmd.Process = &os.Process{Pid: pid}
	return p
}

func exit(p *Process, why string) {
	p.err = errors.New(why)
	close(p.done)
}

func TestSupervisorRestartsAnExitedEnvoy(t *testing.T) {
	first := fakeProc(1)
	var next atomic.Pointer[Process]
	s := NewSupervisor(slog.New(slog.DiscardHandler), first, func(context.Context) (*Process, error) {
		p := fakeProc(2)
		next.Store(p)
		return p, nil
	})
	restarted := make(chan *Process, 1)
	s.OnRestart = func(p *Process) { restarted <- p }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	exit(first, "signal: killed")
	select {
	case p := <-restarted:
		if p != next.Load() || s.Current() != p {
			t.Fatal("the restarted Envoy is not the current one")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not restarted")
	}
	if n, why := s.Restarts(); n != 1 || why != "signal: killed" {
		t.Fatalf("restarts %d %q", n, why)
	}
	// Stopping: the next exit is expected, nothing restarts.
	s.Stop()
	exit(next.Load(), "stopped")
	time.Sleep(50 * time.Millisecond)
	if n, _ := s.Restarts(); n != 1 {
		t.Fatalf("restarted after Stop: %d", n)
	}
}

// An Envoy that keeps dying right after its start, or cannot start, is given up on after
// MaxFastFailures, with growing pauses, and Failed says why.
func TestSupervisorGivesUpOnFastFailures(t *testing.T) {
	for _, mode := range []string{"exits", "does not start"} {
		t.Run(mode, func(t *testing.T) {
			first := fakeProc(1)
			var starts atomic.Int32
			s := NewSupervisor(slog.New(slog.DiscardHandler), first, func(context.Context) (*Process, error) {
				starts.Add(1)
				if mode == "does not start" {
					return nil, errors.New("bind: address in use")
				}
				p := fakeProc(3)
				exit(p, "exit status 1")
				return p, nil
			})
			s.MaxBackoff = 20 * time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go s.Run(ctx)
			exit(first, "exit status 1")
			select {
			case <-s.Failed():
			case <-time.After(10 * time.Second):
				t.Fatal("never gave up")
			}
			if got := starts.Load(); got != int32(s.MaxFastFailures-1) {
				t.Errorf("%d starts before giving up, want %d", got, s.MaxFastFailures-1)
			}
			if !strings.Contains(s.Err().Error(), "5 times in a row") {
				t.Errorf("error %v", s.Err())
			}
		})
	}
}
