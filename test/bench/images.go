package main

// Image creation (part of -scenarios tasks): what `POST /v1/images` through Tollway adds over
// calling Gemini directly, for a synchronous I3 request whose answer carries a 4 MiB image
// (5.6 MB of base64). Both paths call :generateContent on their own fake Gemini API; Tollway's
// also authenticates, validates, holds the worst case, goes out through Envoy's internal
// listener, decodes the image and writes the finished task with its image to bbolt (fsynced),
// bills it, and answers with the task object carrying the image as b64_json. Each answer is
// read whole (vegeta stops at 1 MiB), so the time includes moving the image to the client.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

const imageCreateConfig = `billing: {enabled: true}
providers:
  - {name: gem, type: gemini, base_url: %s, api_key: "${BENCH_PROVIDER_KEY}"}
models:
  - id: nb
    family: I3
    variant: flash-2.5
    providers: [{provider: gem, model: gemini-2.5-flash-image}]
    pricing: {request: "0.01", image: "0.039", prompt: "0.0000003", completion: "0.0000025"}
`

// runImageCreate measures image creation at a tenth of -task-rate (at least 1/s: each create
// moves an image of 4 MiB through the gateway and writes it to disk).
func runImageCreate(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	envoyBin, err := envoy.FindBinary(o.envoyBin)
	if err != nil {
		return err
	}
	dir = filepath.Join(dir, "image-create")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	rate := max(o.taskRate/10, 1)
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
		Body: fmt.Sprintf(imageCreateConfig, fake.GeminiURL()),
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
	fakeupstream.GeminiLargeImage() // made once, before anything is timed
	contents := `"contents":[{"role":"user","parts":[{"text":"a red fox in snow ` + fakeupstream.GeminiLargeImageTrigger + `"}]}]`
	type path struct {
		name, url string
		header    http.Header
		body      []byte
		want      []string
		ps        []proc
		res       *result
		cpu       []time.Duration
		warm      *result
		bytes     atomic.Int64 // answer bytes read
	}
	paths := []*path{
		{name: "direct", url: direct.GeminiURL() + "/models/gemini-2.5-flash-image:generateContent",
			header: http.Header{"Content-Type": {"application/json"}, "X-Goog-Api-Key": {providerKey}},
			body:   []byte(`{` + contents + `,"generationConfig":{"responseModalities":["TEXT","IMAGE"]}}`), want: []string{`"inlineData"`}},
		{name: "tollway", url: g.BaseURL + "/images",
			header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + key}},
			body:   []byte(`{"model":"nb",` + contents + `}`), want: []string{`"object":"image"`, `"status":"completed"`, `"b64_json"`},
			ps: []proc{{"tollway's envoy", g.EnvoyPID}, {tollwayProc, g.Pid()}}},
	}
	client := newClient(max(o.timeout, 30*time.Second))
	create := func(p *path) func() (time.Duration, time.Duration, error) {
		return func() (time.Duration, time.Duration, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(p.body))
			if err != nil {
				return 0, 0, err
			}
			req.Header = p.header.Clone()
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				return 0, 0, err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			total := time.Since(start)
			switch {
			case err != nil:
				return 0, 0, err
			case resp.StatusCode != http.StatusOK:
				return 0, 0, fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
			case len(b) < 4<<20:
				return 0, 0, fmt.Errorf("a %d-byte answer: the image is missing", len(b))
			}
			for _, w := range p.want {
				if !bytes.Contains(b, []byte(w)) {
					return 0, 0, fmt.Errorf("the answer has no %s", w)
				}
			}
			p.bytes.Add(int64(len(b)))
			return 0, total, nil
		}
	}
	const maxInFlight = 64
	for _, p := range paths {
		fmt.Fprintf(stderr, "bench: image creation, warm-up %s ...\n", p.name)
		p.warm = openLoop(ctx, rate, min(o.warmup, 2*time.Second), maxInFlight, create(p))
	}
	seg := o.duration / time.Duration(o.rounds)
	for round := range o.rounds {
		for _, p := range paths {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stderr, "bench: image creation %s, round %d/%d ...\n", p.name, round+1, o.rounds)
			c0 := cpuSnapshot(p.ps)
			p.res = p.res.merge(openLoop(ctx, rate, seg, maxInFlight, create(p)))
			if p.cpu == nil {
				p.cpu = make([]time.Duration, len(p.ps))
			}
			for i, c := range cpuSnapshot(p.ps) {
				p.cpu[i] += c - c0[i]
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	fmt.Fprintf(stdout, "\n== image creation: POST /v1/images (I3, a 4 MiB image answer) through Tollway (billing on) vs generateContent directly, %d creates/s for %s ==\n", rate, o.duration)
	fmt.Fprintf(stdout, "%-10s %8s %9s %9s %9s %8s %10s %s\n", "path", "ok/s", "p50 ms", "p90 ms", "p99 ms", "errors", "MB/answer", "gateway CPU per create")
	for _, p := range paths {
		r := p.res
		cpu, size := "-", 0.0
		if n := len(r.lat); n > 0 {
			size = float64(p.bytes.Load()) / float64(n+len(p.warm.lat)) / 1e6
			var parts []string
			for i, c := range p.cpu {
				parts = append(parts, fmt.Sprintf("%s %.1f ms", p.ps[i].name, float64(c.Microseconds())/1e3/float64(n)))
			}
			if len(parts) > 0 {
				cpu = strings.Join(parts, ", ")
			}
		}
		fmt.Fprintf(stdout, "%-10s %8.1f %9s %9s %9s %8d %10.2f %s\n", p.name, r.throughput, ms(pct(r.lat, 0.50)), ms(pct(r.lat, 0.90)), ms(pct(r.lat, 0.99)), r.lost(), size, cpu)
	}
	d, tw := paths[0].res, paths[1].res
	fmt.Fprintf(stdout, "Tollway adds %s ms at p50, %s ms at p99 to an image creation (auth, validation, hold, Envoy's internal listener, decoding the image, an fsynced task record with the image, the task object in base64)\n",
		plusMS(pct(tw.lat, 0.50)-pct(d.lat, 0.50)), plusMS(pct(tw.lat, 0.99)-pct(d.lat, 0.99)))
	for _, p := range paths {
		if p.res.errRate() > maxErrRate || p.warm.lost() > 0 {
			return fmt.Errorf("image creation %s: error rate %.2f%%, %d warm-up errors %v %v", p.name, 100*p.res.errRate(), p.warm.lost(), p.res.errSamples, p.warm.errSamples)
		}
	}
	return nil
}
