// Command bench measures what Tollway adds to a chat request and what its billing costs, and
// the rest of `make bench`'s scenarios: the store, replicas on Postgres (cluster), fallback, media tasks, x402, metrics and the
// access log, tracing, streams, the saturation curve, LiteLLM beside Tollway, and the soak.
//
// Latency (-scenarios latency): the same fixed-rate (open model) load goes, back to back in one
// run, straight to a fake provider, through a plain Envoy with the same binary, through `tollway
// run` with billing off and through `tollway run` with billing on (a priced model, a funded
// account: every request is admitted against a hold and metered from the response). It prints
// latency percentiles, throughput, errors, the overheads against the targets (<= 1 ms at p50,
// <= 3 ms at p99 over direct; admission + metering < 200 us at p50 over billing off) and the
// memory of the Tollway processes (< 100 MB).
//
// Settlement (-scenarios settle): Tollway with billing on at a high fixed rate, end to end
// through its Envoy; then the money path alone: the bench speaks ext_proc to the same Tollway
// as Envoy would (-money-rate, target >= 5,000 settled requests/s). Durable usage records
// written per second, read back from the admin API. After all load, every successful billed
// request must have left exactly one durable record.
//
// -compare PATH adds a path to latency (and, named in -peer-paths, to peers): billing-on Tollway
// from another binary, taking turns with the others in the same rounds, so a change is judged
// against the binary before it under the same machine noise.
//
// Store (-scenarios store): the gateway's settler alone, in process: records queued as fast as
// goroutines can, made durable in grouped transactions (durable settles per second; target >= 5,000/s).
//
// Cluster (-scenarios cluster, cluster.go): a private PostgreSQL (store/postgres/pgtest;
// -pg-bin), three billing-on replicas on one database each with its own Envoy, and three
// billing-on Tollways on bbolt (a file and an Envoy each), all in this run; the same fixed-rate
// load (-cluster-rate, 500/s) round-robin across the replicas, at one bbolt gateway, round-robin
// across the three (bbolt x3), at one replica alone (postgres x1) and direct, in turns: added
// p50/p99, postgres - bbolt x3 (the store at the same topology: target <= +0.10 ms at p50),
// postgres x1 - bbolt (the store, one pair each) and bbolt x3 - bbolt (the spreading over three
// Envoy+Tollway pairs), postgres - bbolt (both mixed); records shipped to the database vs served;
// the database's transactions per request beyond idle (pg_stat_database); one replica's money
// path alone, settled, spooled and shipped (target >= 5,000/s).
//
// Streams (-scenarios streams, streams.go): CPU per streamed chunk, and the memory of 1,000
// streams held open. Saturation (saturation.go): the offered rate stepped up, plain and streamed,
// until Envoy alone and Tollway each stop keeping added p99 under +5 ms. Peers (peers.go):
// LiteLLM's proxy beside Tollway. Soak (soak.go): ten minutes at a steady rate.
//
// Load the bench's own in-flight cap (-max-inflight) keeps from being sent is shed, reported
// apart from errors: it fails the scenarios whose rate is meant to be served (latency, streams,
// peers), not those that offer more than the machine takes on purpose (the money path, saturation).
//
// `make bench` runs all of it with the defaults but the saturation curve and the soak, which are
// asked for by name.
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
	"runtime"
	"slices"
	"strconv"
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
	// Target: what admission + metering may add at p50 (billing on - billing off).
	targetBillingP50 = 200 * time.Microsecond
	// Target: durable settles per second of the store alone, and settled requests per second of
	// the gateway's money path.
	targetStoreSettles = 5000
	targetSettled      = 5000

	tollwayProc = "tollway (ext_proc)" // the Go process: ext_proc, xDS and admin servers
	selfProc    = "bench (client+fake)"
)

// The paths a request can take. tollway is billing on, the default configuration (its
// OpenAI-shaped streams on the fast lane).
const (
	pathDirect     = "direct"
	pathEnvoy      = "envoy"
	pathTollwayOff = "tollway-off"
	pathTollway    = "tollway"
	pathCompare    = "compare" // billing on, as tollway, but started from the -compare binary
	// pathTollwayChunk is billing-on Tollway with routing.fast_lane: false: every stream on the
	// chunk lane, through ext_proc chunk by chunk (the streams scenario, beside the default fast
	// lane of pathTollway).
	pathTollwayChunk = "tollway-chunk"
)

// fastLaneEnv is the environment that sets routing.fast_lane (true by default).
const fastLaneEnv = "TOLLWAY_ROUTING_FAST_LANE"

// streamLane says which lane the tollway processes' streams take: the default fast lane, unless
// -tollway-env turned it off.
func (o *options) streamLane() string {
	for _, kv := range slices.Backward(o.tollwayEnv) {
		if v, ok := strings.CutPrefix(kv, fastLaneEnv+"="); ok {
			if on, err := strconv.ParseBool(v); err == nil && !on {
				return "the chunk lane (" + fastLaneEnv + "=false)"
			}
			break
		}
	}
	return "the fast lane (the default)"
}

var allPaths = []string{pathDirect, pathEnvoy, pathTollwayOff, pathTollway}

// label is how a path is shown in the tables.
func label(path string) string {
	switch path {
	case pathTollway:
		return "tollway (billing on)"
	case pathTollwayOff:
		return "tollway (billing off)"
	case pathCompare:
		return "compare (billing on)"
	case pathTollwayChunk:
		return "tollway (chunk lane)"
	}
	return path
}

var allScenarios = []string{"latency", "settle", "store", "cluster", "fallback", "tasks", "x402", "observe", "tracing", "streams", "saturation", "peers", "soak"}

// defaultScenarios is everything but the saturation curve (about two minutes on a shared 2-core
// host: make bench would pass 12) and the soak, whose ten minutes are its point: both asked for
// by name.
var defaultScenarios = slices.DeleteFunc(slices.Clone(allScenarios), func(s string) bool { return s == "saturation" || s == "soak" })

func main() {
	if d := os.Getenv(fakeChildEnv); d != "" { // the saturation curve's fake provider (fakeproc.go)
		if err := serveFakeChild(d); err != nil {
			fmt.Fprintf(os.Stderr, "bench: fake provider: %v\n", err)
			os.Exit(1)
		}
		return
	}
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
	rounds      int
	paths       []string
	modes       []string
	scenarios   []string
	tollwayBin  string
	compareBin  string // -compare: "" is off
	envoyBin    string
	tollwayEnv  []string
	envoyStats  bool
	stateDir    string

	settleRate     int
	moneyRate      int
	settleDuration time.Duration
	settleWait     time.Duration
	storeProducers int
	storeDuration  time.Duration
	openTasks      int
	callbacks      int
	taskRate       int
	x402Requests   int
	// observeDuration is the observe scenario's measured time per side.
	observeDuration time.Duration
	// saturation: the offered rates stepped through (plain, streams) and the measured time per path and step
	satRates, satStreamRates []int
	satStep                  time.Duration
	// cluster: the rate round-robin across the replicas (and at bbolt, and direct), the measured
	// time per path, the directory of PostgreSQL's initdb and pg_ctl.
	clusterRate     int
	clusterPaths    []string
	clusterDuration time.Duration
	pgBin           string

	// peers
	peerPaths    []string
	peerRates    []int
	lowRates     []int
	peerDuration time.Duration
	// soak: the steady rate, how long, how often to sample.
	soakRate                int
	soakDuration, soakEvery time.Duration
	peerRounds              int
	// streams: the rate of the chunk measurement, its time per path and length, streams held open
	streamRate     int
	streamDuration time.Duration
	openStreams    int
	holdAfter      []int
	holdPause      time.Duration
	lowRequests    int
	idle           time.Duration
	litellmBin     string
	litellmWorkers int
	profileSeconds int
	profileDir     string
}

func (o *options) has(scenario string) bool { return slices.Contains(o.scenarios, scenario) }

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := fs.String("scenarios", strings.Join(defaultScenarios, ","),
		"comma-separated scenarios: latency (paths x modes at -rate), settle (billing-on Tollway at -settle-rate, durable records/s), store (the gateway's settler alone, in process), cluster (three replicas on one PostgreSQL vs one and three bbolt gateways at -cluster-rate: added latency, shipping, database transactions, one replica's money path), fallback, tasks (media task poller and callbacks, in process), x402, observe (the cost of metrics + access log: on vs off), tracing (the cost of OpenTelemetry tracing: off vs sampled at 1.0 and 0.01, to an OTLP receiver on loopback), streams (CPU per chunk, open streams' memory), saturation (the offered rate stepped up until Envoy alone and Tollway stop keeping added p99 under +5 ms: plain and streamed, CPU per request), peers (LiteLLM's proxy beside Tollway at -peer-rates and -low-rates, idle CPU, profiles), soak (a steady load for -soak-duration: heap, goroutines, fds, RSS, store size); saturation and soak are not in the default set")
	peerPathsFlag := fs.String("peer-paths", strings.Join(peerPaths, ","), "peers: comma-separated paths: "+strings.Join(peerPaths, ", ")+" (tollway = billing on), and compare with -compare")
	peerRates := fs.String("peer-rates", "200,500,1000", "peers: comma-separated rates, req/s")
	satRates := fs.String("saturation-rates", "100,250,500,1000,1500,2000,3000,4000,5000", "saturation: plain chat's offered rates, req/s, stepped up until both gateways saturate")
	satStreamRates := fs.String("saturation-stream-rates", "25,50,100,200,300,400,600", "saturation: streams' offered rates (the streams scenario's long answer), stepped up until both gateways saturate")
	fs.DurationVar(&o.satStep, "saturation-step", 2*time.Second, "saturation: measured time per path and step (after a 0.5s warm-up); longer at low rates, up to 3x, so a step has 200 requests")
	lowRates := fs.String("low-rates", "20,50", "peers: comma-separated low rates, req/s, each run for -low-requests per path and mode (empty: none)")
	fs.IntVar(&o.soakRate, "soak-rate", 200, "soak: requests per second, steady")
	fs.DurationVar(&o.soakDuration, "soak-duration", 10*time.Minute, "soak: how long the steady load runs")
	fs.DurationVar(&o.soakEvery, "soak-every", 10*time.Second, "soak: time between samples of heap, goroutines, fds, RSS and store size")
	fs.DurationVar(&o.peerDuration, "peer-duration", 3*time.Second, "peers: measured time per path, mode and rate in -peer-rates")
	fs.IntVar(&o.peerRounds, "peer-rounds", 2, "peers: rounds the paths take turns in")
	fs.IntVar(&o.streamRate, "stream-rate", 50, "streams: streamed answers per second, short and long, per path")
	fs.DurationVar(&o.streamDuration, "stream-duration", 3*time.Second, "streams: measured time per path and answer length, split into -peer-rounds")
	fs.IntVar(&o.openStreams, "open-streams", 1000, "streams: streams held open at once for the memory figure (0: not measured)")
	holdAfter := fs.String("hold-after", "1,300", "streams: comma-separated: the events each held stream passes before the provider pauses it, one measurement each (1: at its first event; more: mid-answer)")
	fs.DurationVar(&o.holdPause, "hold-pause", 0, "streams: how long held streams stay open after their memory is read, to take a heap profile (TOLLWAY_PPROF=1); under 50s")
	fs.IntVar(&o.lowRequests, "low-requests", 160, "peers: requests per path and mode at each of -low-rates")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "peers: how long the idle gateways' CPU is measured (0: not)")
	fs.StringVar(&o.litellmBin, "litellm", "", "peers: the litellm proxy command (default $TOLLWAY_LITELLM, tools/litellm/bin/litellm)")
	fs.IntVar(&o.litellmWorkers, "litellm-workers", runtime.NumCPU(), "peers: LiteLLM worker processes (default: one per core, as its docs advise)")
	fs.IntVar(&o.profileSeconds, "profile-seconds", 5, "peers: CPU and allocation profile window of billing-on Tollway at the highest -peer-rates (0: none)")
	fs.StringVar(&o.profileDir, "profile-dir", "", "peers: where the profiles go (default a new directory under $TMPDIR)")
	fs.IntVar(&o.rate, "rate", 500, "latency: requests per second, fixed (open model)")
	fs.IntVar(&o.clusterRate, "cluster-rate", 500, "cluster: requests per second, fixed (open model), round-robin across the replicas; the same at the bbolt gateway and direct")
	fs.DurationVar(&o.clusterDuration, "cluster-duration", 8*time.Second, "cluster: measured time per path (direct, bbolt, bbolt x3, postgres, postgres x1), split into -rounds")
	clusterPathsFlag := fs.String("cluster-paths", strings.Join(clusterPaths, ","), "cluster: comma-separated paths the rounds take turns in: "+strings.Join(clusterPaths, ", ")+" (a longer look at two: -cluster-paths 'bbolt,postgres x1' -cluster-duration 40s)")
	fs.StringVar(&o.pgBin, "pg-bin", os.Getenv("TOLLWAY_PG_BIN"), "cluster: the directory of PostgreSQL's initdb and pg_ctl (default $TOLLWAY_PG_BIN, else the newest /usr/lib/postgresql/N/bin)")
	fs.IntVar(&o.openTasks, "tasks", 10000, "tasks: open media tasks one poll round goes over")
	fs.IntVar(&o.callbacks, "callbacks", 5000, "tasks: callbacks delivered from the outbox")
	fs.IntVar(&o.taskRate, "task-rate", 50, "tasks: video task creations per second, through Tollway and directly")
	fs.DurationVar(&o.observeDuration, "observe-duration", 4*time.Second, "observe and tracing: measured time per side (metrics + access log on, both off; tracing off, 1.0, 0.01), in 4 alternating rounds")
	fs.IntVar(&o.x402Requests, "x402-requests", 40, "x402: keyed, 402 and paid requests measured, one at a time")
	fs.DurationVar(&o.duration, "duration", 8*time.Second, "latency: measured duration of each scenario (path x mode)")
	// Short alternating rounds cancel the machine's drift: with 2 rounds, two identical gateways
	// measured up to 170 us apart at p50; with 8 rounds of 1s, within 20 us.
	fs.IntVar(&o.rounds, "rounds", 8, "latency: split each scenario's -duration into this many rounds, the paths taking turns")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up before each scenario, at the same rate; results discarded (settle: at most 1s)")
	fs.DurationVar(&o.chunkDelay, "chunk-delay", time.Millisecond, "fake provider's pause between streamed chunks")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.IntVar(&o.maxInFlight, "max-inflight", 2000, "streaming, the money path and saturation: cap on the bench's own concurrent requests; one over it is not sent and reported as shed, which fails latency, streams and peers (their rate is meant to be served) but not the money path's ceiling or the saturation curve")
	only := fs.String("only", strings.Join(allPaths, ","), "latency: comma-separated paths to measure: "+strings.Join(allPaths, ", ")+" (tollway = billing on)")
	modes := fs.String("modes", "chat,stream", "latency: comma-separated modes: chat (non-streaming), stream")
	fs.IntVar(&o.settleRate, "settle-rate", 2000, "settle: non-streaming requests per second to Tollway with billing on")
	fs.IntVar(&o.moneyRate, "money-rate", 2*targetSettled, "settle: served requests per second sent straight to billing-on Tollway's ext_proc (the money path alone)")
	fs.DurationVar(&o.settleDuration, "settle-duration", 5*time.Second, "settle: measured duration")
	fs.DurationVar(&o.settleWait, "settle-wait", 15*time.Second, "how long durable records may take to catch up with the requests served")
	fs.IntVar(&o.storeProducers, "store-producers", 64, "store: goroutines queueing records into the settler")
	fs.DurationVar(&o.storeDuration, "store-duration", 3*time.Second, "store: duration")
	fs.StringVar(&o.tollwayBin, "tollway", cmpStr(os.Getenv("TOLLWAY_BIN"), "bin/tollway"), "tollway binary")
	fs.StringVar(&o.compareBin, "compare", "", "a second tollway binary: latency gains a path \"compare\", billing-on Tollway started from it, taking turns with the others (peers: name it in -peer-paths)")
	fs.StringVar(&o.envoyBin, "envoy", "", "envoy binary (default: $ENVOY_BIN, $TOLLWAY_ENVOY_BIN, tools/, PATH)")
	fs.Var((*listFlag)(&o.tollwayEnv), "tollway-env", "extra KEY=VALUE for the tollway processes, e.g. GOMAXPROCS=1 (repeatable)")
	fs.StringVar(&o.stateDir, "state-dir", "", "where the gateways' stores and sockets go (default $TMPDIR); /dev/shm takes fsync's cost out, for diagnosis")
	fs.BoolVar(&o.envoyStats, "envoy-stats", true, "print Envoy's ext_proc and connection counters per scenario")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.paths, o.modes, o.scenarios = strings.Split(*only, ","), strings.Split(*modes, ","), strings.Split(*scenarios, ",")
	o.peerPaths = strings.Split(*peerPathsFlag, ",")
	o.clusterPaths = strings.Split(*clusterPathsFlag, ",")
	for _, p := range o.clusterPaths {
		if !slices.Contains(clusterPaths, p) {
			return nil, fmt.Errorf("-cluster-paths: unknown path %q (want %s)", p, strings.Join(clusterPaths, ", "))
		}
	}
	for _, p := range o.peerPaths {
		if err := o.knownPath(p, peerPaths); err != nil {
			return nil, fmt.Errorf("-peer-paths: %w", err)
		}
	}
	if !slices.Contains(o.peerPaths, pathTollway) {
		o.peerPaths = append(o.peerPaths, pathTollway) // the profile and the usage check need it
	}
	var err error
	if o.peerRates, err = parseRates(*peerRates); err != nil {
		return nil, fmt.Errorf("-peer-rates: %w", err)
	}
	if o.lowRates, err = parseRates(*lowRates); err != nil {
		return nil, fmt.Errorf("-low-rates: %w", err)
	}
	if o.satRates, err = parseRates(*satRates); err != nil || len(o.satRates) == 0 || !slices.IsSorted(o.satRates) {
		return nil, fmt.Errorf("-saturation-rates: want rising rates: %v", err)
	}
	if o.satStreamRates, err = parseRates(*satStreamRates); err != nil || len(o.satStreamRates) == 0 || !slices.IsSorted(o.satStreamRates) {
		return nil, fmt.Errorf("-saturation-stream-rates: want rising rates: %v", err)
	}
	if o.satStep < time.Second {
		return nil, errors.New("need -saturation-step >= 1s")
	}
	if o.peerDuration < time.Second || o.peerRounds < 1 || o.lowRequests < 1 || o.litellmWorkers < 1 || o.profileSeconds < 0 || o.idle < 0 {
		return nil, errors.New("need -peer-duration >= 1s, -peer-rounds >= 1, -low-requests >= 1, -litellm-workers >= 1, -profile-seconds >= 0, -idle >= 0")
	}
	if o.holdAfter, err = parseRates(*holdAfter); err != nil {
		return nil, fmt.Errorf("-hold-after: %w", err)
	}
	if o.streamRate < 1 || o.streamDuration < time.Second || o.openStreams < 0 || o.holdPause < 0 || o.holdPause >= 50*time.Second {
		return nil, errors.New("need -stream-rate >= 1, -stream-duration >= 1s, -open-streams >= 0, -hold-pause from 0 to under 50s")
	}
	if o.soakRate < 1 || o.soakDuration < time.Second || o.soakEvery < time.Second || o.soakEvery > o.soakDuration {
		return nil, errors.New("need -soak-rate >= 1, -soak-duration >= 1s, -soak-every from 1s to -soak-duration")
	}
	for _, p := range o.paths {
		if err := o.knownPath(p, allPaths); err != nil {
			return nil, fmt.Errorf("-only: %w", err)
		}
	}
	if o.compareBin != "" && !slices.Contains(o.paths, pathCompare) {
		o.paths = append(o.paths, pathCompare) // after tollway by default: the two take adjacent turns
	}
	for _, m := range o.modes {
		if m != "chat" && m != "stream" {
			return nil, fmt.Errorf("-modes: unknown mode %q", m)
		}
	}
	for _, sc := range o.scenarios {
		if !slices.Contains(allScenarios, sc) {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (want %s)", sc, strings.Join(allScenarios, ", "))
		}
	}
	if o.rate <= 0 || o.duration < time.Second || o.warmup < 0 || o.maxInFlight <= 0 || o.rounds < 1 || o.duration/time.Duration(max(1, o.rounds)) < time.Second {
		return nil, errors.New("need -rate > 0, -duration >= 1s, -rounds >= 1 with -duration/-rounds >= 1s, -warmup >= 0, -max-inflight > 0")
	}
	if o.clusterRate <= 0 || o.clusterDuration/time.Duration(o.rounds) < time.Second {
		return nil, errors.New("need -cluster-rate > 0 and -cluster-duration/-rounds >= 1s")
	}
	if o.observeDuration < observeRounds*time.Second {
		return nil, fmt.Errorf("need -observe-duration >= %ds (%d rounds of at least 1s)", observeRounds, observeRounds)
	}
	if o.taskRate <= 0 {
		return nil, errors.New("need -task-rate > 0")
	}
	if o.settleRate <= 0 || o.moneyRate <= 0 || o.settleDuration < time.Second || o.settleWait < time.Second || o.storeProducers <= 0 || o.storeDuration < time.Second {
		return nil, errors.New("need -settle-rate > 0, -settle-duration >= 1s, -settle-wait >= 1s, -store-producers > 0, -store-duration >= 1s")
	}
	return o, nil
}

// knownPath checks a path named in -only or -peer-paths: one of valid, or compare with -compare.
func (o *options) knownPath(p string, valid []string) error {
	switch {
	case slices.Contains(valid, p):
		return nil
	case p == pathCompare && o.compareBin == "":
		return errors.New("path compare needs -compare PATH")
	case p == pathCompare:
		return nil
	}
	return fmt.Errorf("unknown path %q (want %s)", p, strings.Join(valid, ", "))
}

// binFor is the tollway binary a path runs: compare's is -compare.
func (o *options) binFor(path string) string {
	if path == pathCompare {
		return o.compareBin
	}
	return o.tollwayBin
}

// isTollway tells the paths that run `tollway run` (and its Envoy) from the others.
func isTollway(path string) bool {
	return path == pathTollway || path == pathTollwayOff || path == pathCompare
}

// binNote names the binary after a Tollway target's address when two binaries are in the run.
func (o *options) binNote(path string) string {
	if o.compareBin == "" || !isTollway(path) {
		return ""
	}
	return "  (" + o.binFor(path) + ")"
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
	// The gateways to start: the latency paths, and billing-on Tollway for the settle scenario.
	var paths []string
	if o.has("latency") {
		paths = slices.Clone(o.paths)
	}
	if o.has("settle") && !slices.Contains(paths, pathTollway) {
		paths = append(paths, pathTollway)
	}
	if len(paths) > 0 || o.has("tasks") || o.has("fallback") || o.has("x402") || o.has("observe") || o.has("tracing") || o.has("cluster") || o.has("streams") || o.has("saturation") || o.has("peers") || o.has("soak") {
		if o.envoyBin, err = envoy.FindBinary(o.envoyBin); err != nil {
			return err
		}
	}
	// Children run in their own directories: relative binary paths must not depend on that.
	for _, bin := range []*string{&o.tollwayBin, &o.envoyBin, &o.compareBin} {
		if abs, err := filepath.Abs(*bin); err == nil && *bin != "" {
			*bin = abs
		}
	}
	if _, err := os.Stat(o.tollwayBin); err != nil && (slices.Contains(paths, pathTollway) || slices.Contains(paths, pathTollwayOff) || o.has("peers") || o.has("streams") || o.has("saturation") || o.has("cluster")) {
		return fmt.Errorf("tollway binary: %w (run `make build` or set TOLLWAY_BIN)", err)
	}
	if _, err := os.Stat(o.compareBin); err != nil && o.compareBin != "" {
		return fmt.Errorf("-compare: %w", err)
	}
	dir, err := os.MkdirTemp(o.stateDir, "tollway-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintln(stdout, machine(o.envoyBin))
	if l, err := os.ReadFile("/proc/loadavg"); err == nil { // another tenant's work shows here first
		fmt.Fprintf(stdout, "load average at the start: %s\n", strings.Join(strings.Fields(string(l))[:3], " "))
	}
	tables := &tableWriter{w: stdout, line: machineLine(o.envoyBin)}
	defer tables.flush()
	stdout = tables
	if o.has("latency") {
		fmt.Fprintf(stdout, "latency load: %d req/s fixed rate for %s per scenario (%d rounds of %s, paths taking turns) after a %s warm-up (discarded); fake provider chunk delay %s; HTTP/1.1 keep-alive client\n",
			o.rate, o.duration, o.rounds, o.duration/time.Duration(o.rounds), o.warmup, o.chunkDelay)
		if o.compareBin != "" {
			fmt.Fprintf(stdout, "compare (billing on): %s, configured and funded as tollway (billing on), %s, taking turns in the same rounds\n", o.compareBin, o.tollwayBin)
		}
	}

	var (
		targets []*target
		procs   = map[string][]proc{}
		admins  = map[string]string{} // path -> Envoy admin socket
		bad     []string              // reasons to exit 1
		idleRSS = map[int]int64{}     // pid -> VmRSS KiB once ready, before any load
	)
	if len(paths) > 0 {
		fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
		if err != nil {
			return err
		}
		defer fake.Close()
		self := proc{selfProc, os.Getpid()}
		for _, p := range paths {
			switch p {
			case pathDirect:
				targets = append(targets, &target{name: p, baseURL: fake.URL(), auth: providerKey})
				procs[p] = []proc{self}
			case pathEnvoy:
				pe, err := startPlainEnvoy(ctx, o.envoyBin, filepath.Join(dir, "envoy"), fake.Addr())
				if err != nil {
					return err
				}
				defer pe.proc.Stop()
				targets = append(targets, &target{name: p, baseURL: pe.baseURL, auth: providerKey})
				procs[p] = []proc{self, {"envoy alone", pe.proc.Pid()}}
				admins[p] = pe.admin
			case pathTollway, pathTollwayOff, pathCompare:
				tw, t, err := startTollwayTarget(ctx, o.binFor(p), o.envoyBin, filepath.Join(dir, p), fake.URL(), p != pathTollwayOff, o.tollwayEnv, p)
				if err != nil {
					return err
				}
				defer tw.stop()
				targets = append(targets, t)
				procs[p] = []proc{self, {"tollway's envoy", tw.EnvoyPID}, {tollwayProc, tw.Pid()}}
				admins[p] = tw.envoyAdmin()
			}
		}
		for _, t := range targets {
			t.client = newClient(o.timeout)
			if err := probe(ctx, t, chatBody); err != nil {
				return err
			}
			t.served++ // the probe's one successful request
			for _, p := range procs[t.name] {
				if m, err := memKB(p.pid); err == nil && p.name != selfProc {
					idleRSS[p.pid] = m.rss
				}
			}
			fmt.Fprintf(stdout, "%-22s %s%s\n", label(t.name), t.baseURL, o.binNote(t.name))
		}
	}
	byPath := func(p string) *target {
		for _, t := range targets {
			if t.name == p {
				return t
			}
		}
		return nil
	}

	var all []*scenario
	if o.has("latency") {
		// Each path's measured time is split into rounds that take turns with the other paths,
		// so a slow drift of the machine (other tenants, CPU clocks) is shared by all paths
		// instead of landing on whichever ran last: the on/off difference is what is compared.
		seg := o.duration / time.Duration(o.rounds)
		for _, mode := range o.modes {
			byMode := map[string]*scenario{}
			for round := range o.rounds {
				for _, p := range o.paths {
					t := byPath(p)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					fmt.Fprintf(stderr, "bench: %s %s, round %d/%d ...\n", mode, label(t.name), round+1, o.rounds)
					load := func(d time.Duration) *result {
						var r *result
						if mode == "chat" {
							r = attackChat(ctx, t, chatBody, o.rate, d)
						} else {
							r = attackStream(ctx, t, streamBody, o.rate, d, o.maxInFlight)
						}
						t.tally(r)
						return r
					}
					s := byMode[p]
					if s == nil {
						s = &scenario{mode: mode, path: t.name, cpu: map[string]time.Duration{}}
						byMode[p] = s
						all = append(all, s)
						if o.warmup > 0 {
							s.warmErrs = load(o.warmup).lost()
						}
					}
					var before map[string]int64
					if o.envoyStats {
						before = envoyCounters(admins[t.name])
					}
					ps := procs[t.name]
					c0 := cpuSnapshot(ps)
					s.res = s.res.merge(load(seg))
					for i, c := range cpuSnapshot(ps) {
						s.cpu[ps[i].name] += c - c0[i]
					}
					if o.envoyStats {
						s.counters = addDeltas(s.counters, counterDeltas(before, envoyCounters(admins[t.name])))
					}
					time.Sleep(300 * time.Millisecond) // let the last connections settle before the next path
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, s := range all {
			if s.res.errRate() > maxErrRate {
				bad = append(bad, fmt.Sprintf("%s/%s error rate %.2f%% (errors + shed) > %.1f%%", s.mode, label(s.path), 100*s.res.errRate(), 100*maxErrRate))
			}
		}
	}

	var settle, money *settleResult
	if o.has("settle") {
		t := byPath(pathTollway)
		fmt.Fprintf(stderr, "bench: settle %s at %d req/s ...\n", label(t.name), o.settleRate)
		settle = runSettle(ctx, o, t, procs[t.name], admins[t.name])
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r := settle.res; r != nil && r.errRate() > maxErrRate {
			bad = append(bad, fmt.Sprintf("settle error rate %.2f%% > %.1f%%", 100*r.errRate(), 100*maxErrRate))
		}
		if settle.err != nil {
			bad = append(bad, "settle: "+settle.err.Error())
		}
		fmt.Fprintf(stderr, "bench: the money path alone (ext_proc, no Envoy) at %d req/s ...\n", o.moneyRate)
		// Tollway's Envoy is idle here: only the bench (as Envoy) and Tollway work.
		money = runMoneyPath(ctx, o, t, []proc{{"bench (as Envoy)", os.Getpid()}, {tollwayProc, t.tw.Pid()}})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// 10,000/s is offered to find the ceiling: what the in-flight cap shed is not an error.
		if r := money.res; r != nil && r.sentErrRate() > maxErrRate {
			bad = append(bad, fmt.Sprintf("money path error rate %.2f%% of the requests sent > %.1f%%", 100*r.sentErrRate(), 100*maxErrRate))
		}
		if money.err != nil {
			bad = append(bad, "money path: "+money.err.Error())
		}
	}

	// Every successful billed request leaves exactly one durable record; with billing off, none.
	var checks []*recordCheck
	for _, t := range targets {
		if t.tw != nil {
			c := checkRecords(ctx, t, o.settleWait)
			checks = append(checks, c)
			if c.err != nil {
				bad = append(bad, "usage records: "+c.err.Error())
			}
		}
	}

	if o.has("latency") {
		report(stdout, o, all)
	}
	if settle != nil {
		reportSettle(stdout, o, settle)
		reportSettle(stdout, o, money)
	}
	if len(checks) > 0 {
		reportRecords(stdout, checks)
	}
	if len(targets) > 0 {
		printMemory(stdout, paths, procs, idleRSS)
	}

	if o.has("store") {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(stderr, "bench: store settler fed by %d goroutines for %s ...\n", o.storeProducers, o.storeDuration)
		sr := storeSettle(ctx, filepath.Join(dir, "store"), o.storeProducers, o.storeDuration)
		reportStore(stdout, sr)
		if sr.err != nil {
			bad = append(bad, "store: "+sr.err.Error())
		}
	}

	if o.has("cluster") {
		if err := runCluster(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("tasks") {
		fmt.Fprintf(stderr, "bench: tasks: %d open tasks, %d callbacks ...\n", o.openTasks, o.callbacks)
		if err := runTasks(ctx, filepath.Join(dir, "tasks"), o.openTasks, o.callbacks, stdout); err != nil {
			bad = append(bad, err.Error())
		}
		if err := runTaskCreate(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
		if err := runImageCreate(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("x402") {
		if err := runX402(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("fallback") {
		if err := runFallback(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("observe") {
		if err := runObserve(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("tracing") {
		if err := runTracing(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("streams") {
		if err := runStreams(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("saturation") {
		if err := runSaturation(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("peers") {
		if err := runPeers(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if o.has("soak") {
		if err := runSoak(ctx, o, dir, stdout, stderr); err != nil {
			bad = append(bad, err.Error())
		}
	}

	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// parseRates reads "200,500,1000" (rates, or -hold-after's event counts); "" is none.
func parseRates(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
