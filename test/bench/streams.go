package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// Streams (-scenarios streams): what a streamed answer costs per chunk, and what open streams
// cost in memory (issue 16's stream targets).
//
// Chunks: a short and a long streamed answer (the fake streams one word of its reply per chunk,
// and its reply echoes the prompt) at -stream-rate through Envoy alone and billing-on Tollway,
// the paths taking turns in rounds; CPU per stream per process at each length, and the
// slope: what one more chunk costs. A gateway whose stream CPU does not depend on its chunks has
// Envoy alone's slope.
//
// Open streams: -open-streams streams held open at once through billing-on Tollway whose
// provider is behind TLS (h2 by ALPN, as every hosted provider is): the resident memory of
// Envoy and Tollway before and with all of them open; then all are released at a bounded pace
// and each must end with [DONE].

// longPromptWords is the long answer's prompt length: the fake's reply echoes it, one word a chunk.
const longPromptWords = 120

// streamBodyWords is a streamed request whose prompt has n words and whose answer may be as long.
func streamBodyWords(n int) []byte {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	// No stream_options: what most clients send (the gateway asks the provider for usage on
	// their behalf, and drops it again), and what the fast lane serves.
	b, _ := json.Marshal(map[string]any{
		"model": modelID, "stream": true, "max_tokens": n + 16,
		"messages": []map[string]string{{"role": "user", "content": strings.Join(words, " ")}},
	})
	return b
}

// streamsLabel is label, with the lane of the default path named: the streams scenario runs
// both lanes.
func streamsLabel(path string) string {
	if path == pathTollway {
		return "tollway (fast lane)"
	}
	return label(path)
}

func runStreams(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	dir = filepath.Join(dir, "streams")
	if err := streamChunks(ctx, o, dir, stdout, stderr); err != nil {
		return err
	}
	for i, after := range o.holdAfter {
		if o.openStreams == 0 {
			break
		}
		if err := openStreams(ctx, o, filepath.Join(dir, fmt.Sprintf("open-%d", i)), after, stdout, stderr); err != nil {
			return err
		}
	}
	return nil
}

func streamChunks(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	// Direct has no gateway process to charge: Envoy alone is the floor.
	targets, procs := map[string]*target{}, map[string][]proc{}
	pe, err := startPlainEnvoy(ctx, o.envoyBin, filepath.Join(dir, "envoy"), fake.Addr())
	if err != nil {
		return err
	}
	defer pe.proc.Stop()
	targets[pathEnvoy] = &target{name: pathEnvoy, baseURL: pe.baseURL, auth: providerKey}
	procs[pathEnvoy] = []proc{{procEnvoy, pe.proc.Pid()}}
	// Each lane whatever -tollway-env says of it (the last value wins): the rows are named by it.
	lane := func(on bool) []string {
		return append(slices.Clone(o.tollwayEnv), fmt.Sprintf("%s=%t", fastLaneEnv, on))
	}
	tw, t, err := startTollwayTarget(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, pathTollway), fake.URL(), true, lane(true), pathTollway)
	if err != nil {
		return err
	}
	defer tw.stop()
	targets[pathTollway] = t
	procs[pathTollway] = []proc{{procEnvoy, tw.EnvoyPID}, {procTollway, tw.Pid()}}
	cw, ct, err := startTollwayTarget(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, pathTollwayChunk), fake.URL(), true, lane(false), pathTollwayChunk)
	if err != nil {
		return err
	}
	defer cw.stop()
	targets[pathTollwayChunk] = ct
	procs[pathTollwayChunk] = []proc{{procEnvoy, cw.EnvoyPID}, {procTollway, cw.Pid()}}
	paths := []string{pathEnvoy, pathTollway, pathTollwayChunk}

	bodies := [][]byte{streamBody, streamBodyWords(longPromptWords)}
	events := make([]int, len(bodies)) // SSE data lines per answer, [DONE] included
	for _, p := range paths {
		targets[p].client = newClient(o.timeout)
		if err := probe(ctx, targets[p], chatBody); err != nil {
			return err
		}
		targets[p].served++
		for i, b := range bodies {
			n, err := countEvents(ctx, targets[p], b)
			if err != nil {
				return fmt.Errorf("streams: %s: %w", p, err)
			}
			if events[i] != 0 && n != events[i] {
				return fmt.Errorf("streams: %s streamed %d events, another path %d", p, n, events[i])
			}
			events[i] = n
			targets[p].served++
		}
	}
	if events[1] <= events[0] {
		return fmt.Errorf("streams: the long answer has %d events, the short %d", events[1], events[0])
	}

	runs := make([][]*peerRun, len(bodies)) // [length][path]
	for i := range bodies {
		for _, p := range paths {
			runs[i] = append(runs[i], &peerRun{path: p, cpu: map[string]time.Duration{}})
		}
	}
	seg := max(o.streamDuration/time.Duration(o.peerRounds), time.Second)
	var bad []string
	for round := range o.peerRounds {
		for i, b := range bodies {
			for _, r := range runs[i] {
				t, ps := targets[r.path], procs[r.path]
				fmt.Fprintf(stderr, "bench: streams %d events at %d/s %s, round %d/%d ...\n", events[i], o.streamRate, streamsLabel(r.path), round+1, o.peerRounds)
				if round == 0 {
					t.tally(attackStream(ctx, t, b, o.streamRate, min(o.warmup, time.Second), o.maxInFlight))
					quiesce(ctx, ps)
				}
				c0 := cpuSnapshot(ps)
				res := attackStream(ctx, t, b, o.streamRate, seg, o.maxInFlight)
				for j, c := range cpuSnapshot(ps) {
					r.cpu[ps[j].name] += c - c0[j]
				}
				t.tally(res)
				r.res = r.res.merge(res)
				quiesce(ctx, ps)
			}
		}
	}
	fmt.Fprintf(stdout, "\n== streams: CPU per streamed answer by its length, %d/s, %s per path and length in %d rounds (fake: %s between chunks) ==\n",
		o.streamRate, o.streamDuration, o.peerRounds, o.chunkDelay)
	fmt.Fprintf(stdout, "%-22s %14s %14s %16s %10s\n", "path", "us/stream "+fmt.Sprint(events[0]), "us/stream "+fmt.Sprint(events[1]), "us per chunk", "errors")
	// row prints CPU per stream at each length and the slope between them: CPU per chunk.
	row := func(name string, short, long time.Duration, s, l *result) float64 {
		a, b := perReq(short, s), perReq(long, l)
		slope := (b - a) / float64(events[1]-events[0])
		fmt.Fprintf(stdout, "%-22s %14.0f %14.0f %16.1f", name, a, b, slope)
		return slope
	}
	slope := map[string]float64{}
	for j, p := range paths {
		short, long := runs[0][j], runs[1][j]
		errs := short.res.lost() + long.res.lost() // shed too: 50 streams/s are meant to be served
		slope[p] = row(streamsLabel(p), short.cpuTotal(), long.cpuTotal(), short.res, long.res)
		fmt.Fprintf(stdout, " %10d\n", errs)
		if er := float64(errs) / float64(max(1, short.res.requests+long.res.requests)); er > maxErrRate {
			bad = append(bad, fmt.Sprintf("streams %s: error rate %.2f%%", streamsLabel(p), 100*er))
		}
		if p == pathTollway || p == pathTollwayChunk {
			for _, name := range []string{procEnvoy, procTollway} {
				row("  "+name, short.cpu[name], long.cpu[name], short.res, long.res)
				fmt.Fprintln(stdout)
			}
		}
	}
	fast := slope[pathTollway] - slope[pathEnvoy]
	fmt.Fprintf(stdout, "per chunk, Tollway's fast lane, the default (Envoy + its stream meter, no ext_proc message) over Envoy alone: %+.1f us (target within +5 us: %s)\n",
		fast, verdict(fast <= 5))
	fmt.Fprintf(stdout, "per chunk, Tollway's chunk lane (routing.fast_lane: false: Envoy + ext_proc) over Envoy alone: %+.1f us\n",
		slope[pathTollwayChunk]-slope[pathEnvoy])
	checks := []*recordCheck{checkRecords(ctx, targets[pathTollway], o.settleWait), checkRecords(ctx, targets[pathTollwayChunk], o.settleWait)}
	reportRecords(stdout, checks)
	for _, c := range checks {
		if c.err != nil {
			bad = append(bad, "usage records: "+c.err.Error())
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// countEvents makes one streamed request and counts its SSE data lines.
func countEvents(ctx context.Context, t *target, body []byte) (int, error) {
	return readStream(ctx, t, body, nil)
}

// readStream makes one streamed request, calls first (if set) at its first SSE data line, reads
// it through data: [DONE] and returns how many data lines it had.
func readStream(ctx context.Context, t *target, body []byte, first func()) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = t.header()
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return 0, fmt.Errorf("status %d: %.300s", resp.StatusCode, b)
	}
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		if n++; n == 1 && first != nil {
			first()
		}
		if strings.HasPrefix(line, "data: [DONE]") {
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoDone
}

// openStreams holds o.openStreams streams open through Envoy alone and through billing-on
// Tollway, one after the other, their provider behind TLS, and reports the processes' memory.
func openStreams(ctx context.Context, o *options, dir string, holdAfter int, stdout, stderr io.Writer) error {
	hold := make(chan struct{})
	var released atomic.Bool
	defer func() { // on any early return, whatever is still held ends
		if released.CompareAndSwap(false, true) {
			close(hold)
		}
	}()
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, Hold: hold, HoldAfter: holdAfter, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	upstream := &url.URL{Scheme: "http", Host: fake.Addr()}
	front := httptest.NewUnstartedServer(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		FlushInterval: -1, // each event as it comes
		Transport:     &http.Transport{MaxIdleConnsPerHost: o.openStreams, DisableCompression: true},
	})
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca := filepath.Join(dir, "provider-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw}), 0o600); err != nil {
		return err
	}
	client := func() *http.Client {
		return &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: o.openStreams, DisableCompression: true}}
	}

	pe, err := startPlainEnvoyTLS(ctx, o.envoyBin, filepath.Join(dir, "open-envoy"), front.Listener.Addr().String(), ca)
	if err != nil {
		return err
	}
	defer pe.proc.Stop()
	alone := &target{name: pathEnvoy, baseURL: pe.baseURL, auth: providerKey, client: client()}
	aloneRows, err := holdMany(ctx, o, alone, holdAfter, hold, []proc{{"envoy alone", pe.proc.Pid()}}, stderr)
	if err != nil {
		return err
	}

	cfg := fmt.Sprintf(tollwayBody, front.URL+"/v1", modelID, true)
	cfg = strings.Replace(cfg, `api_key: "${BENCH_PROVIDER_KEY}"}`, `api_key: "${BENCH_PROVIDER_KEY}", ca_file: `+ca+`}`, 1)
	tw, err := startTollwayConfig(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, "open"), cfg, true, o.tollwayEnv)
	if err != nil {
		return err
	}
	defer tw.stop()
	key, err := tw.newKey(ctx)
	if err != nil {
		return err
	}
	t := &target{name: pathTollway, baseURL: tw.baseURL, auth: key, tw: tw, client: client()}
	twRows, err := holdMany(ctx, o, t, holdAfter, hold, []proc{{procEnvoy, tw.EnvoyPID}, {procTollway, tw.Pid()}}, stderr)
	if err != nil {
		return err
	}

	const mb = 1e6 / 1024 // KiB in a megabyte
	fmt.Fprintf(stdout, "\n== streams: %d streams open at once, each paused after %d event(s), provider behind TLS (h2 by ALPN); Envoy alone, then billing-on Tollway ==\n", o.openStreams, holdAfter)
	fmt.Fprintf(stdout, "%-18s %12s %12s %16s %10s %10s %12s\n", "process", "before MiB", "open MiB", "per stream KiB", "open MB", "target MB", "anon MiB")
	targets := map[string]string{procEnvoy: "150", procTollway: "100"}
	for _, r := range append(aloneRows, twRows...) {
		fmt.Fprintf(stdout, "%-18s %12.1f %12.1f %16.1f %10.1f %10s %12.1f\n", r.name, mib(r.before.rss), mib(r.open.rss),
			float64(r.open.rss-r.before.rss)/float64(o.openStreams), float64(r.open.rss)/mb, cmpStr(targets[r.name], "-"), mib(r.open.anon))
	}
	fmt.Fprintf(stdout, "(an Envoy's RSS includes about %.0f MiB of its binary's file pages, RssFile, shared by every Envoy on the host)\n", mib(twRows[0].open.file))
	check := checkRecords(ctx, t, o.settleWait)
	reportRecords(stdout, []*recordCheck{check})
	return check.err
}

// heldRow is one process's memory before and with the streams open.
type heldRow struct {
	name         string
	before, open mem
}

// holdMany warms t up, opens o.openStreams streams through it (the fake holds each after
// holdAfter events), reads ps's memory, then releases them at a bounded pace and checks each ended
// with [DONE].
func holdMany(ctx context.Context, o *options, t *target, holdAfter int, hold chan<- struct{}, ps []proc, stderr io.Writer) ([]heldRow, error) {
	n := o.openStreams
	if err := probe(ctx, t, chatBody); err != nil { // a plain answer passes the hold
		return nil, err
	}
	t.served++
	// A few hundred plain answers first, so "before" is not the start-up's footprint.
	t.tally(attackPost(ctx, t, "/chat/completions", chatBody, `"chat.completion"`, 200, 2*time.Second))
	quiesce(ctx, ps)
	rows := make([]heldRow, len(ps))
	for i, p := range ps {
		m, err := memKB(p.pid)
		if err != nil {
			return nil, err
		}
		rows[i] = heldRow{name: p.name, before: m}
	}
	fmt.Fprintf(stderr, "bench: streams: opening %d streams through %s ...\n", n, label(t.name))
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	results, ok := fakeupstream.OpenHeld(ctx, n, func(opened func()) error {
		return holdOne(ctx, t, heldBody(holdAfter), opened)
	})
	if !ok {
		return nil, fmt.Errorf("streams: not all %d streams opened through %s within the bound", n, t.name)
	}
	time.Sleep(500 * time.Millisecond) // the last opens' buffers settle
	if o.holdPause > 0 {
		fmt.Fprintf(stderr, "bench: streams: %d streams held through %s for %s (-hold-pause) ...\n", n, label(t.name), o.holdPause)
		time.Sleep(o.holdPause)
	}
	for i, p := range ps {
		m, err := memKB(p.pid)
		if err != nil {
			return nil, err
		}
		rows[i].open = m
	}
	// Released at a bounded pace: every chunk of a billed stream is an ext_proc message.
	go fakeupstream.Release(ctx, hold, n, 10, 10*time.Millisecond)
	var failed []string
	for range n {
		if err := <-results; err != nil {
			failed = append(failed, err.Error())
		}
	}
	t.served += int64(n - len(failed))
	t.failed += int64(len(failed))
	if len(failed) > 0 {
		return nil, fmt.Errorf("streams: %d of %d held streams through %s failed; first: %s", len(failed), n, t.name, failed[0])
	}
	return rows, nil
}

// heldBody is the streamed request a held stream makes: an answer longer than the hold point.
func heldBody(holdAfter int) []byte {
	if holdAfter <= 1 {
		return streamBody
	}
	return streamBodyWords(holdAfter + 16)
}

// holdOne opens one stream, calls opened at its first event (or when it fails before one), and
// reads it to [DONE].
func holdOne(ctx context.Context, t *target, body []byte, opened func()) error {
	var once sync.Once
	defer once.Do(opened)
	_, err := readStream(ctx, t, body, func() { once.Do(opened) })
	return err
}
