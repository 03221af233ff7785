package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/tollway/tollway/test/fakeupstream"
)

// Peers (-scenarios peers): Tollway (billing on) beside LiteLLM's proxy, the fake directly and
// Envoy alone, in one run against one fake provider: plain and streamed chat at -peer-rates and
// at -low-rates, added latency over direct, errors (a peer failing requests is reported, not
// fatal), CPU per request per process, memory; then both gateways idle, and a CPU and an
// allocation profile of the Tollway process at the highest peer rate.

const pathLiteLLM = "litellm"

var peerPaths = []string{pathDirect, pathEnvoy, pathTollway, pathLiteLLM}

// peerTollways are the Tollway peers: compare runs only when -peer-paths names it.
var peerTollways = []string{pathTollway, pathCompare}

// Process names in the peers tables: Envoy and Tollway apart, LiteLLM's workers summed.
const (
	procEnvoy   = "envoy"
	procTollway = "tollway"
	procLiteLLM = "litellm"
)

var peerProcNames = []string{procEnvoy, procTollway, procLiteLLM}

// peerRun is one path at one rate in one mode.
type peerRun struct {
	path     string
	res      *result
	warmErrs int
	cpu      map[string]time.Duration
}

// cpuTotal is the run's CPU summed over its processes.
func (r *peerRun) cpuTotal() (d time.Duration) {
	for _, c := range r.cpu {
		d += c
	}
	return d
}

type peerSetup struct {
	targets map[string]*target
	procs   map[string][]proc // gateway processes only: the bench's own CPU is not charged
	idleRSS map[string]mem    // process label -> memory once ready
	tw      *tollway
}

func runPeers(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	dir = filepath.Join(dir, "peers")
	llBin, err := findLiteLLM(o.litellmBin)
	if err != nil {
		return err
	}
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()

	s := &peerSetup{targets: map[string]*target{}, procs: map[string][]proc{}, idleRSS: map[string]mem{}}
	s.targets[pathDirect] = &target{name: pathDirect, baseURL: fake.URL(), auth: providerKey}
	s.procs[pathDirect] = nil

	pe, err := startPlainEnvoy(ctx, o.envoyBin, filepath.Join(dir, "envoy"), fake.Addr())
	if err != nil {
		return err
	}
	defer pe.proc.Stop()
	s.targets[pathEnvoy] = &target{name: pathEnvoy, baseURL: pe.baseURL, auth: providerKey}
	s.procs[pathEnvoy] = []proc{{procEnvoy, pe.proc.Pid()}}

	// TOLLWAY_PPROF=1 serves /debug/pprof on the admin listener for the profiles at the end; it
	// costs nothing until a profile is asked for. compare runs exactly as tollway, from -compare.
	for _, p := range peerTollways {
		if p == pathCompare && !slices.Contains(o.peerPaths, p) {
			continue
		}
		tw, t, err := startTollwayTarget(ctx, o.binFor(p), o.envoyBin, filepath.Join(dir, p), fake.URL(), true, append([]string{pprofEnvVar + "=1"}, o.tollwayEnv...), p)
		if err != nil {
			return err
		}
		defer tw.stop()
		s.targets[p] = t
		s.procs[p] = []proc{{procEnvoy, tw.EnvoyPID}, {procTollway, tw.Pid()}}
	}
	s.tw = s.targets[pathTollway].tw

	fmt.Fprintf(stderr, "bench: peers: starting LiteLLM (%s, %d workers) ...\n", llBin, o.litellmWorkers)
	ll, err := startLiteLLM(ctx, llBin, filepath.Join(dir, "litellm"), fake.URL(), o.litellmWorkers)
	if err != nil {
		return err
	}
	defer ll.stop()
	s.targets[pathLiteLLM] = &target{name: pathLiteLLM, baseURL: ll.baseURL, auth: litellmMasterKey}
	s.procs[pathLiteLLM] = []proc{{procLiteLLM, -ll.pid()}}

	for _, p := range o.peerPaths {
		t := s.targets[p]
		t.client = newClient(o.timeout)
		if err := probe(ctx, t, chatBody); err != nil {
			return err
		}
		t.served++
		for _, pr := range s.procs[p] {
			if m, err := procMem(pr); err == nil {
				s.idleRSS[peerProcLabel(p, pr)] = m
			}
		}
		fmt.Fprintf(stdout, "%-22s %s%s\n", peerLabel(p), t.baseURL, o.binNote(p))
	}
	ver, _ := exec.Command(filepath.Join(filepath.Dir(llBin), "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))").Output()
	fmt.Fprintf(stdout, "litellm %s: %d worker(s), master key (no database: no virtual keys), offline (local cost map, HF hub offline, telemetry off)\n",
		strings.TrimSpace(string(ver)), o.litellmWorkers)

	// Idle first: every gateway started and probed once, nothing else running.
	if err := peerIdle(ctx, o, s, stdout, stderr); err != nil {
		return err
	}

	var bad []string
	measure := func(rates []int, dur time.Duration, rounds int, what string) error {
		for _, rate := range rates {
			for _, mode := range o.modes {
				d := dur
				if d == 0 { // low rates: enough requests for a p99
					d = time.Duration((o.lowRequests+rate-1)/rate) * time.Second
				}
				runs, err := peerMeasure(ctx, o, s, mode, rate, d, rounds, stderr)
				if err != nil {
					return err
				}
				reportPeers(stdout, what, mode, rate, d, rounds, runs, s)
				for _, r := range runs {
					if r.path != pathLiteLLM && r.res.errRate() > maxErrRate {
						bad = append(bad, fmt.Sprintf("peers %s %d req/s %s: error rate %.2f%%", mode, rate, peerLabel(r.path), 100*r.res.errRate()))
					}
				}
			}
		}
		return nil
	}
	if err := measure(o.peerRates, o.peerDuration, o.peerRounds, "peers"); err != nil {
		return err
	}
	if err := measure(o.lowRates, 0, o.peerRounds, "low rates"); err != nil {
		return err
	}
	reportPeerMemory(stdout, o, s)

	if o.profileSeconds > 0 && len(o.peerRates) > 0 {
		if err := profileTollway(ctx, o, s, slicesMax(o.peerRates), stdout, stderr); err != nil {
			bad = append(bad, "profile: "+err.Error())
		}
	}

	var checks []*recordCheck
	for _, p := range peerTollways {
		if t := s.targets[p]; t != nil {
			c := checkRecords(ctx, t, o.settleWait)
			checks = append(checks, c)
			if c.err != nil {
				bad = append(bad, "usage records: "+c.err.Error())
			}
		}
	}
	reportRecords(stdout, checks)
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

const pprofEnvVar = "TOLLWAY_PPROF"

func peerLabel(path string) string {
	if path == pathLiteLLM {
		return "litellm proxy"
	}
	return label(path)
}

// peerProcLabel tells Envoy alone from Tollway's Envoy.
func peerProcLabel(path string, p proc) string {
	if p.name == procEnvoy && path == pathEnvoy {
		return "envoy alone"
	}
	if isTollway(path) {
		return path + ": " + p.name
	}
	return p.name
}

func slicesMax(v []int) int {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// peerMeasure runs one mode at one rate on every peer path: a warm-up each, then rounds that
// take turns (the machine's drift lands on every path alike).
func peerMeasure(ctx context.Context, o *options, s *peerSetup, mode string, rate int, dur time.Duration, rounds int, stderr io.Writer) ([]*peerRun, error) {
	load := func(t *target, d time.Duration) *result {
		var r *result
		if mode == "chat" {
			// A worker cap like the stream loop's in-flight cap: a gateway that falls far behind
			// must not take the bench's file descriptors with it.
			r = attackPost(ctx, t, "/chat/completions", chatBody, `"chat.completion"`, rate, d, vegeta.MaxWorkers(uint64(o.maxInFlight)))
		} else {
			r = attackStream(ctx, t, streamBody, rate, d, o.maxInFlight)
		}
		t.tally(r)
		return r
	}
	warm := min(o.warmup, time.Second)
	if rate >= 100 {
		warm = min(warm, 500*time.Millisecond) // enough requests; less backlog in a peer that falls behind
	}
	var runs []*peerRun
	for _, p := range o.peerPaths {
		runs = append(runs, &peerRun{path: p, cpu: map[string]time.Duration{}})
	}
	seg := max(dur/time.Duration(rounds), time.Second)
	for round := range rounds {
		for _, r := range runs {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			t, ps := s.targets[r.path], s.procs[r.path]
			fmt.Fprintf(stderr, "bench: peers %s %d req/s %s, round %d/%d ...\n", mode, rate, peerLabel(r.path), round+1, rounds)
			if round == 0 && warm > 0 {
				r.warmErrs = load(t, warm).lost()
				quiesce(ctx, ps)
			}
			c0 := cpuSnapshot(ps)
			r.res = r.res.merge(load(t, seg))
			for i, c := range cpuSnapshot(ps) {
				r.cpu[ps[i].name] += c - c0[i]
			}
			// A gateway that fell behind may still be working off abandoned requests: let it
			// finish before the next path is measured (the pause lets the last connections settle).
			quiesce(ctx, ps)
		}
	}
	return runs, nil
}

// quiesce waits (at least 200 ms, at most 10 s) until ps together use under a fifth of a core.
func quiesce(ctx context.Context, ps []proc) {
	const step = 200 * time.Millisecond
	if len(ps) == 0 {
		time.Sleep(step)
		return
	}
	sum := func() (d time.Duration) {
		for _, c := range cpuSnapshot(ps) {
			d += c
		}
		return d
	}
	for range int(10 * time.Second / step) {
		before := sum()
		select {
		case <-ctx.Done():
			return
		case <-time.After(step):
		}
		if sum()-before < step/5 {
			return
		}
	}
}

func perReq(d time.Duration, r *result) float64 {
	return float64(d.Microseconds()) / float64(max(1, len(r.lat)))
}

func reportPeers(w io.Writer, what, mode string, rate int, dur time.Duration, rounds int, runs []*peerRun, s *peerSetup) {
	var direct, tw, ll, cmp *peerRun
	for _, r := range runs {
		switch r.path {
		case pathDirect:
			direct = r
		case pathTollway:
			tw = r
		case pathLiteLLM:
			ll = r
		case pathCompare:
			cmp = r
		}
	}
	pick := func(r *result) []time.Duration { return r.lat }
	kind := "non-streaming chat"
	if mode == "stream" {
		kind, pick = "streamed chat (latency = first SSE data line)", func(r *result) []time.Duration { return r.ttfb }
	}
	fmt.Fprintf(w, "\n== %s: %s, %d req/s, %s per path in %d rounds; CPU us per successful request (user+sys; the bench's own not counted) ==\n",
		what, kind, rate, dur, rounds)
	fmt.Fprintf(w, "%-22s %7s %7s %8s %8s %9s %9s %7s %7s %7s %7s  %s\n",
		"path", "sent/s", "ok/s", "p50 ms", "p99 ms", "+p50", "+p99", procEnvoy, procTollway, procLiteLLM, "total", "errors")
	added := func(r *peerRun) (time.Duration, time.Duration, bool) {
		if direct == nil || r == nil || len(pick(r.res)) == 0 || len(pick(direct.res)) == 0 {
			return 0, 0, false
		}
		return pct(pick(r.res), .5) - pct(pick(direct.res), .5), pct(pick(r.res), .99) - pct(pick(direct.res), .99), true
	}
	for _, r := range runs {
		res := r.res
		a50, a99 := "-", "-"
		if d50, d99, ok := added(r); ok && r.path != pathDirect {
			a50, a99 = plusMS(d50), plusMS(d99)
		}
		line := fmt.Sprintf("%-22s %7.1f %7.1f %8s %8s %9s %9s", peerLabel(r.path), res.sentRate, res.throughput,
			ms(pct(pick(res), .5)), ms(pct(pick(res), .99)), a50, a99)
		for _, n := range peerProcNames {
			if c, ok := r.cpu[n]; ok {
				line += fmt.Sprintf(" %7.0f", perReq(c, res))
			} else {
				line += fmt.Sprintf(" %7s", "-")
			}
		}
		tot := "-"
		if len(r.cpu) > 0 {
			tot = fmt.Sprintf("%.0f", perReq(r.cpuTotal(), res))
		}
		fmt.Fprintf(w, "%s %7s  %s\n", line, tot, errCell(res))
	}
	if mode == "stream" {
		for _, r := range runs {
			if len(r.res.lat) > 0 {
				fmt.Fprintf(w, "  %s: whole stream p50 %s ms, p99 %s ms\n", peerLabel(r.path), ms(pct(r.res.lat, .5)), ms(pct(r.res.lat, .99)))
			}
		}
	}
	for _, r := range runs {
		n := 0
		for msg, k := range r.res.errSamples {
			if n++; n > 3 {
				break
			}
			fmt.Fprintf(w, "  %s error x%d: %.200s\n", peerLabel(r.path), k, msg)
		}
		if n := shedNote(r.res); n != "" {
			fmt.Fprintf(w, "  %s %s\n", peerLabel(r.path), n)
		}
		if r.warmErrs > 0 {
			fmt.Fprintf(w, "  %s: %d errors during the (discarded) warm-up\n", peerLabel(r.path), r.warmErrs)
		}
	}
	if tw != nil && ll != nil {
		t50, t99, ok1 := added(tw)
		l50, l99, ok2 := added(ll)
		x := func(a, b float64) string {
			if b <= 0 || a <= 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.1fx", a/b)
		}
		if ok1 && ok2 {
			fmt.Fprintf(w, "litellm / tollway (billing on): added p50 %s, added p99 %s, CPU per request %s; litellm failed %.2f%% of %d requests\n",
				x(float64(l50), float64(t50)), x(float64(l99), float64(t99)),
				x(perReq(ll.cpuTotal(), ll.res), perReq(tw.cpuTotal(), tw.res)), 100*ll.res.errRate(), ll.res.requests)
		} else {
			fmt.Fprintf(w, "litellm / tollway: n/a (litellm served %d of %d requests)\n", len(ll.res.lat), ll.res.requests)
		}
	}
	if tw != nil && cmp != nil {
		var d *result
		if direct != nil {
			d = direct.res
		}
		fmt.Fprintln(w, versus(pick, d, tw.res, cmp.res, perReq(tw.cpuTotal(), tw.res), perReq(cmp.cpuTotal(), cmp.res)))
	}
}

// peerIdle measures every gateway doing nothing for -idle: CPU as a share of one core.
func peerIdle(ctx context.Context, o *options, s *peerSetup, stdout, stderr io.Writer) error {
	if o.idle <= 0 {
		return nil
	}
	fmt.Fprintf(stderr, "bench: peers: idle for %s ...\n", o.idle)
	time.Sleep(2 * time.Second) // past the probes' and the start-up's last work
	type row struct {
		path, label string
		p           proc
		c0          time.Duration
	}
	var rows []row
	for _, p := range []string{pathTollway, pathCompare, pathEnvoy, pathLiteLLM} {
		for _, pr := range s.procs[p] {
			rows = append(rows, row{p, peerProcLabel(p, pr), pr, procCPU(pr)})
		}
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.idle):
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "\n== idle: no requests for %s, CPU as %% of one core (user+sys; resolution %s of CPU = %.2f%%) ==\n",
		o.idle.Round(time.Second), clockTick, 100*float64(clockTick)/float64(el))
	gw := map[string]time.Duration{} // Envoy + Tollway, per Tollway path
	for _, r := range rows {
		c := procCPU(r.p) - r.c0
		if isTollway(r.path) {
			gw[r.path] += c
		}
		m, _ := procMem(r.p)
		fmt.Fprintf(stdout, "%-22s %6.2f%%   RSS %6.1f MiB, PSS %6.1f MiB\n", r.label, 100*float64(c)/float64(el), mib(m.rss), mib(m.pss))
	}
	for _, p := range peerTollways {
		if s.procs[p] != nil {
			fmt.Fprintf(stdout, "%-22s %6.2f%%\n", p+": envoy+tollway", 100*float64(gw[p])/float64(el))
		}
	}
	return nil
}

func reportPeerMemory(w io.Writer, o *options, s *peerSetup) {
	fmt.Fprintf(w, "\n== peers: memory, MiB: VmRSS when ready, after all load, peak (VmHWM); PSS after all load (litellm: its %d worker(s) and parent summed) ==\n", o.litellmWorkers)
	fmt.Fprintf(w, "%-26s %7s %7s %7s %7s\n", "process", "ready", "after", "peak", "pss")
	after := map[string][2]int64{} // path -> RSS, PSS after all load, KiB
	for _, p := range []string{pathTollway, pathCompare, pathEnvoy, pathLiteLLM} {
		var sum0, sum1, sumHWM, sumPSS int64
		for _, pr := range s.procs[p] {
			l := peerProcLabel(p, pr)
			m, err := procMem(pr)
			if err != nil {
				fmt.Fprintf(w, "%-22s %v\n", l, err)
				continue
			}
			i := s.idleRSS[l]
			sum0, sum1, sumHWM, sumPSS = sum0+i.rss, sum1+m.rss, sumHWM+m.hwm, sumPSS+m.pss
			fmt.Fprintf(w, "%-26s %7.1f %7.1f %7.1f %7.1f\n", l, mib(i.rss), mib(m.rss), mib(m.hwm), mib(m.pss))
		}
		if len(s.procs[p]) > 1 {
			fmt.Fprintf(w, "%-26s %7.1f %7.1f %7.1f %7.1f\n", peerLabel(p)+" total", mib(sum0), mib(sum1), mib(sumHWM), mib(sumPSS))
		}
		after[p] = [2]int64{sum1, sumPSS}
	}
	if t, l := after[pathTollway], after[pathLiteLLM]; t[0] > 0 && l[0] > 0 && t[1] > 0 {
		fmt.Fprintf(w, "litellm / tollway (Envoy + Tollway) after all load: RSS %.1fx, PSS %.1fx\n", float64(l[0])/float64(t[0]), float64(l[1])/float64(t[1]))
	}
}

// profileTollway loads billing-on Tollway with plain chat at rate and takes, over the same
// window, a CPU profile and an allocation profile (the delta over the window) of the Tollway
// process from its admin listener; then prints go tool pprof's top entries.
func profileTollway(ctx context.Context, o *options, s *peerSetup, rate int, stdout, stderr io.Writer) error {
	t := s.targets[pathTollway]
	secs := o.profileSeconds
	out := o.profileDir
	if out == "" {
		out = filepath.Join(os.TempDir(), "tollway-bench-profiles-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: peers: profiling tollway at %d req/s for %ds ...\n", rate, secs)
	done := make(chan *result, 1)
	go func() {
		done <- attackPost(ctx, t, "/chat/completions", chatBody, `"chat.completion"`, rate, time.Duration(secs+2)*time.Second, vegeta.MaxWorkers(uint64(o.maxInFlight)))
	}()
	time.Sleep(time.Second) // the load at its rate before the window opens
	client := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	get := func(path, file string, errc chan<- error) {
		errc <- func() error {
			resp, err := client.Get("http://" + s.tw.Admin + path)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
				return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
			}
			f, err := os.Create(filepath.Join(out, file))
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(f, io.LimitReader(resp.Body, 256<<20))
			return err
		}()
	}
	errc := make(chan error, 2)
	go get("/debug/pprof/profile?seconds="+strconv.Itoa(secs), "cpu.pprof", errc)
	go get("/debug/pprof/allocs?seconds="+strconv.Itoa(secs), "allocs.pprof", errc)
	e1, e2 := <-errc, <-errc
	r := <-done
	t.tally(r)
	if e1 != nil || e2 != nil {
		return fmt.Errorf("%v; %v", e1, e2)
	}
	fmt.Fprintf(stdout, "\n== profile of the tollway process: billing-on plain chat at %d req/s, %ds window (profiles in %s) ==\n", rate, secs, out)
	fmt.Fprintf(stdout, "load during the profile: ok/s %.1f, p50 %s ms, p99 %s ms, errors %s (the CPU profiler itself costs a little)\n",
		r.throughput, ms(pct(r.lat, .5)), ms(pct(r.lat, .99)), errCell(r))
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, q := range []struct {
		title string
		args  []string
	}{
		{"CPU, top 10 by cumulative time", []string{"-top", "-cum", "-nodecount=10", "cpu.pprof"}},
		{"CPU, top 10 by own (flat) time", []string{"-top", "-nodecount=10", "cpu.pprof"}},
		{"allocations, top 10 sites by bytes allocated", []string{"-top", "-sample_index=alloc_space", "-nodecount=10", "allocs.pprof"}},
		{"allocations, top 10 sites by objects allocated", []string{"-top", "-sample_index=alloc_objects", "-nodecount=10", "allocs.pprof"}},
	} {
		cmd := exec.CommandContext(ctx, goBin, append([]string{"tool", "pprof"}, q.args...)...)
		cmd.Dir = out
		b, err := cmd.CombinedOutput()
		fmt.Fprintf(stdout, "-- %s (go tool pprof %s)\n", q.title, strings.Join(q.args, " "))
		if err != nil {
			fmt.Fprintf(stdout, "  go tool pprof: %v\n", err)
		}
		fmt.Fprintf(stdout, "%s", pprofTable(string(b)))
	}
	return nil
}

// pprofTable keeps pprof's table, dropping the file and build lines above it.
func pprofTable(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") || l == "" {
			continue
		}
		keep = append(keep, "  "+l)
	}
	return strings.Join(keep, "\n") + "\n"
}
