package main

// Soak (-scenarios soak; not in the default set): billing-on Tollway under a steady keyed chat
// load for -soak-duration (10 minutes by default). Every -soak-every it samples what would show
// a leak: Tollway's in-use heap and goroutines (its own /metrics), open file descriptors and
// resident memory of Tollway and Envoy, and the store file's size. It prints the samples, each
// one's change over the second half of the run (after warm-up effects) as a rate per minute,
// and the store's bytes per settled request.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollway/tollway/test/fakeupstream"
)

// soakSample is one reading of the gateway's resources.
type soakSample struct {
	at                   time.Duration // since the load started
	heapMiB              float64       // Tollway's go_memstats_heap_inuse_bytes
	goroutines           float64       // Tollway's go_goroutines
	tollwayFDs, envoyFDs int
	tollwayRSS, envoyRSS float64 // MiB
	tollwayAnon          float64 // MiB of Tollway's RSS that is not file-backed (bbolt's mmap is)
	storeMiB             float64
	served               int64 // settled requests so far (the store's count)
}

func runSoak(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	dir = filepath.Join(dir, "soak")
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	tw, t, err := startTollwayTarget(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, "tollway"), fake.URL(), true, o.tollwayEnv, pathTollway)
	if err != nil {
		return err
	}
	defer tw.stop()
	t.client = newClient(o.timeout)
	if err := probe(ctx, t, chatBody); err != nil {
		return err
	}
	storePath := filepath.Join(dir, "tollway", "tollway.db")
	sample := func(at time.Duration) (soakSample, error) {
		s := soakSample{at: at, tollwayFDs: fdCount(tw.Pid()), envoyFDs: fdCount(tw.EnvoyPID)}
		if m, err := memKB(tw.Pid()); err == nil {
			s.tollwayRSS, s.tollwayAnon = float64(m.rss)/1024, float64(m.anon)/1024
		}
		if m, err := memKB(tw.EnvoyPID); err == nil {
			s.envoyRSS = float64(m.rss) / 1024
		}
		if st, err := os.Stat(storePath); err == nil {
			s.storeMiB = float64(st.Size()) / (1 << 20)
		}
		heap, gor, err := goRuntime(ctx, tw.Admin)
		if err != nil {
			return s, err
		}
		s.heapMiB, s.goroutines = heap/(1<<20), gor
		s.served, err = tw.usageRecords(ctx)
		return s, err
	}
	first, err := sample(0)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: soak at %d req/s for %s, a sample every %s ...\n", o.soakRate, o.soakDuration, o.soakEvery)
	done := make(chan *result, 1)
	go func() { done <- attackChat(ctx, t, chatBody, o.soakRate, o.soakDuration) }()
	start := time.Now()
	samples := []soakSample{first}
	tick := time.NewTicker(o.soakEvery)
	defer tick.Stop()
	var res *result
	for res == nil {
		select {
		case res = <-done:
		case <-tick.C:
			if s, err := sample(time.Since(start)); err == nil {
				samples = append(samples, s)
			} else {
				fmt.Fprintf(stderr, "bench: soak sample: %v\n", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(2 * time.Second) // the settler's last batch
	if s, err := sample(time.Since(start)); err == nil {
		samples = append(samples, s)
	}
	reportSoak(stdout, o, res, samples)
	if res.errors*200 > res.requests {
		return fmt.Errorf("soak: %d of %d requests failed", res.errors, res.requests)
	}
	return nil
}

func reportSoak(w io.Writer, o *options, res *result, samples []soakSample) {
	fmt.Fprintf(w, "\n== soak: billing-on keyed chat at %d req/s for %s ==\n", o.soakRate, o.soakDuration)
	fmt.Fprintf(w, "%8s %10s %10s %8s %8s %10s %10s %10s %9s %10s\n", "t", "heap MiB", "goroutines", "fds tw", "fds env", "RSS tw", "anon tw", "RSS envoy", "store MiB", "settled")
	for _, s := range samples {
		fmt.Fprintf(w, "%8s %10.1f %10.0f %8d %8d %10.1f %10.1f %10.1f %9.2f %10d\n", s.at.Round(time.Second), s.heapMiB, s.goroutines,
			s.tollwayFDs, s.envoyFDs, s.tollwayRSS, s.tollwayAnon, s.envoyRSS, s.storeMiB, s.served)
	}
	last := samples[len(samples)-1]
	half := samples[len(samples)/2:]
	per := func(get func(soakSample) float64) float64 { return slopePerMinute(half, get) }
	fmt.Fprintf(w, "requests %d, failed %d, p50 %s ms, p99 %s ms\n", res.requests, res.errors, ms(pct(res.lat, 0.50)), ms(pct(res.lat, 0.99)))
	fmt.Fprintf(w, "second half, change per minute: heap %+.2f MiB, goroutines %+.1f, fds %+.1f (Tollway) %+.1f (Envoy), RSS %+.2f MiB (Tollway; %+.2f not file-backed) %+.2f MiB (Envoy), store %+.2f MiB\n",
		per(func(s soakSample) float64 { return s.heapMiB }), per(func(s soakSample) float64 { return s.goroutines }),
		per(func(s soakSample) float64 { return float64(s.tollwayFDs) }), per(func(s soakSample) float64 { return float64(s.envoyFDs) }),
		per(func(s soakSample) float64 { return s.tollwayRSS }), per(func(s soakSample) float64 { return s.tollwayAnon }),
		per(func(s soakSample) float64 { return s.envoyRSS }), per(func(s soakSample) float64 { return s.storeMiB }))
	if n := last.served - samples[0].served; n > 0 {
		fmt.Fprintf(w, "store: %.2f MiB for %d settled requests: %.0f bytes per request (records are kept store.usage_retention_days)\n",
			last.storeMiB-samples[0].storeMiB, n, (last.storeMiB-samples[0].storeMiB)*(1<<20)/float64(n))
	}
}

// slopePerMinute is the least-squares slope of get over the samples' times, per minute.
func slopePerMinute(ss []soakSample, get func(soakSample) float64) float64 {
	if len(ss) < 2 {
		return 0
	}
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.at.Minutes(), get(s)
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// fdCount is how many file descriptors pid has open (-1 if unreadable).
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// goRuntime reads Tollway's in-use heap (bytes) and goroutines from its /metrics.
func goRuntime(ctx context.Context, admin string) (heap, goroutines float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /metrics: %s (metrics.enabled must be on)", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("GET /metrics: %w", err)
	}
	get := func(name string) float64 {
		if f := fams[name]; f != nil && len(f.Metric) > 0 {
			return f.Metric[0].GetGauge().GetValue()
		}
		return -1
	}
	return get("go_memstats_heap_inuse_bytes"), get("go_goroutines"), nil
}
