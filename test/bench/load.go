package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// target is one path under test: where requests go and the credential they carry.
type target struct {
	name    string
	baseURL string
	auth    string
	client  *http.Client // one per target, shared by warm-up and measurement so connections stay warm

	tw     *tollway // nil for direct and envoy
	served int64    // successful requests sent so far (probe, warm-ups, measurements)
	failed int64    // failed ones: a timed-out request may still have been served and billed
}

// tally counts a load's requests toward the usage records the gateway must have written.
func (t *target) tally(r *result) {
	t.served += int64(len(r.lat))
	t.failed += int64(r.errors)
}

// tallyEach counts each target's part of a load sent across ts (attackAcross) toward its own
// records: gateways that keep their records apart (bbolt, a file each).
func tallyEach(ts []*target, r *result) {
	for i, t := range ts {
		t.served += r.across[i].ok
		t.failed += r.across[i].failed
	}
}

func newClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 10000, // open model: never queue behind a small idle pool
		DisableCompression:  true,
	}}
}

func (t *target) header() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + t.auth}}
}

// result is one measured scenario.
type result struct {
	requests   int // scheduled by the offered rate: sent, or shed
	errors     int // sent and failed: non-2xx, transport, a wrong body
	shed       int // not sent: the bench's own in-flight cap was reached (openLoop)
	shedCap    int // that cap
	errSamples map[string]int
	lat        []time.Duration // whole request (non-streaming) or whole stream
	ttfb       []time.Duration // streaming: first SSE data line
	sentRate   float64         // requests sent per second (shed ones are not)
	throughput float64         // successful requests per second
	across     []tallied       // attackAcross: each target's part, in its order
}

// tallied is one target's part of a load sent across several.
type tallied struct{ ok, failed int64 }

func (r *result) fail(msg string) {
	r.errors++
	if r.errSamples == nil {
		r.errSamples = map[string]int{}
	}
	if len(r.errSamples) < 8 || r.errSamples[msg] > 0 {
		r.errSamples[msg]++
	}
}

// merge adds b, measured later on the same path, to r (nil r: b itself).
func (r *result) merge(b *result) *result {
	if r == nil {
		return b
	}
	// Rates combine through the time each part took.
	took := func(n int, rate float64) float64 {
		if rate <= 0 {
			return 0
		}
		return float64(n) / rate
	}
	sentFor := took(r.requests-r.shed, r.sentRate) + took(b.requests-b.shed, b.sentRate)
	okFor := took(len(r.lat), r.throughput) + took(len(b.lat), b.throughput)
	r.requests += b.requests
	r.shed, r.shedCap = r.shed+b.shed, max(r.shedCap, b.shedCap)
	r.lat, r.ttfb = append(r.lat, b.lat...), append(r.ttfb, b.ttfb...)
	if sentFor > 0 {
		r.sentRate = float64(r.requests-r.shed) / sentFor
	}
	if okFor > 0 {
		r.throughput = float64(len(r.lat)) / okFor
	}
	for msg, n := range b.errSamples {
		for range n {
			r.fail(msg)
		}
	}
	r.errors += b.errors - sumValues(b.errSamples) // failures past the sample cap
	return r
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// errRate is the share of the offered load that was not served: errors and shed requests. A
// scenario whose rate is meant to be served (latency, streams, peers) fails on it: shedding
// there means the gateway fell o.maxInFlight requests behind.
func (r *result) errRate() float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(r.errors+r.shed) / float64(r.requests)
}

// sentErrRate is the share of the requests actually sent that failed: the gateway's errors.
// A scenario that offers more than the machine can take on purpose (the money path's ceiling,
// the saturation curve) judges this, and reports what it shed apart.
func (r *result) sentErrRate() float64 {
	if sent := r.requests - r.shed; sent > 0 {
		return float64(r.errors) / float64(sent)
	}
	return 0
}

// lost is errors and shed requests: what the offered load did not get served.
func (r *result) lost() int { return r.errors + r.shed }

// attackChat sends non-streaming chat completions at a fixed rate (vegeta's open model: a
// request starts on schedule whether or not earlier ones have finished).
func attackChat(ctx context.Context, t *target, body []byte, rate int, dur time.Duration) *result {
	return attackPost(ctx, t, "/chat/completions", body, `"chat.completion"`, rate, dur)
}

// attackPost sends POSTs of body to path at a fixed rate; a 2xx answer counts when its body
// contains want. opts adds vegeta options (e.g. a cap on workers for a gateway that falls behind).
func attackPost(ctx context.Context, t *target, path string, body []byte, want string, rate int, dur time.Duration, opts ...func(*vegeta.Attacker)) *result {
	return attackAcross(ctx, []*target{t}, path, body, want, rate, dur, opts...)
}

// attackAcross is attackPost whose requests go round-robin to ts (the replicas of one
// gateway), through the first one's client; r.across says how many each served and failed.
func attackAcross(ctx context.Context, ts []*target, path string, body []byte, want string, rate int, dur time.Duration, opts ...func(*vegeta.Attacker)) *result {
	t := ts[0]
	atk := vegeta.NewAttacker(append([]func(*vegeta.Attacker){vegeta.Client(t.client), vegeta.MaxBody(1 << 20)}, opts...)...)
	defer context.AfterFunc(ctx, func() { atk.Stop() })()
	vts := make([]vegeta.Target, len(ts))
	which := make(map[string]int, len(ts)) // a result's URL -> its target
	for i, x := range ts {
		vts[i] = vegeta.Target{Method: http.MethodPost, URL: x.baseURL + path, Body: body, Header: x.header()}
		which[vts[i].URL] = i
	}
	tr := vegeta.NewStaticTargeter(vts...)
	r := &result{lat: make([]time.Duration, 0, rate*int(dur.Seconds()+1)), across: make([]tallied, len(ts))}
	var m vegeta.Metrics
	for res := range atk.Attack(tr, vegeta.Rate{Freq: rate, Per: time.Second}, dur, t.name) {
		m.Add(res)
		r.requests++
		part := &r.across[which[res.URL]]
		switch {
		case res.Code/100 != 2:
			r.fail(cmpStr(res.Error, fmt.Sprintf("status %d", res.Code)))
		case res.Error != "":
			r.fail(res.Error)
		case !bytes.Contains(res.Body, []byte(want)):
			r.fail("2xx without " + want + " in its body")
		default:
			r.lat = append(r.lat, res.Latency)
			part.ok++
			continue
		}
		part.failed++
	}
	m.Close()
	r.sentRate = m.Rate
	if d := (m.Duration + m.Wait).Seconds(); d > 0 {
		r.throughput = float64(len(r.lat)) / d
	}
	return r
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// attackStream sends streaming chat completions at a fixed rate. vegeta cannot time the first
// byte, so this uses the bench's own open-model loop.
func attackStream(ctx context.Context, t *target, body []byte, rate int, dur time.Duration, maxInFlight int) *result {
	url, hdr := t.baseURL+"/chat/completions", t.header()
	return openLoop(ctx, rate, dur, maxInFlight, func() (time.Duration, time.Duration, error) {
		return streamOnce(ctx, t.client, url, hdr, body)
	})
}

// openLoop calls do at a fixed rate (open model: one goroutine per scheduled call, whether or
// not earlier ones have finished), at most maxInFlight at once: a call that would exceed it is
// not made and counted as shed (load offered above what the target takes), not as an error of
// the target, and not queued. do returns the time to its first event (0: none) and its total time.
func openLoop(ctx context.Context, rate int, dur time.Duration, maxInFlight int, do func() (first, total time.Duration, err error)) *result {
	n := rate * int(dur/time.Millisecond) / 1000
	interval := time.Second / time.Duration(rate)
	r := &result{lat: make([]time.Duration, 0, n), ttfb: make([]time.Duration, 0, n), shedCap: maxInFlight}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, maxInFlight)
	)
	timer := time.NewTimer(0)
	<-timer.C
	start := time.Now()
loop:
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		r.requests++
		select {
		case sem <- struct{}{}:
		default:
			r.shed++
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			first, total, err := do()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.fail(err.Error())
				return
			}
			if first > 0 {
				r.ttfb = append(r.ttfb, first)
			}
			r.lat = append(r.lat, total)
		}()
	}
	sent := time.Since(start)
	wg.Wait() // bounded: every call has a timeout
	if s := sent.Seconds(); s > 0 {
		r.sentRate = float64(r.requests-r.shed) / s
	}
	r.throughput = float64(len(r.lat)) / time.Since(start).Seconds()
	return r
}

var errNoDone = errors.New("stream ended without data: [DONE]")

// streamOnce makes one streaming request and times the first SSE data line and the end.
func streamOnce(ctx context.Context, c *http.Client, url string, hdr http.Header, body []byte) (ttfb, total time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header = hdr.Clone()
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return 0, 0, fmt.Errorf("content-type %q, want text/event-stream", ct)
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	done, lineStart := false, true
	for {
		line, err := br.ReadSlice('\n')
		if lineStart && bytes.HasPrefix(line, []byte("data:")) {
			if ttfb == 0 {
				ttfb = time.Since(start)
			}
			done = done || bytes.HasPrefix(line, []byte("data: [DONE]"))
		}
		lineStart = err == nil // ErrBufferFull: the rest of a long line follows
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return 0, 0, err
		}
	}
	if !done {
		return 0, 0, errNoDone
	}
	return ttfb, time.Since(start), nil
}

// probe checks a target answers one request correctly before it is loaded, retrying briefly
// (a freshly created key reaches ext_proc asynchronously).
func probe(ctx context.Context, t *target, body []byte) error {
	var last string
	for range 50 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.baseURL+"/chat/completions", bytes.NewReader(body))
		req.Header = t.header()
		resp, err := t.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("status %d: %.300s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s does not answer: %s", t.name, last)
}

// pct is the q-quantile (0..1) of d by the nearest-rank method; d is sorted in place.
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}
