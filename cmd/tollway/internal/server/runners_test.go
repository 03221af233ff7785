package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// TestRunnersStartInOrderAndStopInReverse: parts start in the order listed; a part that fails
// to start stops none after it and leaves those before it to stop, last started first.
func TestRunnersStartInOrderAndStopInReverse(t *testing.T) {
	var events []string
	part := func(name string, err error) runner {
		return runner{name: name,
			start: func(context.Context) error { events = append(events, "start "+name); return err },
			stop:  func() { events = append(events, "stop "+name) }}
	}
	var rs runners
	boom := errors.New("boom")
	err := rs.start(t.Context(), part("a", nil), runner{name: "no stop"}, part("b", nil), part("c", boom), part("d", nil))
	if !errors.Is(err, boom) || err.Error() != "boom" {
		t.Fatalf("start: %v, want c's error as it is", err)
	}
	rs.stop()
	rs.stop() // a second stop stops nothing again
	if want := []string{"start a", "start b", "start c", "stop b", "stop a"}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}

// TestLoopsStopAtTheBarrier: the background loops run until the barrier runner stops, which
// returns only once every loop has returned.
func TestLoopsStopAtTheBarrier(t *testing.T) {
	l := newLoops()
	var rs runners
	ended := make(chan string, 2)
	slow := func(name string) func(context.Context) {
		return func(ctx context.Context) {
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond) // a last save
			ended <- name
		}
	}
	if err := rs.start(t.Context(), l.barrier(), l.loop("one", slow("one")), l.loop("two", slow("two"))); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ended:
		t.Fatalf("loop %s ended before the barrier stopped", n)
	case <-time.After(50 * time.Millisecond):
	}
	rs.stop()
	if len(ended) != 2 {
		t.Fatalf("the barrier returned with %d of 2 loops ended", len(ended))
	}
}

// TestRunOrder: the parts of `tollway run` start in today's order and so stop with Envoy first
// (drained before anything it needs goes), the config watch, the admin API, ext_proc, then the
// background loops (after ext_proc: the last save of key uses has them all), the xDS server
// after them, ext_proc's tracer after the gateway (its last spans sent), and what the process
// holds last, the store the very last.
func TestRunOrder(t *testing.T) {
	configtest.ClearEnv(t)
	for _, tc := range []struct {
		mode        string
		start, stop []string
	}{
		{mode: "child",
			start: []string{"store", "run directory", "listeners", "billing", "tracing", "gateway", "xds", "background loops", "extproc", "configuration", "admin",
				"task poller", "x402 settlements", "budget slices", "replica heartbeat", "changes", "rate limit shares", "keys used", "callbacks", "config watch", "envoy", "ready", "provider health"},
			stop: []string{"envoy", "config watch", "admin", "extproc", "background loops", "xds", "gateway", "tracing", "billing", "listeners", "run directory", "store"}},
		{mode: "external",
			start: []string{"store", "run directory", "listeners", "billing", "tracing", "gateway", "xds", "background loops", "extproc", "configuration", "admin",
				"x402 settlements", "budget slices", "replica heartbeat", "changes", "rate limit shares", "keys used", "callbacks", "config watch", "ready"},
			stop: []string{"config watch", "admin", "extproc", "background loops", "xds", "gateway", "tracing", "billing", "listeners", "run directory", "store"}},
	} {
		cfg, err := config.Load(configtest.Write(t, "envoy: {mode: "+tc.mode+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		p := &process{cfg: cfg, log: slog.New(slog.DiscardHandler), external: tc.mode == "external", loops: newLoops()}
		var start, stop []string
		for _, r := range p.runners() {
			if r.name == "procs" {
				continue // only where GOMAXPROCS is free to move: right after extproc
			}
			start = append(start, r.name)
			if r.stop != nil {
				stop = append([]string{r.name}, stop...)
			}
		}
		if !slices.Equal(start, tc.start) || !slices.Equal(stop, tc.stop) {
			t.Errorf("%s: start %s\nwant  %s\nstop %s\nwant %s", tc.mode, strings.Join(start, ", "), strings.Join(tc.start, ", "),
				strings.Join(stop, ", "), strings.Join(tc.stop, ", "))
		}
	}
}
