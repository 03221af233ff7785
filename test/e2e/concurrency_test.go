package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// streamResult is how one request of a load test ended.
type streamResult struct {
	status     int
	code       string // error code, for an error answer
	retryAfter string
	sameID     bool // the body's request_id equals the x-request-id header
	done       bool // a stream that ended with [DONE]
	err        error
}

// loadClient opens one connection per request (HTTP/1.1, as most SDKs do for streams).
func loadClient(n int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}}
}

// openStream sends a streamed chat request and reads its first event; started is called once
// the request is open (first event read) or has ended, then the rest is read.
func openStream(ctx context.Context, c *http.Client, url, key string, started func()) streamResult {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"a b c"}]}`))
	req.Header.Set("authorization", "Bearer "+key)
	req.Header.Set("content-type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		started()
		return streamResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		started()
		return errorAnswer(resp)
	}
	r := streamResult{status: resp.StatusCode}
	sc := bufio.NewScanner(resp.Body)
	first := sc.Scan()
	started()
	if first {
		r.done = readToEnd(sc)
	}
	r.err = sc.Err()
	return r
}

// errorAnswer reads an error answer's status, code, retry-after and request ids.
func errorAnswer(resp *http.Response) streamResult {
	raw, _ := io.ReadAll(resp.Body)
	var e apiError
	_ = json.Unmarshal(raw, &e)
	return streamResult{status: resp.StatusCode, code: e.Error.Code, retryAfter: resp.Header.Get("retry-after"),
		sameID: e.Error.RequestID != "" && e.Error.RequestID == resp.Header.Get("x-request-id")}
}

// procStatus reads one "Name: value kB" field of /proc/<pid>/status, in KiB.
func procStatusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// softNoFile is a process's soft RLIMIT_NOFILE, from /proc/<pid>/limits.
func softNoFile(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "limits"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no open files limit for %d", pid)
	return 0
}

// TestThousandsOfOpenStreams holds 2,000 streams open at once through the real Envoy (Envoy's
// default circuit breakers refused everything past ~512 with a 500), started from a shell whose
// soft file limit is 1,024: none is refused, all finish with [DONE]. It prints the memory each
// open stream costs in Envoy and in Tollway (run it with TOLLWAY_BIN set to a build without
// -race for Tollway's real figure). The provider is plain HTTP/1.1 (a local model server):
// Envoy holds an upstream connection per stream.
func TestThousandsOfOpenStreams(t *testing.T) {
	// Runs alone (no t.Parallel): it measures memory per open stream.
	hold := make(chan struct{}) // on failure, closing the fake ends what it still holds
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, Hold: hold, NoRecord: true})
	holdThousands(t, catalog(fake.URL()), hold)
}

// TestThousandsOfOpenStreamsOverH2 is the same with the provider behind TLS, as every hosted
// provider is: Envoy negotiates h2 by ALPN and multiplexes the 2,000 streams over a few
// connections (the provider sees far fewer connections than streams), so each open stream costs
// Envoy less than over HTTP/1.1.
func TestThousandsOfOpenStreamsOverH2(t *testing.T) {
	// Runs alone (no t.Parallel): it measures memory per open stream.
	hold := make(chan struct{})
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, Hold: hold, NoRecord: true})
	target, _ := url.Parse("http://" + fake.Addr())
	var conns, h2 atomic.Int64
	front := httptest.NewUnstartedServer(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1, // each event as it comes
		Transport:     &http.Transport{MaxIdleConnsPerHost: holdStreams, DisableCompression: true},
	})
	front.EnableHTTP2 = true
	front.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	inner := front.Config.Handler
	front.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
		inner.ServeHTTP(w, r)
	})
	front.StartTLS()
	defer front.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(catalog(front.URL+"/v1"), `api_key: "${FAKE_PROVIDER_KEY}"}`, `api_key: "${FAKE_PROVIDER_KEY}", ca_file: `+ca+`}`, 1)
	holdThousands(t, cfg, hold)
	if c, n := conns.Load(), h2.Load(); n < holdStreams || c > holdStreams/10 {
		t.Fatalf("the provider saw %d h2 requests over %d connections: want all %d+ streams multiplexed over h2", n, c, holdStreams)
	}
	t.Logf("the provider saw %d connections for %d h2 requests", conns.Load(), h2.Load())
}

// holdStreams is how many streams holdThousands keeps open at once.
const holdStreams = 2000

// holdThousands opens holdStreams streams through a gateway configured by cfg (its fake pauses
// each stream after the first event until hold receives), measures both processes' memory,
// releases them at a bounded pace and checks every one ended with [DONE].
func holdThousands(t *testing.T, cfg string, hold chan struct{}) {
	const n = holdStreams
	g := startWith(t, harness.Options{Body: cfg, Env: []string{"FAKE_PROVIDER_KEY=" + providerKey}, SoftNoFile: 1024})
	got := softNoFile(t, g.EnvoyPID)
	if got < 2*n+1024 {
		t.Fatalf("Envoy's soft file limit is %d: it cannot hold %d streams", got, n)
	}
	// stderr and the ready line on stdout arrive through two pipes: wait for the log line.
	waitFor(t, fmt.Sprintf("the log to say Envoy's file limit (%d)", got), 5*time.Second, func() bool {
		return strings.Contains(g.logs.String(), fmt.Sprintf("envoy_nofile=%d", got))
	})
	key := g.newKey("acme")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	client := loadClient(n)
	// Warm both processes up so the baseline is not their start-up footprint.
	var warm sync.WaitGroup
	for range 50 {
		warm.Add(1)
		go func() { defer warm.Done(); fakeWarm(ctx, client, g.BaseURL, key, hold) }()
	}
	warm.Wait()
	envoyBase, tollwayBase := procStatusKiB(t, g.EnvoyPID, "VmRSS"), procStatusKiB(t, g.Pid(), "VmRSS")

	start := time.Now()
	results, ok := fakeupstream.OpenHeld(ctx, n, func(opened func()) streamResult {
		return openStream(ctx, client, g.BaseURL, key, opened)
	})
	if !ok {
		t.Fatalf("not all %d streams opened within the bound", n)
	}
	openFor := time.Since(start)
	envoyOpen, tollwayOpen := procStatusKiB(t, g.EnvoyPID, "VmRSS"), procStatusKiB(t, g.Pid(), "VmRSS")
	// Release at a bounded pace: with billing on every chunk is an ext_proc message, and all
	// streams ending at once would queue them in a race-instrumented ext_proc past its
	// message timeout, which cuts the stream.
	go fakeupstream.Release(ctx, hold, n, 5, 10*time.Millisecond)
	var failed []streamResult
	for range n {
		if r := <-results; r.status != 200 || !r.done || r.err != nil {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d streams failed; first: %+v (%v)", len(failed), n, failed[0], failed[0].err)
	}
	t.Logf("%d streams open at once after %s, all completed with [DONE]", n, openFor.Round(time.Millisecond))
	t.Logf("memory per open stream: Envoy %.1f KiB (RSS %d -> %d KiB), Tollway %.1f KiB (RSS %d -> %d KiB)",
		float64(envoyOpen-envoyBase)/n, envoyBase, envoyOpen, float64(tollwayOpen-tollwayBase)/n, tollwayBase, tollwayOpen)
}

// fakeWarm runs one short request (the hold only pauses streams, so a plain answer passes).
func fakeWarm(ctx context.Context, c *http.Client, url, key string, _ <-chan struct{}) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", strings.NewReader(hiBody))
	req.Header.Set("authorization", "Bearer "+key)
	if resp, err := c.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func waitGroupDone(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// checkOverloaded asserts every refusal is 503 gateway_overloaded with retry-after: 1 and the
// request id in the body, and that there was at least one.
func checkOverloaded(t *testing.T, rs []streamResult) (refused int) {
	t.Helper()
	for _, r := range rs {
		if r.status == 200 {
			continue
		}
		if r.status != 503 || r.code != translator.CodeGatewayOverloaded || r.retryAfter != "1" || !r.sameID {
			t.Errorf("an excess request got %+v, want 503 gateway_overloaded with retry-after: 1", r)
		}
		refused++
	}
	if refused == 0 {
		t.Error("nothing was refused over the limit")
	}
	return refused
}

// TestOverloadIsA503: with limits.max_concurrent_requests 20 and 20 streams open, more requests
// get 503 gateway_overloaded with retry-after: 1 (the provider cluster's circuit breakers;
// up to 20 more wait for a connection), never a 500.
func TestOverloadIsA503(t *testing.T) {
	// Runs alone (no t.Parallel): it fills circuit breakers with concurrent requests.
	const limit, extra = 20, 60
	hold := make(chan struct{})
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, Hold: hold, NoRecord: true})
	g := startGateway(t, fmt.Sprintf("limits: {max_concurrent_requests: %d}\n", limit)+catalog(fake.URL()), "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	client := loadClient(limit + extra)
	results := make(chan streamResult, limit+extra)
	var opened sync.WaitGroup
	opened.Add(limit)
	for range limit {
		go func() { results <- openStream(ctx, client, g.BaseURL, key, opened.Done) }()
	}
	if !waitGroupDone(ctx, &opened) {
		t.Fatal("the streams within the limit did not open")
	}
	var ended sync.WaitGroup
	ended.Add(extra)
	for range extra {
		go func() { results <- openStream(ctx, client, g.BaseURL, key, ended.Done) }()
	}
	// Refusals come at once; requests waiting for a connection wait for the release.
	waitFor(t, "the excess to be refused", 20*time.Second, func() bool { return len(results) >= extra-limit })
	close(hold)
	var rs []streamResult
	for range limit + extra {
		r := <-results
		if r.err != nil {
			t.Fatalf("a request failed without an answer: %v", r.err)
		}
		rs = append(rs, r)
	}
	refused := checkOverloaded(t, rs)
	t.Logf("limit %d, %d requests: %d served, %d refused with 503 gateway_overloaded", limit, limit+extra, limit+extra-refused, refused)
}

// TestExtProcOverflowIsA503: when the ext_proc cluster's own circuit breaker overflows (here
// an ext_proc that holds every stream), the excess is 503 gateway_overloaded, not the 500 an
// ext_proc failure gets.
func TestExtProcOverflowIsA503(t *testing.T) {
	// Runs alone (no t.Parallel): it fills circuit breakers with concurrent requests.
	limits := ir.Limits{MaxConcurrentRequests: 1}
	gw, _ := envoyWithHungExtProc(t, limits)
	total := int(limits.ExtProcStreams()) + 20
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := loadClient(total)
	results := make(chan streamResult, total)
	for range total {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.BaseURL+"/chat/completions", strings.NewReader(hiBody))
			resp, err := client.Do(req)
			if err != nil {
				results <- streamResult{err: err}
				return
			}
			defer resp.Body.Close()
			results <- errorAnswer(resp)
		}()
	}
	var overloaded []streamResult
	unavailable := 0
	for range total {
		r := <-results
		switch {
		case r.err != nil:
			t.Fatalf("no answer: %v", r.err)
		case r.status == 500 && r.code == translator.CodeGatewayUnavailable:
			unavailable++ // held until the message timeout
		default:
			overloaded = append(overloaded, r)
		}
	}
	refused := checkOverloaded(t, overloaded)
	t.Logf("%d requests on an ext_proc cluster of %d streams: %d timed out (500), %d refused (503)", total, limits.ExtProcStreams(), unavailable, refused)
}
