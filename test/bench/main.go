// Command bench measures what Tollway adds to a chat request. The same fixed-rate (open model)
// load goes, back to back in one run, straight to a fake provider, through a plain Envoy with
// the same binary, and through `tollway run`; it prints latency percentiles, throughput, errors,
// the overheads against the target (<= 1 ms at p50, <= 3 ms at p99 over direct) and the memory
// of the Tollway process. `make bench` runs it with the defaults.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/fakeupstream"
)

const (
	providerKey = "sk-bench-provider-secret"
	modelID     = "gpt-4o-mini"
	maxErrRate  = 0.005
	// Target: what Tollway may add over calling the provider directly at the default rate.
	targetP50 = 1 * time.Millisecond
	targetP99 = 3 * time.Millisecond
	targetRSS = 100e6 // bytes

	tollwayProc = "tollway (ext_proc)" // the Go process: ext_proc, xDS and admin servers
	selfProc    = "bench (client+fake)"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	rate        int
	duration    time.Duration
	warmup      time.Duration
	chunkDelay  time.Duration
	timeout     time.Duration
	maxInFlight int
	paths       []string
	modes       []string
	tollwayBin  string
	envoyBin    string
	tollwayEnv  []string
	envoyStats  bool
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rate, "rate", 500, "requests per second, fixed (open model)")
	fs.DurationVar(&o.duration, "duration", 8*time.Second, "measured duration of each scenario")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up before each scenario, at the same rate; results discarded")
	fs.DurationVar(&o.chunkDelay, "chunk-delay", time.Millisecond, "fake provider's pause between streamed chunks")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.IntVar(&o.maxInFlight, "max-inflight", 2000, "streaming: cap on concurrent requests (over it counts as an error)")
	only := fs.String("only", "direct,envoy,tollway", "comma-separated paths to measure: direct, envoy, tollway")
	modes := fs.String("modes", "chat,stream", "comma-separated modes: chat (non-streaming), stream")
	fs.StringVar(&o.tollwayBin, "tollway", cmpStr(os.Getenv("TOLLWAY_BIN"), "bin/tollway"), "tollway binary")
	fs.StringVar(&o.envoyBin, "envoy", "", "envoy binary (default: $ENVOY_BIN, $TOLLWAY_ENVOY_BIN, tools/, PATH)")
	fs.Var((*listFlag)(&o.tollwayEnv), "tollway-env", "extra KEY=VALUE for the tollway process, e.g. GOMAXPROCS=1 (repeatable)")
	fs.BoolVar(&o.envoyStats, "envoy-stats", true, "print Envoy's own timings and ext_proc counters per scenario")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.paths, o.modes = strings.Split(*only, ","), strings.Split(*modes, ",")
	for _, p := range o.paths {
		if !slices.Contains([]string{"direct", "envoy", "tollway"}, p) {
			return nil, fmt.Errorf("-only: unknown path %q", p)
		}
	}
	for _, m := range o.modes {
		if m != "chat" && m != "stream" {
			return nil, fmt.Errorf("-modes: unknown mode %q", m)
		}
	}
	if o.rate <= 0 || o.duration < time.Second || o.warmup < 0 || o.maxInFlight <= 0 {
		return nil, errors.New("need -rate > 0, -duration >= 1s, -warmup >= 0, -max-inflight > 0")
	}
	return o, nil
}

var (
	chatBody   = []byte(`{"model":"` + modelID + `","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words"}],"max_tokens":32,"temperature":0.2}`)
	streamBody = []byte(`{"model":"` + modelID + `","stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words"}],"max_tokens":32,"temperature":0.2}`)
)

// scenario is one mode on one path, measured.
type scenario struct {
	mode, path string
	res        *result
	warmErrs   int
	cpu        map[string]time.Duration // per process, over the measured window
	counters   []counterDelta           // Envoy's, over the measured window
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.envoyBin, err = envoy.FindBinary(o.envoyBin); err != nil {
		return err
	}
	if _, err := os.Stat(o.tollwayBin); err != nil && slices.Contains(o.paths, "tollway") {
		return fmt.Errorf("tollway binary: %w (run `make build` or set TOLLWAY_BIN)", err)
	}
	dir, err := os.MkdirTemp("", "tollway-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintln(stdout, machine(o.envoyBin))
	fmt.Fprintf(stdout, "load: %d req/s fixed rate for %s per scenario after a %s warm-up (discarded); fake provider chunk delay %s; HTTP/1.1 keep-alive client\n",
		o.rate, o.duration, o.warmup, o.chunkDelay)

	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	self := proc{selfProc, os.Getpid()}

	var targets []*target
	procs := map[string][]proc{}
	admins := map[string]string{} // path -> Envoy admin socket
	for _, p := range o.paths {
		switch p {
		case "direct":
			targets = append(targets, &target{name: p, baseURL: fake.URL(), auth: providerKey})
			procs[p] = []proc{self}
		case "envoy":
			pe, err := startPlainEnvoy(ctx, o.envoyBin, filepath.Join(dir, "envoy"), fake.Addr())
			if err != nil {
				return err
			}
			defer pe.proc.Stop()
			targets = append(targets, &target{name: p, baseURL: pe.baseURL, auth: providerKey})
			procs[p] = []proc{self, {"envoy alone", pe.proc.Pid()}}
			admins[p] = pe.admin
		case "tollway":
			tw, err := startTollway(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, "tollway"), fake.URL(), o.tollwayEnv)
			if err != nil {
				return err
			}
			defer tw.stop()
			key, err := tw.newKey(ctx)
			if err != nil {
				return err
			}
			targets = append(targets, &target{name: p, baseURL: tw.baseURL, auth: key})
			procs[p] = []proc{self, {"tollway's envoy", tw.EnvoyPID}, {tollwayProc, tw.Pid()}}
			admins[p] = tw.envoyAdmin()
		}
	}
	for _, t := range targets {
		t.client = newClient(o.timeout)
		if err := probe(ctx, t, chatBody); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-8s %s\n", t.name, t.baseURL)
	}

	var all []*scenario
	for _, mode := range o.modes {
		for _, t := range targets {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stderr, "bench: %s %s ...\n", mode, t.name)
			s := &scenario{mode: mode, path: t.name, cpu: map[string]time.Duration{}}
			load := func(d time.Duration) *result {
				if mode == "chat" {
					return attackChat(ctx, t, chatBody, o.rate, d)
				}
				return attackStream(ctx, t, streamBody, o.rate, d, o.maxInFlight)
			}
			if o.warmup > 0 {
				s.warmErrs = load(o.warmup).errors
			}
			var before map[string]int64
			if o.envoyStats {
				before = envoyCounters(admins[t.name])
			}
			ps := procs[t.name]
			c0 := cpuSnapshot(ps)
			s.res = load(o.duration)
			for i, c := range cpuSnapshot(ps) {
				s.cpu[ps[i].name] = c - c0[i]
			}
			if o.envoyStats {
				s.counters = counterDeltas(before, envoyCounters(admins[t.name]))
			}
			all = append(all, s)
			time.Sleep(300 * time.Millisecond) // let the last connections settle before the next path
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	report(stdout, o, all)
	printMemory(stdout, procs)
	var bad []string
	for _, s := range all {
		if s.res.errRate() > maxErrRate {
			bad = append(bad, fmt.Sprintf("%s/%s %.2f%%", s.mode, s.path, 100*s.res.errRate()))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("error rate over %.1f%%: %s", 100*maxErrRate, strings.Join(bad, ", "))
	}
	return nil
}
