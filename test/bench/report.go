package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

func plusMS(d time.Duration) string { return fmt.Sprintf("%+.3f", float64(d)/1e6) }

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func errCell(r *result) string {
	return fmt.Sprintf("%d (%.2f%%)", r.errors, 100*r.errRate())
}

func report(w io.Writer, o *options, all []*scenario) {
	find := func(mode, path string) *scenario {
		for _, s := range all {
			if s.mode == mode && s.path == path {
				return s
			}
		}
		return nil
	}
	for _, mode := range o.modes {
		if mode == "chat" {
			fmt.Fprintf(w, "\n== non-streaming chat completions, %d req/s ==\n", o.rate)
			fmt.Fprintf(w, "%-8s %8s %8s %9s %9s %9s %9s  %s\n", "path", "sent/s", "ok/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors")
		} else {
			fmt.Fprintf(w, "\n== streaming chat completions, %d req/s (first = first SSE data line; total = through [DONE]) ==\n", o.rate)
			fmt.Fprintf(w, "%-8s %8s %8s %10s %10s %10s %10s  %s\n", "path", "sent/s", "ok/s", "first p50", "first p99", "total p50", "total p99", "errors")
		}
		for _, s := range all {
			if s.mode != mode {
				continue
			}
			r := s.res
			if mode == "chat" {
				fmt.Fprintf(w, "%-8s %8.1f %8.1f %9s %9s %9s %9s  %s\n", s.path, r.sentRate, r.throughput,
					ms(pct(r.lat, .5)), ms(pct(r.lat, .9)), ms(pct(r.lat, .99)), ms(pct(r.lat, 1)), errCell(r))
			} else {
				fmt.Fprintf(w, "%-8s %8.1f %8.1f %10s %10s %10s %10s  %s\n", s.path, r.sentRate, r.throughput,
					ms(pct(r.ttfb, .5)), ms(pct(r.ttfb, .99)), ms(pct(r.lat, .5)), ms(pct(r.lat, .99)), errCell(r))
			}
		}
		for _, s := range all {
			if s.mode != mode {
				continue
			}
			for msg, n := range s.res.errSamples {
				fmt.Fprintf(w, "  %s error x%d: %s\n", s.path, n, msg)
			}
			if s.warmErrs > 0 {
				fmt.Fprintf(w, "  %s: %d errors during the (discarded) warm-up\n", s.path, s.warmErrs)
			}
		}
	}

	// Overheads and the verdict need the direct baseline.
	type metric struct {
		name string
		mode string
		pick func(*result) []time.Duration
	}
	metrics := []metric{
		{"chat latency", "chat", func(r *result) []time.Duration { return r.lat }},
		{"stream first event", "stream", func(r *result) []time.Duration { return r.ttfb }},
		{"stream total", "stream", func(r *result) []time.Duration { return r.lat }},
	}
	header := false
	var verdicts []string
	for _, m := range metrics {
		d := find(m.mode, "direct")
		if d == nil || find(m.mode, "envoy") == nil && find(m.mode, "tollway") == nil {
			continue
		}
		dp50, dp99 := pct(m.pick(d.res), .5), pct(m.pick(d.res), .99)
		cell := func(path string) (string, string, time.Duration, time.Duration, bool) {
			s := find(m.mode, path)
			if s == nil {
				return "-", "-", 0, 0, false
			}
			p50, p99 := pct(m.pick(s.res), .5), pct(m.pick(s.res), .99)
			return plusMS(p50-dp50) + " / " + plusMS(p99-dp99), ratio(p50, dp50) + " / " + ratio(p99, dp99), p50 - dp50, p99 - dp99, true
		}
		if !header {
			fmt.Fprintf(w, "\n== overhead over direct: p50 / p99 in ms (ratios tollway/direct) ==\n")
			fmt.Fprintf(w, "%-20s %-22s %-22s %s\n", "metric", "envoy - direct", "tollway - direct", "tollway / direct")
			header = true
		}
		env, _, _, _, _ := cell("envoy")
		tw, tr, t50, t99, ok := cell("tollway")
		fmt.Fprintf(w, "%-20s %-22s %-22s %s\n", m.name, env, tw, tr)
		if m.name == "stream total" {
			fmt.Fprintln(w, "  (stream total includes the fake's pause between chunks, whose timers fire later on a busier machine: not a verdict metric)")
		}
		if ok && m.name != "stream total" { // a stream's total is the provider's pacing, not ours
			verdicts = append(verdicts, fmt.Sprintf("%-20s p50 %s ms (<= %s) %s   p99 %s ms (<= %s) %s",
				m.name, plusMS(t50), targetP50, verdict(t50 <= targetP50), plusMS(t99), targetP99, verdict(t99 <= targetP99)))
		}
	}
	if len(verdicts) > 0 {
		fmt.Fprintf(w, "\n== verdict: Tollway adds <= %s at p50 and <= %s at p99 over direct (measured at %d req/s) ==\n", targetP50, targetP99, o.rate)
		for _, v := range verdicts {
			fmt.Fprintln(w, v)
		}
	}

	// CPU per request shows who pays for the overhead on this small machine.
	var names []string
	for _, s := range all {
		for n := range s.cpu {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	fmt.Fprintf(w, "\n== CPU per successful request, us (user+sys over the measured window; budget %d cores = %.0f us/req at %d req/s) ==\n",
		runtime.NumCPU(), float64(runtime.NumCPU())*1e6/float64(o.rate), o.rate)
	fmt.Fprintf(w, "%-16s", "scenario")
	for _, n := range names {
		fmt.Fprintf(w, " %20s", n)
	}
	fmt.Fprintf(w, " %8s\n", "total")
	for _, s := range all {
		fmt.Fprintf(w, "%-16s", s.mode+" "+s.path)
		ok := max(1, len(s.res.lat))
		var total time.Duration
		for _, n := range names {
			c, has := s.cpu[n]
			if !has {
				fmt.Fprintf(w, " %20s", "-")
				continue
			}
			total += c
			fmt.Fprintf(w, " %20.0f", float64(c.Microseconds())/float64(ok))
		}
		fmt.Fprintf(w, " %8.0f\n", float64(total.Microseconds())/float64(ok))
	}

	var lines []string
	for _, s := range all {
		if len(s.counters) == 0 {
			continue
		}
		slices.SortFunc(s.counters, func(a, b counterDelta) int { return strings.Compare(a.name, b.name) })
		ok := float64(max(1, s.res.requests))
		lines = append(lines, s.mode+" "+s.path+":")
		for _, c := range s.counters {
			lines = append(lines, fmt.Sprintf("  %-55s %8d  %7.3f/req", c.name, c.delta, float64(c.delta)/ok))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\n== Envoy counters over the measured window ==\n%s\n", strings.Join(lines, "\n"))
	}
}

// printMemory reports the resident memory of every process after the load, Tollway's first.
func printMemory(w io.Writer, procs map[string][]proc) {
	fmt.Fprintf(w, "\n== memory after the load: VmRSS (peak VmHWM) ==\n")
	var ps []proc
	for _, path := range []string{"tollway", "envoy", "direct"} {
		for _, p := range slices.Backward(procs[path]) {
			if !slices.ContainsFunc(ps, func(q proc) bool { return q.pid == p.pid }) {
				ps = append(ps, p)
			}
		}
	}
	last := func(p proc) int {
		if p.name == selfProc {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(ps, func(a, b proc) int { return cmp.Compare(last(a), last(b)) }) // the bench last
	for _, p := range ps {
		rss, hwm, err := memKB(p.pid)
		if err != nil {
			fmt.Fprintf(w, "%-20s %v\n", p.name, err)
			continue
		}
		line := fmt.Sprintf("%-20s %7.1f MiB (%.1f MiB)", p.name, float64(rss)/1024, float64(hwm)/1024)
		if p.name == tollwayProc {
			line += fmt.Sprintf("   target < %.0f MB: %s", targetRSS/1e6, verdict(float64(rss)*1024 < targetRSS))
		}
		fmt.Fprintln(w, line)
	}
}
