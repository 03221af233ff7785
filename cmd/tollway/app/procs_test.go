package app

import (
	"io"
	"log/slog"
	"slices"
	"testing"
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
