package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// Observability (-scenarios observe): what metrics and the access log cost a request. The same
// keyed chat load (billing on, the default) goes to two Tollways that differ only in
// `metrics.enabled` and `log.access`: both on (metrics served and measured, the access log
// written by Envoy to a file) and both off. The two take turns in short rounds, like the
// latency scenario, and the result is printed as ratios on/off of p50, p99 and the CPU a request
// costs (Tollway and its Envoy together). Tracing (-scenarios tracing, tracing.go) compares its
// sides the same way (compareSides).
const observeRounds = 4

// side is one Tollway of a comparison: its configuration beyond the bench's (extra, with %s
// for a file in its directory), and what was measured.
type side struct {
	name  string
	extra string
	t     *target
	procs []proc
	res   *result
	cpu   time.Duration
	each  []time.Duration // per process of procs
}

// cpuPer is the CPU a request cost the side's Tollway and Envoy together, in microseconds.
func (s *side) cpuPer() float64 {
	return float64(s.cpu.Microseconds()) / float64(max(len(s.res.lat), 1))
}

func runObserve(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	sides := []*side{
		{name: "metrics+access log on", extra: "metrics: {enabled: true}\nlog: {access: %s}\n"},
		{name: "both off", extra: "metrics: {enabled: false}\nlog: {access: off}\n"},
	}
	title := fmt.Sprintf("metrics + access log: on vs off, billing on, keyed chat at %d req/s for %s per side (%d alternating rounds)", o.rate, o.observeDuration, observeRounds)
	if err := compareSides(ctx, o, filepath.Join(dir, "observe"), "observe", title, sides, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "on/off: %s\n", against(sides[0], sides[1]))
	return nil
}

// against says a side's p50, p99 and CPU per request against base's, as ratios and differences.
func against(s, base *side) string {
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", a/b)
	}
	return fmt.Sprintf("p50 x%s (%s ms), p99 x%s (%s ms), CPU per request (Tollway + Envoy) x%s (%+.0f us)",
		ratio(float64(pct(s.res.lat, 0.50)), float64(pct(base.res.lat, 0.50))), plusMS(pct(s.res.lat, 0.50)-pct(base.res.lat, 0.50)),
		ratio(float64(pct(s.res.lat, 0.99)), float64(pct(base.res.lat, 0.99))), plusMS(pct(s.res.lat, 0.99)-pct(base.res.lat, 0.99)),
		ratio(s.cpuPer(), base.cpuPer()), s.cpuPer()-base.cpuPer())
}

// compareSides starts one billing-on Tollway per side against one fake provider, sends each the
// same keyed chat load at -rate in alternating rounds (-observe-duration per side in all) and
// prints a table of them under title.
func compareSides(ctx context.Context, o *options, dir, scenario, title string, sides []*side, stdout, stderr io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	for i, s := range sides {
		sdir := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return err
		}
		extra := s.extra
		if i == 0 && scenario == "observe" {
			extra = fmt.Sprintf(extra, filepath.Join(sdir, "access.log"))
		}
		g, err := harness.Start(ctx, harness.Options{
			Bin: o.tollwayBin, EnvoyBin: o.envoyBin, Dir: sdir, Drain: 2 * time.Second,
			Body: fmt.Sprintf(tollwayBody, fake.URL(), modelID, true) + extra,
			Env:  append([]string{"BENCH_PROVIDER_KEY=" + providerKey}, o.tollwayEnv...),
		})
		if err != nil {
			return err
		}
		defer g.Stop()
		tw := &tollway{Gateway: g, baseURL: g.BaseURL, billing: true}
		key, err := tw.newKey(ctx)
		if err != nil {
			return err
		}
		s.t = &target{name: s.name, baseURL: g.BaseURL, auth: key, client: newClient(o.timeout)}
		if err := probe(ctx, s.t, chatBody); err != nil {
			return err
		}
		s.procs = []proc{{"tollway's envoy", g.EnvoyPID}, {tollwayProc, g.Pid()}}
	}
	if err := measureSides(ctx, o, scenario, sides, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n== %s ==\n", title)
	fmt.Fprintf(stdout, "%-22s %8s %9s %9s %9s %14s %14s %8s\n", "tollway", "ok/s", "p50 ms", "p90 ms", "p99 ms", "cpu/req us", "envoy/tollway", "errors")
	for _, s := range sides {
		r := s.res
		n := float64(max(len(r.lat), 1))
		split := fmt.Sprintf("%.0f / %.0f", float64(s.each[0].Microseconds())/n, float64(s.each[1].Microseconds())/n)
		fmt.Fprintf(stdout, "%-22s %8.1f %9s %9s %9s %14.0f %14s %8d\n", s.name, r.throughput, ms(pct(r.lat, 0.50)), ms(pct(r.lat, 0.90)), ms(pct(r.lat, 0.99)), s.cpuPer(), split, r.errors)
	}
	for _, s := range sides {
		if s.res.errRate() > maxErrRate {
			return fmt.Errorf("%s scenario: %s error rate %.2f%%", scenario, s.name, 100*s.res.errRate())
		}
	}
	return nil
}

// measureSides warms each side up, then sends each the load in observeRounds alternating
// rounds, counting its processes' CPU.
func measureSides(ctx context.Context, o *options, scenario string, sides []*side, stderr io.Writer) error {
	seg := o.observeDuration / observeRounds
	for _, s := range sides {
		fmt.Fprintf(stderr, "bench: %s warm-up, %s ...\n", scenario, s.name)
		attackChat(ctx, s.t, chatBody, o.rate, min(o.warmup, time.Second))
	}
	for round := range observeRounds {
		for _, s := range sides {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stderr, "bench: %s %s, round %d/%d ...\n", scenario, s.name, round+1, observeRounds)
			c0 := cpuSnapshot(s.procs)
			s.res = s.res.merge(attackChat(ctx, s.t, chatBody, o.rate, seg))
			if s.each == nil {
				s.each = make([]time.Duration, len(s.procs))
			}
			for i, c := range cpuSnapshot(s.procs) {
				s.cpu += c - c0[i]
				s.each[i] += c - c0[i]
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	return nil
}
