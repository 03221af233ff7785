package server

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestProcTunerFollowsTheRate: one P only after quietFor under quietRate, back to the default at
// the first tick over busyRate, and a rate between the two changes nothing (no flapping).
func TestProcTunerFollowsTheRate(t *testing.T) {
	var calls []string
	p := &procTuner{log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		set:   func(n int) { calls = append(calls, "set1") },
		reset: func() { calls = append(calls, "default") }}
	ticks := int(quietFor / procsTick)
	for range ticks - 1 {
		p.observe(quietRate - 1)
	}
	if len(calls) != 0 {
		t.Fatalf("changed before %s of quiet: %v", quietFor, calls)
	}
	p.observe(quietRate - 1)
	p.observe(0)
	if !slices.Equal(calls, []string{"set1"}) {
		t.Fatalf("after %s of quiet: %v, want one move to 1 P", quietFor, calls)
	}
	p.observe((quietRate + busyRate) / 2) // between: stays quiet
	if len(calls) != 1 {
		t.Fatalf("a rate between the thresholds moved it: %v", calls)
	}
	p.observe(busyRate + 1)
	p.observe(busyRate + 1)
	if !slices.Equal(calls, []string{"set1", "default"}) {
		t.Fatalf("busy: %v, want one move back to the default", calls)
	}
	// A quiet spell broken by a middling tick starts counting again.
	for range ticks - 1 {
		p.observe(0)
	}
	p.observe((quietRate + busyRate) / 2)
	for range ticks - 1 {
		p.observe(0)
	}
	if len(calls) != 2 {
		t.Fatalf("an interrupted quiet spell moved it: %v", calls)
	}
}

// TestProcTunerOffWhenPinned: an explicit GOMAXPROCS is the operator's choice.
func TestProcTunerOffWhenPinned(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	if newProcTuner(slog.Default()) != nil {
		t.Fatal("the tuner runs although GOMAXPROCS is set")
	}
}

type nopStream struct{ grpc.ServerStream }

func (nopStream) RecvMsg(any) error { return nil }

// TestProcTunerSleepsWhenIdle: with no traffic at all the tuner stops ticking (an idle gateway
// is not woken four times a second), and the first messages of a burst wake it, so the burst
// gets its cores back.
func TestProcTunerSleepsWhenIdle(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	record := func(c string) { mu.Lock(); calls = append(calls, c); mu.Unlock() }
	p := &procTuner{log: slog.New(slog.NewTextHandler(io.Discard, nil)), wake: make(chan struct{}, 1),
		set: func(int) { record("set1") }, reset: func() { record("default") }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.run(ctx); close(done) }()
	deadline := time.Now().Add(quietFor + 2*time.Second)
	for !p.asleep.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.asleep.Load() {
		t.Fatal("an idle tuner did not stop ticking")
	}
	s := &countedStream{ServerStream: nopStream{}, p: p}
	deadline = time.Now().Add(2 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(calls)
		mu.Unlock()
		if slices.Equal(got, []string{"set1", "default"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a burst after idle: %v, want one P then the default back", got)
		}
		for range busyRate / 20 { // more than busyRate a second in any quarter second
			s.RecvMsg(nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}
