package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestRateLimitsThroughEnvoy: a key's rate_limits (keys create --rpm/--tpm) hold through the
// real Envoy: every answer to the key, a stream's too, carries OpenAI's x-ratelimit headers;
// the request past its requests per minute is 429 rate_limit_exceeded with an integer
// Retry-After and the same headers, reaches no provider and is not billed; GET /v1/key shows the
// rates; /metrics counts the 429 by its code; the default of keys.rate_limits applies to a key
// that sets none.
func TestRateLimitsThroughEnvoy(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL(), sdkPricing)+"keys: {rate_limits: {tokens_per_minute: 500000}}\n", "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "5"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--rpm", "2", "--tpm", "100000")
	const plain = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}`

	resp := g.chat(ctx, key, plain)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "1" ||
		!resetWithin(h.Get("x-ratelimit-reset-requests"), 59*time.Second, 61*time.Second) || h.Get("x-ratelimit-limit-tokens") != "100000" ||
		!resetWithin(h.Get("x-ratelimit-reset-tokens"), 59*time.Second, 61*time.Second) {
		t.Fatalf("first answer: %d %v", resp.StatusCode, h) // reset: until the window holds nothing
	}
	if rem, err := strconv.Atoi(h.Get("x-ratelimit-remaining-tokens")); err != nil || rem >= 100000 || rem < 99000 {
		t.Fatalf("remaining tokens %q: want the prompt's estimate taken from 100000", h.Get("x-ratelimit-remaining-tokens"))
	}
	resp = g.chat(ctx, key, plain) // the minute's second request, at once: a burst is allowed
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if h = resp.Header; resp.StatusCode != 200 || h.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("second answer: %d %v", resp.StatusCode, h)
	}
	served := fake.RequestCount()

	resp = g.chat(ctx, key, plain)
	h = resp.Header
	e := wantError(t, resp, http.StatusTooManyRequests, "rate_limit_exceeded")
	ra, err := strconv.Atoi(h.Get("retry-after"))
	if err != nil || ra < 55 || ra > 61 || !strings.Contains(e.Error.Message, "on requests per minute: limit 2;") {
		t.Fatalf("429: retry-after %q, message %q", h.Get("retry-after"), e.Error.Message)
	}
	if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" || h.Get("x-ratelimit-reset-requests") == "" ||
		h.Get("x-ratelimit-limit-tokens") != "100000" {
		t.Fatalf("429 headers: %v", h)
	}
	if fake.RequestCount() != served {
		t.Fatal("a refused request reached the provider")
	}
	g.waitRecords("acme", 2)
	time.Sleep(300 * time.Millisecond)
	if recs := g.waitRecords("acme", 2); len(recs) != 2 {
		t.Fatalf("the refused request was billed: %d records", len(recs))
	}

	v, raw := g.keyView(key)
	if v.RateLimits == nil || string(*v.RateLimits) != `{"requests_per_minute":2,"tokens_per_minute":100000}` {
		t.Fatalf("GET /v1/key: %s", raw)
	}

	// A key with no rates of its own: the configured default (tokens only), on a stream too.
	other := g.newKey("acme")
	if v, raw := g.keyView(other); v.RateLimits == nil || string(*v.RateLimits) != `{"requests_per_minute":null,"tokens_per_minute":500000}` {
		t.Fatalf("GET /v1/key of a key on the default: %s", raw)
	}
	resp = g.chat(ctx, other, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h = resp.Header
	if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") || h.Get("x-ratelimit-limit-tokens") != "500000" ||
		h.Get("x-ratelimit-remaining-tokens") == "" || h.Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("stream answer: %d %v", resp.StatusCode, h)
	}

	_, metrics := g.adminRaw("GET", "/metrics", "", nil)
	if !strings.Contains(metrics, `code="rate_limit_exceeded"`) || !strings.Contains(metrics, `status="429"`) {
		t.Fatalf("/metrics does not count the 429:\n%s", metrics)
	}
}

// resetWithin reports whether an x-ratelimit-reset text is a duration from lo to hi.
func resetWithin(text string, lo, hi time.Duration) bool {
	d, err := time.ParseDuration(text)
	return err == nil && d >= lo && d <= hi
}

// TestRateLimitBurst: a key may spend its whole minute at once through Envoy: at 5 requests
// per minute, 5 concurrent chats all pass, and the 6th is 429 rate_limit_exceeded with a
// Retry-After of about a minute (until the burst's second leaves the window), reaching no
// provider.
func TestRateLimitBurst(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL(), sdkPricing), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "5"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--rpm", "5")
	const plain = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}`
	codes := make(chan int, 5)
	for range 5 {
		go func() {
			resp := g.chat(ctx, key, plain)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for range 5 {
		if code := <-codes; code != 200 {
			t.Fatalf("one of 5 concurrent chats under 5 a minute: %d", code)
		}
	}
	served := fake.RequestCount()
	resp := g.chat(ctx, key, plain)
	e := wantError(t, resp, http.StatusTooManyRequests, "rate_limit_exceeded")
	if ra, err := strconv.Atoi(resp.Header.Get("retry-after")); err != nil || ra < 55 || ra > 61 || resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("the 6th: retry-after %q, headers %v, %q", resp.Header.Get("retry-after"), resp.Header, e.Error.Message)
	}
	if fake.RequestCount() != served {
		t.Fatal("the refused 6th reached the provider")
	}
}

// TestRateLimitSDKRetry: the official OpenAI SDKs, Python and Node, retry a 429
// rate_limit_exceeded after its Retry-After (not sooner) and the retry succeeds: a key at 1
// request per minute, two calls in a row, seen on the wire as 200, 429, 200 (the retry a minute
// later, when the first call's second has left the window; both SDKs at once).
func TestRateLimitSDKRetry(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL(), sdkPricing), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "5"); err != nil {
		t.Fatal(err)
	}
	python, dir := sdkClients()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second) // the retry waits a minute
	defer cancel()
	py := exec.CommandContext(ctx, python, "-c", `
import os, time, openai
seen = []
def hook(r):
    seen.append((time.monotonic(), r.status_code, r.headers.get("retry-after"), r.headers.get("x-ratelimit-limit-requests")))
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=2,
                  http_client=openai.DefaultHttpxClient(event_hooks={"response": [hook]}))
for _ in range(2):
    r = c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content, r
assert [s[1] for s in seen] == [200, 429, 200], seen
assert int(seen[1][2]) >= 55 and seen[2][0] - seen[1][0] >= 0.9 * int(seen[1][2]), seen
assert all(s[3] == "1" for s in seen), seen
print("ok")
`)
	py.Env = append(os.Environ(), "BASE="+g.BaseURL, "KEY="+g.newKey("acme", "--rpm", "1"))
	node := exec.CommandContext(ctx, "node", "--input-type=module", "-e", `
import OpenAI from 'openai';
const seen = [];
const c = new OpenAI({ baseURL: process.env.BASE, apiKey: process.env.KEY, maxRetries: 2,
  fetch: async (url, init) => {
    const r = await fetch(url, init);
    seen.push([performance.now(), r.status, r.headers.get('retry-after'), r.headers.get('x-ratelimit-limit-requests')]);
    return r;
  } });
for (let i = 0; i < 2; i++) {
  const r = await c.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
  if (!r.choices[0].message.content) throw new Error('no content');
}
const codes = seen.map((s) => s[1]).join(',');
if (codes !== '200,429,200') throw new Error('statuses ' + JSON.stringify(seen));
const ra = Number(seen[1][2]);
if (!(ra >= 55) || seen[2][0] - seen[1][0] < 900 * ra) throw new Error('retried before Retry-After: ' + JSON.stringify(seen));
if (!seen.every((s) => s[3] === '1')) throw new Error('headers ' + JSON.stringify(seen));
console.log('ok');
`)
	node.Dir = dir
	node.Env = append(os.Environ(), "BASE="+g.BaseURL, "KEY="+g.newKey("acme", "--rpm", "1"))
	outs := make(chan string, 2)
	for name, cmd := range map[string]*exec.Cmd{"Python": py, "Node": node} {
		go func() {
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				outs <- fmt.Sprintf("OpenAI %s SDK: %v\n%s", name, err, out)
				return
			}
			outs <- ""
		}()
	}
	for range 2 {
		if msg := <-outs; msg != "" {
			t.Error(msg)
		}
	}
}

// TestX402PayerRateLimit: a paid endpoint's rate_limits count each payer's address: the
// request past them is 429 rate_limit_exceeded with Retry-After before its payment is verified
// (the facilitator hears nothing of it, nothing moves on chain, nothing is recorded); another
// endpoint is not limited by it.
func TestX402PayerRateLimit(t *testing.T) {
	t.Parallel()
	p := startPaid(t)
	r := p.payNode("chat-limited", paidChat)
	if r.Status != 200 || r.PaymentResponse["success"] != true || r.Headers["x-ratelimit-limit-requests"] != "1" || r.Headers["x-ratelimit-remaining-requests"] != "0" {
		t.Fatalf("first paid request: %+v", r)
	}
	p.waitRecords("x402.chat-limited", 1)
	verify, settle := p.facilitatorCalls()
	balance := p.tokenBalance(p.bed.PayerAddress)

	r = p.payNode("chat-limited", paidChat)
	e := r.wantError(t, http.StatusTooManyRequests, "rate_limit_exceeded")
	if ra, err := strconv.Atoi(r.Headers["retry-after"]); err != nil || ra < 1 || ra > 61 || !strings.Contains(e.Error.Message, "on requests per minute: limit 1;") {
		t.Fatalf("429: retry-after %q, %q", r.Headers["retry-after"], e.Error.Message)
	}
	if v, s := p.facilitatorCalls(); v != verify || s != settle {
		t.Fatalf("the refused request reached the facilitator: verify %d -> %d, settle %d -> %d", verify, v, settle, s)
	}
	if b := p.tokenBalance(p.bed.PayerAddress); b.Cmp(balance) != 0 {
		t.Fatalf("the refused request moved %s -> %s", balance, b)
	}
	if r := p.payNode("chat-mini", paidChat, "--scheme", "exact"); r.Status != 200 || r.Headers["x-ratelimit-limit-requests"] != "" {
		t.Fatalf("another endpoint: %+v", r)
	}
	time.Sleep(300 * time.Millisecond)
	if recs := p.waitRecords("x402.chat-limited", 1); len(recs) != 1 {
		t.Fatalf("the refused request was recorded: %d records", len(recs))
	}
}

// TestRateLimitFastLane: on the fast lane (routing.fast_lane) a stream's answer carries the
// x-ratelimit headers too, and its tokens are corrected at its end, from the access log: the
// next request (admitted at its own bound beside it) finds the stream's usage (prompt and
// completion, as its record says) counted, not the prompt's bound it was admitted with.
func TestRateLimitFastLane(t *testing.T) {
	t.Parallel()
	g, _ := startFastLane(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	const tpm = 600 // 10 tokens a second
	key := g.newKey("acme", "--tpm", strconv.Itoa(tpm))
	body := `{"model":"priced","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 60) + `"}]}`
	resp := g.chat(ctx, key, body)
	events := readStream(t, resp)
	estimate, err := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-tokens"))
	if resp.StatusCode != 200 || err != nil || resp.Header.Get("x-ratelimit-limit-tokens") != strconv.Itoa(tpm) {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	estimate = tpm - estimate
	rec := g.waitRecords("acme", 1)[0] // settled from its answer log entry
	used := int(rec.PromptTokens + rec.CompletionTokens)
	if used > estimate-50 && used < estimate+50 {
		t.Fatalf("the stream used %d tokens, admitted at %d: the test needs them far apart (%d events)", used, estimate, len(events))
	}
	resp = g.chat(ctx, key, body)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	left, err := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-tokens"))
	if resp.StatusCode != 200 || err != nil { // the stream's usage and this one's bound fit the minute
		t.Fatalf("the next request: %d %v", resp.StatusCode, resp.Header)
	}
	if counted := tpm - left - estimate; counted < used-20 || counted > used {
		t.Fatalf("the next request finds %d tokens counted; the stream used %d (admitted at %d)", counted, used, estimate)
	}
}

// TestRateLimitFastLaneCountsAsItGoes: a fast-lane stream's tokens are charged to its key's
// tokens per minute while it runs, from the stream meter's counts in the answer log's periodic
// entries, not only at its end: a request answered mid-stream finds them counted.
func TestRateLimitFastLaneCountsAsItGoes(t *testing.T) {
	t.Parallel()
	// The fake's name opens its answer: 3,000 characters the meter counts, for a short prompt
	// (about 1,000 tokens by the estimate, far past the prompt's bound admitted).
	g, _ := startFastLane(t, fakeupstream.Options{Name: strings.Repeat("n", 3000), ChunkDelay: 300 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	const tpm = 6000 // 100 tokens a second
	key := g.newKey("acme", "--tpm", strconv.Itoa(tpm))
	// About 20 chunks 300 ms apart: open for 6 s.
	stream := g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"`+strings.Repeat("word ", 16)+`"}]}`)
	defer stream.Body.Close()
	if stream.StatusCode != 200 {
		t.Fatalf("stream: %d", stream.StatusCode)
	}
	// Requests mid-stream find the stream's tokens counted once its name's chunk has passed
	// and a periodic entry has come (every 0.5 s).
	start, counted := time.Now(), 0
	for counted < 800 && time.Since(start) < 4*time.Second {
		time.Sleep(300 * time.Millisecond)
		resp := g.chat(ctx, key, `{"model":"priced","messages":[{"role":"user","content":"hi"}]}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		left, err := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-tokens"))
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("a request mid-stream: %d %v", resp.StatusCode, resp.Header)
		}
		counted = tpm - left
	}
	if counted < 800 {
		t.Fatalf("mid-stream, %d tokens counted after %v: the stream's 3,000 characters (about 1,000 tokens) are not charged as it goes", counted, time.Since(start).Round(time.Millisecond))
	}
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Fatal(err)
	}
}

// TestClusterRateLimit: a key's rate limit holds across three replicas on one database (each
// with its own Envoy): sent twice its requests per minute round-robin across them for 75 s,
// together they let through at most the limit plus one per replica in any 60 s window; the
// first replica admits its share at once, and the others theirs once the shares they were
// granted have been held 61 s (then the three let their traffic through in turn); every
// answer says the key's limit.
func TestClusterRateLimit(t *testing.T) {
	t.Parallel()
	gs := startCluster(t, pgDSN(t), 3, demoCatalog)
	if err := gs[0].NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	const rpm = 30
	key := gs[0].newKey("acme", "--rpm", strconv.Itoa(rpm))
	knowsKey(t, gs, key)
	const hello = `{"model":"demo-chat","messages":[{"role":"user","content":"Hello"}]}`
	const span = 75 * time.Second
	start := time.Now()
	var passed []time.Duration
	late := map[int]int{} // let through by each replica after its shares are usable
	var seq []string
	for i := 0; time.Since(start) < span; i++ {
		resp := gs[i%3].chat(context.Background(), key, hello)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("x-ratelimit-limit-requests") != strconv.Itoa(rpm) {
			t.Fatalf("replica %d: %d without the key's limit: %v", i%3+1, resp.StatusCode, resp.Header)
		}
		at := time.Since(start)
		seq = append(seq, fmt.Sprintf("%.1f:%c%d", at.Seconds(), 'a'+i%3, resp.StatusCode))
		switch resp.StatusCode {
		case 200:
			passed = append(passed, at)
			if at > 65*time.Second {
				late[i%3]++
			}
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("replica %d: %d", i%3+1, resp.StatusCode)
		}
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Minute / (2 * rpm))))
	}
	most := 0
	for hi, lo := 0, 0; hi < len(passed); hi++ {
		for passed[hi]-passed[lo] >= time.Minute {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	t.Logf("%v", seq)
	t.Logf("%d let through in %v at twice %d a minute across %d replicas, %d in the fullest 60 s (at most %d), after 65 s by replica %v", len(passed), span, rpm, len(gs), most, rpm+len(gs), late)
	if most > rpm+len(gs) || len(passed) < rpm/3 {
		t.Fatalf("%d let through in one 60 s window, %d in all: want at most %d, and the first replica's third at least", most, len(passed), rpm+len(gs))
	}
	if len(late) != 3 {
		t.Fatalf("after 65 s only replicas %v let requests through: the shares did not become usable", late)
	}
}

// TestRouteRateLimitThroughEnvoy: a route's rate_limits (the config file's routes: entry) count
// every request made through it, all keys together, through the real Envoy: two keys without
// limits of their own send 2 through route:shared (a minute's allowance), the third, from
// either key, is 429 rate_limit_exceeded with an integer Retry-After and the route's headers,
// its message naming the route, and reaches no provider; the same keys naming the model
// directly still pass.
func TestRouteRateLimitThroughEnvoy(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL(), sdkPricing)+`routes:
  - {name: shared, rule: priority_fallback, models: [gpt-4o-mini], rate_limits: {requests_per_minute: 2}}
`, "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "5"); err != nil {
		t.Fatal(err)
	}
	keys := []string{g.newKey("acme"), g.newKey("acme")}
	const viaRoute = `{"model":"route:shared","messages":[{"role":"user","content":"hello there"}]}`
	for i, key := range keys {
		resp := g.chat(ctx, key, viaRoute)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-limit-requests") != "2" || resp.Header.Get("x-ratelimit-remaining-requests") != fmt.Sprint(1-i) {
			t.Fatalf("request %d through the route: %d %v", i+1, resp.StatusCode, resp.Header)
		}
	}
	served := fake.RequestCount()
	for _, key := range keys {
		resp := g.chat(ctx, key, viaRoute)
		h := resp.Header
		e := wantError(t, resp, http.StatusTooManyRequests, "rate_limit_exceeded")
		ra, err := strconv.Atoi(h.Get("retry-after"))
		if err != nil || ra < 55 || ra > 61 || !strings.Contains(e.Error.Message, "route route:shared") ||
			!strings.Contains(e.Error.Message, "a higher limit on route route:shared") {
			t.Fatalf("429: retry-after %q, message %q", h.Get("retry-after"), e.Error.Message)
		}
		if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" {
			t.Fatalf("429 headers: %v", h)
		}
	}
	if fake.RequestCount() != served {
		t.Fatal("a refused request reached the provider")
	}
	const direct = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}`
	for _, key := range keys {
		resp := g.chat(ctx, key, direct)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-limit-requests") != "" {
			t.Fatalf("a direct request: %d %v", resp.StatusCode, resp.Header)
		}
	}

	// A route made with the CLI takes --rpm; routes list shows it; routes set-limit changes it
	// (PATCH /admin/v1/routes/{id}) and the next request is admitted under the new rates.
	if out, err := g.cli("routes", "create", "cli bot", "--rule", "priority_fallback", "--models", "gpt-4o-mini", "--rpm", "1"); err != nil {
		t.Fatalf("routes create --rpm: %v %s", err, out)
	}
	const viaCLIRoute = `{"model":"route:cli-bot","messages":[{"role":"user","content":"hello there"}]}`
	status := func() int {
		resp := g.chat(ctx, keys[0], viaCLIRoute)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := status(), status(); a != 200 || b != 429 {
		t.Fatalf("route:cli-bot at 1 a minute: %d then %d", a, b)
	}
	if out, err := g.cli("routes", "list"); err != nil || !strings.Contains(out, "1/none") || !strings.Contains(out, "2/none") {
		t.Fatalf("routes list: %v\n%s", err, out)
	}
	if out, err := g.cli("routes", "set-limit", "route:cli-bot", "--rpm", "none", "--tpm", "100000"); err != nil || !strings.Contains(out, "none/100000") {
		t.Fatalf("routes set-limit: %v %s", err, out)
	}
	if code := status(); code != 200 {
		t.Fatalf("route:cli-bot after set-limit --rpm none: %d", code)
	}
	if out, err := g.cli("routes", "set-limit", "route:shared", "--rpm", "10"); err == nil || !strings.Contains(out+err.Error(), "config_route") {
		t.Fatalf("routes set-limit of a config route: %v %s", err, out)
	}
}
