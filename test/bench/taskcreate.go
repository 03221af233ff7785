package main

// Task creation (part of -scenarios tasks): what `POST /v1/videos` through Tollway adds over
// creating the task at the provider directly. Both paths create a real task at the same fake
// MiniMax API; Tollway's also authenticates, validates, holds the worst case against credits,
// goes out through Envoy's internal listener and writes the task to bbolt (fsynced) before it
// answers. The running tasks it leaves are polled by the gateway meanwhile, as in production.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

const taskCreateConfig = `billing: {enabled: true}
providers:
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${BENCH_PROVIDER_KEY}"}
models:
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`

func runTaskCreate(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	envoyBin, err := envoy.FindBinary(o.envoyBin)
	if err != nil {
		return err
	}
	dir = filepath.Join(dir, "task-create")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// One fake API per path, so the provider queries the gateway's poller makes meanwhile are
	// counted apart from the creates.
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	direct, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	if err != nil {
		return err
	}
	defer direct.Close()
	g, err := harness.Start(ctx, harness.Options{
		Bin: o.tollwayBin, EnvoyBin: envoyBin, Dir: dir, Drain: 2 * time.Second,
		Body: fmt.Sprintf(taskCreateConfig, fake.MiniMaxURL()),
		Env:  append([]string{"BENCH_PROVIDER_KEY=" + providerKey}, o.tollwayEnv...),
	})
	if err != nil {
		return err
	}
	defer g.Stop()
	if err := g.NewAccount(ctx, "bench", "1000000"); err != nil {
		return err
	}
	key, err := g.NewKey(ctx, "bench")
	if err != nil {
		return err
	}
	type path struct {
		t          *target
		url, want  string
		body       []byte
		ps         []proc
		res        *result
		cpu        []time.Duration // per process of ps
		warmErrors int
		fake       *fakeupstream.Server
		upstream   int // requests the fake received during the measured rounds
	}
	paths := []*path{
		{t: &target{name: "direct", baseURL: direct.MiniMaxURL() + "/v1", auth: providerKey}, url: "/video_generation", want: `"task_id"`, fake: direct,
			body: []byte(`{"model":"MiniMax-Hailuo-02","prompt":"a red fox in snow","duration":6,"resolution":"768P"}`)},
		{t: &target{name: "tollway", baseURL: g.BaseURL, auth: key}, url: "/videos", want: `"object":"video"`,
			body: []byte(`{"model":"hailuo-02","prompt":"a red fox in snow","duration":6,"resolution":"768P"}`),
			ps:   []proc{{"tollway's envoy", g.EnvoyPID}, {tollwayProc, g.Pid()}}, fake: fake},
	}
	for _, p := range paths {
		p.t.client = newClient(o.timeout)
		fmt.Fprintf(stderr, "bench: task creation, warm-up %s ...\n", p.t.name)
		p.warmErrors = attackPost(ctx, p.t, p.url, p.body, p.want, o.taskRate, min(o.warmup, 2*time.Second)).errors
	}
	seg := o.duration / time.Duration(o.rounds)
	for round := range o.rounds {
		for _, p := range paths {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stderr, "bench: task creation %s, round %d/%d ...\n", p.t.name, round+1, o.rounds)
			c0, n0 := cpuSnapshot(p.ps), p.fake.RequestCount()
			p.res = p.res.merge(attackPost(ctx, p.t, p.url, p.body, p.want, o.taskRate, seg))
			if p.cpu == nil {
				p.cpu = make([]time.Duration, len(p.ps))
			}
			for i, c := range cpuSnapshot(p.ps) {
				p.cpu[i] += c - c0[i]
			}
			p.upstream += p.fake.RequestCount() - n0
			time.Sleep(300 * time.Millisecond)
		}
	}
	fmt.Fprintf(stdout, "\n== task creation: POST /v1/videos through Tollway (billing on) vs the provider's create directly, %d creates/s for %s ==\n", o.taskRate, o.duration)
	fmt.Fprintf(stdout, "%-10s %8s %9s %9s %9s %8s %s\n", "path", "ok/s", "p50 ms", "p90 ms", "p99 ms", "errors", "gateway CPU per create")
	for _, p := range paths {
		r := p.res
		cpu := "-"
		if len(p.ps) > 0 && len(r.lat) > 0 {
			var parts []string
			for i, c := range p.cpu {
				parts = append(parts, fmt.Sprintf("%s %.0f us", p.ps[i].name, float64(c.Microseconds())/float64(len(r.lat))))
			}
			cpu = strings.Join(parts, ", ")
		}
		fmt.Fprintf(stdout, "%-10s %8.1f %9s %9s %9s %8d %s\n", p.t.name, r.throughput, ms(pct(r.lat, 0.50)), ms(pct(r.lat, 0.90)), ms(pct(r.lat, 0.99)), r.errors, cpu)
	}
	d, tw := paths[0].res, paths[1].res
	fmt.Fprintf(stdout, "Tollway adds %s ms at p50, %s ms at p99 to a task creation (auth, validation, hold, Envoy's internal listener, an fsynced task record)\n",
		plusMS(pct(tw.lat, 0.50)-pct(d.lat, 0.50)), plusMS(pct(tw.lat, 0.99)-pct(d.lat, 0.99)))
	if n := len(tw.lat); n > 0 {
		q := paths[1].upstream - n
		fmt.Fprintf(stdout, "its CPU also paid the poller: %d provider queries of the running tasks through Envoy in the same window (%.1f per create)\n", q, float64(q)/float64(n))
	}
	for _, p := range paths {
		if p.res.errRate() > maxErrRate || p.warmErrors > 0 {
			return fmt.Errorf("task creation %s: error rate %.2f%%, %d warm-up errors %v", p.t.name, 100*p.res.errRate(), p.warmErrors, p.res.errSamples)
		}
	}
	return nil
}
