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
// costs (Tollway and its Envoy together).
const observeRounds = 4

func runObserve(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	dir = filepath.Join(dir, "observe")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()

	type side struct {
		name  string
		extra string
		t     *target
		procs []proc
		res   *result
		cpu   time.Duration
		each  []time.Duration // per process of procs
	}
	sides := []*side{
		{name: "metrics+access log on", extra: "metrics: {enabled: true}\nlog: {access: %s}\n"},
		{name: "both off", extra: "metrics: {enabled: false}\nlog: {access: off}\n"},
	}
	for i, s := range sides {
		sdir := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return err
		}
		extra := s.extra
		if i == 0 {
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

	dur := o.observeDuration
	seg := dur / observeRounds
	for _, s := range sides {
		fmt.Fprintf(stderr, "bench: observe warm-up, %s ...\n", s.name)
		attackChat(ctx, s.t, chatBody, o.rate, min(o.warmup, time.Second))
	}
	for round := range observeRounds {
		for _, s := range sides {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stderr, "bench: observe %s, round %d/%d ...\n", s.name, round+1, observeRounds)
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

	fmt.Fprintf(stdout, "\n== metrics + access log: on vs off, billing on, keyed chat at %d req/s for %s per side (%d alternating rounds) ==\n", o.rate, dur, observeRounds)
	fmt.Fprintf(stdout, "%-22s %8s %9s %9s %9s %14s %14s %8s\n", "tollway", "ok/s", "p50 ms", "p90 ms", "p99 ms", "cpu/req us", "envoy/tollway", "errors")
	cpuPer := func(s *side) float64 {
		return float64(s.cpu.Microseconds()) / float64(max(len(s.res.lat), 1))
	}
	for _, s := range sides {
		r := s.res
		n := float64(max(len(r.lat), 1))
		split := fmt.Sprintf("%.0f / %.0f", float64(s.each[0].Microseconds())/n, float64(s.each[1].Microseconds())/n)
		fmt.Fprintf(stdout, "%-22s %8.1f %9s %9s %9s %14.0f %14s %8d\n", s.name, r.throughput, ms(pct(r.lat, 0.50)), ms(pct(r.lat, 0.90)), ms(pct(r.lat, 0.99)), cpuPer(s), split, r.errors)
	}
	on, off := sides[0], sides[1]
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", a/b)
	}
	fmt.Fprintf(stdout, "on/off: p50 x%s (%s ms), p99 x%s (%s ms), CPU per request (Tollway + Envoy) x%s (%+.0f us)\n",
		ratio(float64(pct(on.res.lat, 0.50)), float64(pct(off.res.lat, 0.50))), plusMS(pct(on.res.lat, 0.50)-pct(off.res.lat, 0.50)),
		ratio(float64(pct(on.res.lat, 0.99)), float64(pct(off.res.lat, 0.99))), plusMS(pct(on.res.lat, 0.99)-pct(off.res.lat, 0.99)),
		ratio(cpuPer(on), cpuPer(off)), cpuPer(on)-cpuPer(off))
	for _, s := range sides {
		if s.res.errRate() > maxErrRate {
			return fmt.Errorf("observe scenario: %s error rate %.2f%%", s.name, 100*s.res.errRate())
		}
	}
	return nil
}
