package main

// Saturation (-scenarios saturation, issue 30 item 3): how far each gateway goes on this machine
// before it queues, with the load generator and the fake provider beside it. The offered rate
// steps up (-saturation-rates for plain chat, -saturation-stream-rates for streams of the long
// answer the streams scenario uses); at each step direct, Envoy alone and billing-on Tollway
// take turns (-saturation-step each, after a short warm-up). A path is saturated at the first
// step where its added p99 over direct (a stream's first event) reaches +5 ms, it achieves under
// 98% of the offered rate, or more than 0.5% of what it was sent fails; it is not loaded past that
// step, and the stepping ends once both are. Its saturation rate is the last step before. The
// fake runs in a process of its own (fakeproc.go), so CPU per request is read for Envoy, Tollway,
// the fake and the bench (the load generator) apart. Load the bench's in-flight cap kept from
// being sent is shed: it counts against the achieved rate, not as an error.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

const (
	satAddedP99 = 5 * time.Millisecond // added p99 over direct a path stays under
	satAchieved = 0.98                 // of the offered rate
	satWarmup   = 500 * time.Millisecond
	// satSamples is the fewest requests a step measures (its p99 is then at most the second
	// slowest): a step at a low rate lasts longer than -saturation-step, up to three times it.
	satSamples = 200

	procFake  = "fake"
	procBench = "bench (client)"
)

// satPaths are the paths of each step, in turn; satGateways the ones judged.
var (
	satPaths    = []string{pathDirect, pathEnvoy, pathTollway}
	satGateways = []string{pathEnvoy, pathTollway}
)

// satStep is one offered rate: each path's load and its processes' CPU.
type satStep struct {
	rate  int
	again bool // a second try at this rate of the gateways the step before found over the limits
	res   map[string]*result
	cpu   map[string]map[string]time.Duration // path -> process -> CPU over the measured load
	why   map[string]string                   // path -> why it saturated here ("" : it did not)
}

// satCurve is one mode's steps and each gateway's saturation rate.
type satCurve struct {
	mode     string // "plain" or "streams"
	events   int    // streams: SSE data lines per answer
	steps    []*satStep
	under    map[string]int  // gateway -> highest offered rate it stayed under the limits at (0: none)
	saturate map[string]bool // gateway -> it saturated within the steps
	// directShort is the rate at which direct itself fell short (0: never): the curve ended there.
	directShort int
}

// satSetup is what every step loads: the targets and the processes charged per path.
type satSetup struct {
	targets map[string]*target
	procs   map[string][]proc
	stop    []func() // in reverse order of start
}

func (s *satSetup) close() {
	for _, f := range slices.Backward(s.stop) {
		f()
	}
}

// startSaturation starts the fake provider in its own process, Envoy alone and billing-on
// Tollway in front of it, and checks each path answers.
func startSaturation(ctx context.Context, o *options, dir string, stderr io.Writer) (*satSetup, error) {
	s := &satSetup{targets: map[string]*target{}, procs: map[string][]proc{}}
	fake, err := startFakeProc(o.chunkDelay)
	if err != nil {
		return s, err
	}
	s.stop = append(s.stop, fake.stop)
	fmt.Fprintf(stderr, "bench: saturation: fake provider in process %d, Envoy alone and billing-on Tollway ...\n", fake.pid())
	pe, err := startPlainEnvoy(ctx, o.envoyBin, filepath.Join(dir, "saturation", "envoy"), fake.addr)
	if err != nil {
		return s, err
	}
	s.stop = append(s.stop, func() { pe.proc.Stop() })
	tw, t, err := startTollwayTarget(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, "saturation", pathTollway), fake.url, true, o.tollwayEnv, pathTollway)
	if err != nil {
		return s, err
	}
	s.stop = append(s.stop, tw.stop)
	fk, self := proc{procFake, fake.pid()}, proc{procBench, os.Getpid()}
	s.targets[pathDirect] = &target{name: pathDirect, baseURL: fake.url, auth: providerKey}
	s.targets[pathEnvoy] = &target{name: pathEnvoy, baseURL: pe.baseURL, auth: providerKey}
	s.targets[pathTollway] = t
	s.procs[pathDirect] = []proc{fk, self}
	s.procs[pathEnvoy] = []proc{{procEnvoy, pe.proc.Pid()}, fk, self}
	s.procs[pathTollway] = []proc{{procEnvoy, tw.EnvoyPID}, {procTollway, tw.Pid()}, fk, self}
	for _, p := range satPaths {
		s.targets[p].client = newClient(o.timeout)
		if err := probe(ctx, s.targets[p], chatBody); err != nil {
			return s, err
		}
		s.targets[p].served++
	}
	return s, nil
}

func runSaturation(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	s, err := startSaturation(ctx, o, dir, stderr)
	defer s.close()
	if err != nil {
		return fmt.Errorf("saturation: %w", err)
	}
	t := s.targets[pathTollway]
	plain := func(t *target, rate int, d time.Duration) *result {
		return attackPost(ctx, t, "/chat/completions", chatBody, `"chat.completion"`, rate, d, vegeta.MaxWorkers(uint64(o.maxInFlight)))
	}
	pc := runCurve(ctx, o, s, "plain", o.satRates, plain, stderr)
	reportCurve(stdout, o, pc)

	// The streams scenario's two answers: the curve on the long one, the short one for the
	// CPU per extra chunk.
	long, short := streamBodyWords(longPromptWords), streamBody
	events := make([]int, 2)
	for i, b := range [][]byte{long, short} {
		if events[i], err = countEvents(ctx, t, b); err != nil {
			return fmt.Errorf("saturation: %w", err)
		}
		t.served++
	}
	stream := func(body []byte) func(*target, int, time.Duration) *result {
		return func(t *target, rate int, d time.Duration) *result {
			return attackStream(ctx, t, body, rate, d, o.maxInFlight)
		}
	}
	sc := runCurve(ctx, o, s, "streams", o.satStreamRates, stream(long), stderr)
	sc.events = events[0]
	reportCurve(stdout, o, sc)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	streamChunkCost(ctx, o, stdout, stderr, s, sc, stream(short), events[1])

	check := checkRecords(ctx, t, o.settleWait)
	reportRecords(stdout, []*recordCheck{check})
	if check.err != nil {
		return fmt.Errorf("saturation: usage records: %w", check.err)
	}
	return ctx.Err()
}

// runCurve steps the offered rate up through rates until both gateways have saturated. A
// gateway over the limits at a step gets a second try there (direct measured again beside it),
// so one noisy p99 on a shared host does not end its curve; it saturates if that fails too. So
// do all gateways of a step whose direct p99 was itself +5 ms over the curve's lowest (the host
// stalled in direct's turn: every added p99 of the step is off). The curve also ends where
// direct falls short of the rate: the load generator and the fake are then the limit, and the
// gateways still under it are reported as at least the step before.
func runCurve(ctx context.Context, o *options, s *satSetup, mode string, rates []int, load func(*target, int, time.Duration) *result, stderr io.Writer) *satCurve {
	return stepCurve(ctx, mode, rates, func(rate int, paths []string) *satStep {
		return measureRate(ctx, o, s, mode, rate, paths, load, stderr)
	})
}

// stepCurve is runCurve's stepping, measure loading direct and then paths at a rate.
func stepCurve(ctx context.Context, mode string, rates []int, measure func(rate int, paths []string) *satStep) *satCurve {
	c := &satCurve{mode: mode, under: map[string]int{}, saturate: map[string]bool{}}
	live := satGateways
	for _, rate := range rates {
		if len(live) == 0 || ctx.Err() != nil {
			break
		}
		st := measure(rate, live)
		c.steps = append(c.steps, st)
		if st.why[pathDirect] != "" {
			c.directShort = rate
			break
		}
		over := st.judge(live, mode)
		if c.directStalled(st) {
			over = live
		}
		if len(over) > 0 {
			again := measure(rate, over)
			again.again = true
			c.steps = append(c.steps, again)
			if again.why[pathDirect] != "" {
				c.directShort = rate
				break
			}
			over = again.judge(over, mode)
		}
		var still []string
		for _, p := range live {
			if slices.Contains(over, p) {
				c.saturate[p] = true
				continue
			}
			c.under[p] = rate
			still = append(still, p)
		}
		live = still
	}
	return c
}

// measureRate loads direct and then each of paths at rate, in turns.
func measureRate(ctx context.Context, o *options, s *satSetup, mode string, rate int, paths []string, load func(*target, int, time.Duration) *result, stderr io.Writer) *satStep {
	st := &satStep{rate: rate, res: map[string]*result{}, cpu: map[string]map[string]time.Duration{}, why: map[string]string{}}
	for _, p := range append([]string{pathDirect}, paths...) {
		fmt.Fprintf(stderr, "bench: saturation %s %d/s %s ...\n", mode, rate, label(p))
		st.res[p], st.cpu[p] = measureStep(ctx, s.targets[p], s.procs[p], rate, stepTime(o, rate), load)
	}
	st.why[pathDirect] = directShort(st.res[pathDirect], rate)
	return st
}

// directStalled tells a step whose direct p99 is satAddedP99 or more over the lowest direct
// p99 of the curve so far (this step's included), and says so in the step.
func (c *satCurve) directStalled(st *satStep) bool {
	var low time.Duration = -1
	for _, s := range c.steps {
		if m := satMetric(c.mode, s.res[pathDirect]); len(m) > 0 {
			if p := pct(m, .99); low < 0 || p < low {
				low = p
			}
		}
	}
	m := satMetric(c.mode, st.res[pathDirect])
	if len(m) == 0 || pct(m, .99)-low < satAddedP99 {
		return false
	}
	st.why[pathDirect] = fmt.Sprintf("p99 %s ms over the curve's lowest: the host stalled; the step is measured again", plusMS(pct(m, .99)-low))
	return true
}

// judge marks why each of paths saturated at the step and returns those that did.
func (st *satStep) judge(paths []string, mode string) (over []string) {
	for _, p := range paths {
		if st.why[p] = satWhy(st.res[pathDirect], st.res[p], st.rate, mode); st.why[p] != "" {
			over = append(over, p)
		}
	}
	return over
}

// directShort says why direct (the load generator and the fake alone) did not keep up at rate.
func directShort(d *result, rate int) string {
	var why []string
	if a := achieved(d); a < satAchieved*float64(rate) {
		why = append(why, fmt.Sprintf("direct achieved %.0f/s < %.0f%%: the load generator and fake are the limit", a, 100*satAchieved))
	}
	if d.sentErrRate() > maxErrRate {
		why = append(why, fmt.Sprintf("direct errors %.2f%%", 100*d.sentErrRate()))
	}
	return strings.Join(why, ", ")
}

// stepTime is how long a step at rate is measured: -saturation-step, or long enough for
// satSamples requests, up to three times it.
func stepTime(o *options, rate int) time.Duration {
	need := time.Duration(satSamples) * time.Second / time.Duration(rate)
	return min(max(o.satStep, need.Round(100*time.Millisecond)), 3*o.satStep)
}

// measureStep warms t up at rate (discarded), waits for its processes to go quiet, then loads
// it for d and reads the CPU each of ps used meanwhile.
func measureStep(ctx context.Context, t *target, ps []proc, rate int, d time.Duration, load func(*target, int, time.Duration) *result) (*result, map[string]time.Duration) {
	t.tally(load(t, rate, satWarmup))
	quiesce(ctx, ps[:len(ps)-1]) // the gateway and the fake; the bench itself is this process
	c0 := cpuSnapshot(ps)
	r := load(t, rate, d)
	cpu := map[string]time.Duration{}
	for i, c := range cpuSnapshot(ps) {
		cpu[ps[i].name] = c - c0[i]
	}
	t.tally(r)
	return r, cpu
}

// satMetric is what a curve's added p99 is judged on: the whole answer, or a stream's first event.
func satMetric(mode string, r *result) []time.Duration {
	if mode == "streams" {
		return r.ttfb
	}
	return r.lat
}

// achieved is the rate a load was served at: successful requests over the time they were
// offered in (shed requests and failures count against it; the last answer's wait does not).
func achieved(r *result) float64 {
	if sent := r.requests - r.shed; sent > 0 {
		return r.sentRate * float64(len(r.lat)) / float64(sent)
	}
	return 0
}

// satWhy says why path result r saturated at rate against direct d ("" : it did not).
func satWhy(d, r *result, rate int, mode string) string {
	var why []string
	if a := achieved(r); a < satAchieved*float64(rate) {
		why = append(why, fmt.Sprintf("achieved %.0f/s < %.0f%%", a, 100*satAchieved))
	}
	if r.sentErrRate() > maxErrRate {
		why = append(why, fmt.Sprintf("errors %.2f%%", 100*r.sentErrRate()))
	}
	if m := satMetric(mode, r); len(m) > 0 {
		if added := pct(m, .99) - pct(satMetric(mode, d), .99); added >= satAddedP99 {
			why = append(why, fmt.Sprintf("added p99 %s ms >= +%s", plusMS(added), ms(satAddedP99)))
		}
	}
	return strings.Join(why, ", ")
}

// cpuPer is a path's CPU per successful request at a step, in us, for the named processes.
func (st *satStep) cpuPer(path string, names ...string) float64 {
	var d time.Duration
	for _, n := range names {
		d += st.cpu[path][n]
	}
	return perReq(d, st.res[path])
}

// at is the last step at rate that loaded path (nil if none did): its second try, if it had one.
func (c *satCurve) at(rate int, path string) *satStep {
	var at *satStep
	for _, st := range c.steps {
		if st.rate == rate && st.res[path] != nil {
			at = st
		}
	}
	return at
}

// gatewayCPU is the gateway's own processes on path: Envoy alone, or Envoy + Tollway.
func gatewayCPU(path string) []string {
	if path == pathTollway {
		return []string{procEnvoy, procTollway}
	}
	return []string{procEnvoy}
}

func reportCurve(w io.Writer, o *options, c *satCurve) {
	what, metric := "plain chat", "p99"
	if c.mode == "streams" {
		what, metric = fmt.Sprintf("streams of %d-event answers (fake: %s between chunks; tollway's on %s)", c.events, o.chunkDelay, o.streamLane()), "first p99"
	}
	fmt.Fprintf(w, "\n== saturation, %s: offered rate stepped up; direct, envoy alone and billing-on tollway in turns, %s each (longer at low rates, up to 3x, for %d requests) after a %s warm-up; saturated at the first step with added %s >= +%s ms over direct, achieved < %.0f%% of offered, or > %.1f%% errors ==\n",
		what, o.satStep, satSamples, satWarmup, metric, ms(satAddedP99), 100*satAchieved, 100*maxErrRate)
	fmt.Fprintf(w, "%11s %-20s %8s %8s %9s %9s %9s  %6s %7s %6s %6s  %-22s %s\n", "offered /s", "path", "sent/s", "ok/s", "p50 ms", metric+" ms", "added", "envoy", "tollway", "fake", "bench", "errors", "saturated")
	for _, st := range c.steps {
		for _, p := range satPaths {
			r := st.res[p]
			if r == nil {
				continue
			}
			m := satMetric(c.mode, r)
			added := "-"
			if d := st.res[pathDirect]; p != pathDirect && len(m) > 0 {
				added = plusMS(pct(m, .99) - pct(satMetric(c.mode, d), .99))
			}
			cell := func(n string) string {
				if _, ok := st.cpu[p][n]; !ok {
					return "-"
				}
				return fmt.Sprintf("%.0f", st.cpuPer(p, n))
			}
			offered := fmt.Sprint(st.rate)
			if st.again {
				offered += " again"
			}
			fmt.Fprintf(w, "%11s %-20s %8.1f %8.1f %9s %9s %9s  %6s %7s %6s %6s  %-22s %s\n", offered, label(p), r.sentRate, achieved(r),
				ms(pct(m, .5)), ms(pct(m, .99)), added, cell(procEnvoy), cell(procTollway), cell(procFake), cell(procBench), errCell(r), st.why[p])
		}
	}
	fmt.Fprintf(w, "(CPU in us per successful request; ok/s: served over the time offered; a path is not loaded past the step it saturated at)\n")
	tw, env := c.under[pathTollway], c.under[pathEnvoy]
	fmt.Fprintf(w, "saturation %s: tollway %s, envoy alone %s (ratio %s)\n", c.mode, satRate(c, pathTollway), satRate(c, pathEnvoy), c.ratio())
	unit := "request"
	if c.mode == "streams" {
		unit = "stream"
	}
	if twAt, envAt := c.at(tw, pathTollway), c.at(env, pathEnvoy); twAt != nil && envAt != nil {
		fmt.Fprintf(w, "  CPU per %s, each at its own saturation rate: %s\n", unit, cpuVersus(twAt, envAt))
	}
	if common := min(tw, env); common > 0 && tw != env {
		fmt.Fprintf(w, "  CPU per %s, both at %d/s: %s\n", unit, common, cpuVersus(c.at(common, pathTollway), c.at(common, pathEnvoy)))
	}
	if c.mode == "plain" {
		fmt.Fprintf(w, "  issue 30's target: saturation rate at least 70%% of envoy alone's: %s\n", verdict(env > 0 && float64(tw) >= 0.7*float64(env)))
		if t, e := c.at(1000, pathTollway), c.at(1000, pathEnvoy); t != nil && e != nil {
			a, b := t.cpuPer(pathTollway, gatewayCPU(pathTollway)...), e.cpuPer(pathEnvoy, gatewayCPU(pathEnvoy)...)
			fmt.Fprintf(w, "  at 1000/s: envoy + tollway %.0f us a request vs envoy alone %.0f us (%.2fx); issue 30's target at most 2.5x: %s\n", a, b, a/max(b, 1), verdict(a <= 2.5*b))
		}
	}
}

// cpuVersus is Tollway's processes' CPU per request at step t against Envoy alone's at step e,
// the fake's and the bench's beside them.
func cpuVersus(t, e *satStep) string {
	a, b := t.cpuPer(pathTollway, gatewayCPU(pathTollway)...), e.cpuPer(pathEnvoy, gatewayCPU(pathEnvoy)...)
	return fmt.Sprintf("envoy + tollway %.0f us (envoy %.0f + tollway %.0f) at %d/s vs envoy alone %.0f us at %d/s (ratio %.2fx); fake %.0f vs %.0f us; bench (client) %.0f vs %.0f us",
		a, t.cpuPer(pathTollway, procEnvoy), t.cpuPer(pathTollway, procTollway), t.rate, b, e.rate, a/max(b, 1),
		t.cpuPer(pathTollway, procFake), e.cpuPer(pathEnvoy, procFake), t.cpuPer(pathTollway, procBench), e.cpuPer(pathEnvoy, procBench))
}

// satRate says a gateway's saturation rate: the last step under the limits, "under" the first
// step when it saturated there, ">=" the last one when it never did.
func satRate(c *satCurve, path string) string {
	switch r := c.under[path]; {
	case r == 0 && len(c.steps) > 0:
		return fmt.Sprintf("under %d/s", c.steps[0].rate)
	case !c.saturate[path] && c.directShort > 0:
		return fmt.Sprintf(">= %d/s (direct itself fell short at %d/s)", r, c.directShort)
	case !c.saturate[path]:
		return fmt.Sprintf(">= %d/s (not saturated at the highest step)", r)
	default:
		return fmt.Sprintf("%d/s", r)
	}
}

// ratio is tollway's saturation rate over envoy alone's; a rate that is only a bound (never
// saturated: at least) makes the ratio one.
func (c *satCurve) ratio() string {
	tw, env := c.under[pathTollway], c.under[pathEnvoy]
	switch {
	case tw <= 0 || env <= 0 || !c.saturate[pathTollway] && !c.saturate[pathEnvoy]:
		return "-"
	case !c.saturate[pathEnvoy]:
		return fmt.Sprintf("<= %.2fx", float64(tw)/float64(env))
	case !c.saturate[pathTollway]:
		return fmt.Sprintf(">= %.2fx", float64(tw)/float64(env))
	}
	return fmt.Sprintf("%.2fx", float64(tw)/float64(env))
}

// streamChunkCost is the streams scenario's CPU per extra chunk at the rate both gateways
// stayed under (else the first step's): the short answer loaded at it on each, set against the
// long answer's step.
func streamChunkCost(ctx context.Context, o *options, w, stderr io.Writer, s *satSetup, c *satCurve, short func(*target, int, time.Duration) *result, shortEvents int) {
	rate := min(c.under[pathTollway], c.under[pathEnvoy])
	if rate == 0 && len(c.steps) > 0 {
		rate = c.steps[0].rate
	}
	if c.at(rate, pathTollway) == nil || c.at(rate, pathEnvoy) == nil || c.events <= shortEvents {
		fmt.Fprintf(w, "  CPU per extra chunk: not measured (no step loaded both gateways)\n")
		return
	}
	slope := map[string]float64{}
	for _, p := range satGateways {
		fmt.Fprintf(stderr, "bench: saturation streams %d/s %s, %d-event answers ...\n", rate, label(p), shortEvents)
		r, cpu := measureStep(ctx, s.targets[p], s.procs[p], rate, stepTime(o, rate), short)
		if r.lost() > 0 {
			fmt.Fprintf(w, "  CPU per extra chunk: %s lost %d of %d short streams at %d/s: %s\n", label(p), r.lost(), r.requests, rate, errCell(r))
			return
		}
		var d time.Duration
		for _, n := range gatewayCPU(p) {
			d += cpu[n]
		}
		slope[p] = (c.at(rate, p).cpuPer(p, gatewayCPU(p)...) - perReq(d, r)) / float64(c.events-shortEvents)
	}
	fmt.Fprintf(w, "  CPU per extra chunk at %d/s (%d- against %d-event answers): envoy + tollway %.1f us vs envoy alone %.1f us (%+.1f us; issue 30's target within +5 us: %s)\n",
		rate, c.events, shortEvents, slope[pathTollway], slope[pathEnvoy], slope[pathTollway]-slope[pathEnvoy], verdict(slope[pathTollway]-slope[pathEnvoy] <= 5))
}
