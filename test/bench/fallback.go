package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// Fallback (-scenarios fallback): the latency a failed first attempt adds. One Tollway (billing
// off) with two models: "steady" served by provider c, and "fallback" whose first provider a
// answers every request with 429 (retried, and not a 5xx, so outlier detection never ejects a
// and every request really makes the failed attempt) before c serves it.
const fallbackBody = `billing: {enabled: false}
providers:
  - {name: a, type: openai, base_url: %s, api_key: "${BENCH_PROVIDER_KEY}"}
  - {name: c, type: openai, base_url: %s, api_key: "${BENCH_PROVIDER_KEY}"}
models:
  - id: steady
    providers: [{provider: c, model: c-model}]
  - id: fallback
    providers: [{provider: a, model: a-model}, {provider: c, model: c-model}]
`

func runFallback(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	envoyBin, err := envoy.FindBinary(o.envoyBin)
	if err != nil {
		return err
	}
	dir = filepath.Join(dir, "fallback")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	a, err := fakeupstream.New(fakeupstream.Options{Name: "a", APIKey: providerKey, NoRecord: true})
	if err != nil {
		return err
	}
	defer a.Close()
	c, err := fakeupstream.New(fakeupstream.Options{Name: "c", APIKey: providerKey, NoRecord: true})
	if err != nil {
		return err
	}
	defer c.Close()
	g, err := harness.Start(ctx, harness.Options{
		Bin: o.tollwayBin, EnvoyBin: envoyBin, Dir: dir, Drain: 2 * time.Second,
		Body: fmt.Sprintf(fallbackBody, a.URL(), c.URL()),
		Env:  []string{"BENCH_PROVIDER_KEY=" + providerKey},
	})
	if err != nil {
		return err
	}
	defer g.Stop()
	key, err := g.NewKey(ctx, "bench")
	if err != nil {
		return err
	}
	// Enough 429s for every request the fallback model will get (warm-up included).
	n := o.rate*int((o.warmup+o.duration).Seconds()+2) + 10
	faults := make([]fakeupstream.Fault, n)
	for i := range faults {
		faults[i] = fakeupstream.Fault{Status: 429}
	}
	a.Script(faults...)

	res := map[string]*result{}
	for _, model := range []string{"steady", "fallback"} {
		t := &target{name: model, baseURL: g.BaseURL, auth: key, client: newClient(o.timeout)}
		body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`)
		fmt.Fprintf(stderr, "bench: fallback scenario, model %s ...\n", model)
		attackChat(ctx, t, body, o.rate, o.warmup)
		res[model] = attackChat(ctx, t, body, o.rate, o.duration)
	}
	fmt.Fprintf(stdout, "\n== one failed attempt (429) then the next provider, vs no fallback: %d req/s for %s, billing off ==\n", o.rate, o.duration)
	fmt.Fprintf(stdout, "%-10s %8s %9s %9s %9s %8s\n", "model", "ok/s", "p50 ms", "p90 ms", "p99 ms", "errors")
	for _, m := range []string{"steady", "fallback"} {
		r := res[m]
		fmt.Fprintf(stdout, "%-10s %8.1f %9s %9s %9s %8d\n", m, r.throughput, ms(pct(r.lat, 0.50)), ms(pct(r.lat, 0.90)), ms(pct(r.lat, 0.99)), r.errors)
	}
	s, f := res["steady"], res["fallback"]
	fmt.Fprintf(stdout, "falling back once adds %s ms at p50, %s ms at p99\n",
		plusMS(pct(f.lat, 0.50)-pct(s.lat, 0.50)), plusMS(pct(f.lat, 0.99)-pct(s.lat, 0.99)))
	if f.errRate() > 0.005 || s.errRate() > 0.005 {
		return fmt.Errorf("fallback scenario: error rate steady %.2f%%, fallback %.2f%%", 100*s.errRate(), 100*f.errRate())
	}
	return nil
}
