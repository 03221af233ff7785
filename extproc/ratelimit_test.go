package extproc

import (
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// rateKeyed serves key_valid with the rates given and credits.
func rateKeyed(t *testing.T, credits string, rpm, tpm *int64) *envoy {
	e, _, _ := billedServer(t, credits, nil)
	k := keyRecord("key_valid", validSecret, false)
	k.RateLimits = &store.RateLimits{RequestsPerMinute: rpm, TokensPerMinute: tpm}
	e.srv.Swap(core.Compile(pricedGateway(t), []store.Key{k}))
	return e
}

func n64(v int64) *int64 { return &v }

// TestRateLimitHeadersAnd429: an answer to a key with rates carries the x-ratelimit headers
// (limit, remaining, reset as OpenAI writes them); the request past the rate is refused at its
// body with 429 rate_limit_exceeded, an integer Retry-After and the same headers, and nothing
// is held or billed for it.
func TestRateLimitHeadersAnd429(t *testing.T) {
	e := rateKeyed(t, "1000", n64(1), n64(100000))
	auth := "Bearer " + validSecret
	s := e.open()
	s.roundTrip(chatHeaders(auth, "r1", true))
	s.roundTrip(requestBody(shortPrompt))
	resp := s.roundTrip(servedHeaders("200", "application/json", "openai/gpt"))
	h := setHeaders(t, resp.GetResponseHeaders().GetResponse().GetHeaderMutation())
	if h["x-ratelimit-limit-requests"] != "1" || h["x-ratelimit-remaining-requests"] != "0" || !resetNear(h["x-ratelimit-reset-requests"], time.Minute) ||
		h["x-ratelimit-limit-tokens"] != "100000" || !resetNear(h["x-ratelimit-reset-tokens"], time.Minute) {
		t.Fatalf("answer headers %v", h) // reset: until this second leaves the window, 60 to 61 s
	}
	if rem, err := strconv.Atoi(h["x-ratelimit-remaining-tokens"]); err != nil || rem >= 100000 || rem < 99000 {
		t.Fatalf("remaining tokens %q: want the prompt's estimate taken from 100000", h["x-ratelimit-remaining-tokens"])
	}
	s.roundTrip(responseBody(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hey"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`))
	s.close()

	s = e.open()
	s.roundTrip(chatHeaders(auth, "r2", true))
	resp = s.roundTrip(requestBody(shortPrompt))
	im := resp.GetImmediateResponse()
	if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), `"code":"rate_limit_exceeded"`) || !strings.Contains(string(im.Body), "on requests per minute: limit 1;") {
		t.Fatalf("want 429 rate_limit_exceeded, got %v", resp)
	}
	h = setHeaders(t, im.Headers)
	if ra, err := strconv.Atoi(h["retry-after"]); err != nil || ra < 60 || ra > 61 { // when the first request's second leaves the window
		t.Fatalf("retry-after %q", h["retry-after"])
	}
	if h["x-ratelimit-limit-requests"] != "1" || h["x-ratelimit-remaining-requests"] != "0" || h["x-ratelimit-limit-tokens"] != "100000" {
		t.Fatalf("429 headers %v", h)
	}
	s.close()
	if status, body := getKey(t, e, "GET", auth); status != 200 || !strings.Contains(string(body), `"rate_limits":{"requests_per_minute":1,"tokens_per_minute":100000}`) {
		t.Fatalf("GET /v1/key: %d %s", status, body)
	}
	if _, held := e.srv.sh.Books.Ledger.KeyMonth("key_valid", testNow); !held.IsZero() {
		t.Fatalf("a refused request holds %s", held)
	}
}

// resetNear reports whether an x-ratelimit-reset text is between d and d + 1 s.
func resetNear(text string, d time.Duration) bool {
	got, err := time.ParseDuration(text)
	return err == nil && got >= d && got <= d+time.Second
}

// TestRateRequestOverTheWholeLimit: a request whose prompt alone is over its key's tokens per
// minute can never pass: 429 rate_limit_exceeded saying so (and to ask for a higher limit),
// Retry-After 60, charged nothing.
func TestRateRequestOverTheWholeLimit(t *testing.T) {
	e := rateKeyed(t, "1000", n64(10), n64(5))
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	resp := s.roundTrip(requestBody(`{"model":"gpt","messages":[{"role":"user","content":"` + strings.Repeat("many words here ", 20) + `"}]}`))
	im := resp.GetImmediateResponse()
	if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), `"code":"rate_limit_exceeded"`) ||
		!strings.Contains(string(im.Body), "this request alone is over the rate limit on tokens per minute") || !strings.Contains(string(im.Body), "limit 5;") ||
		!strings.Contains(string(im.Body), "higher limit") {
		t.Fatalf("want 429 rate_limit_exceeded saying the request alone is over the limit, got %v", resp)
	}
	if h := setHeaders(t, im.Headers); h["retry-after"] != "60" || h["x-ratelimit-remaining-requests"] != "10" || h["x-ratelimit-remaining-tokens"] != "5" {
		t.Fatalf("429 headers %v", h)
	}
	s.close()
}

// TestRateTooLargeCountsTokens: the prompt's bound (a byte a token) is about four times an
// English prompt's tokens; a request is refused as over the whole tokens per minute only when
// its tokens counted are, and the refusal names them, not the bound, and no max_tokens (which
// the rate does not count).
func TestRateTooLargeCountsTokens(t *testing.T) {
	e := rateKeyed(t, "1000", nil, n64(100))
	words := strings.Repeat("many words here ", 20) // 320 bytes, 61 tokens
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	resp := s.roundTrip(requestBody(`{"model":"gpt","max_tokens":5000,"messages":[{"role":"user","content":"` + words + `"}]}`))
	if im := resp.GetImmediateResponse(); im != nil {
		t.Fatalf("a prompt of about 70 tokens under 100 a minute: %d %s", im.Status.Code, im.Body)
	}
	s.close()
	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r2", true))
	resp = s.roundTrip(requestBody(`{"model":"gpt","messages":[{"role":"user","content":"` + strings.Repeat(words, 3) + `"}]}`))
	im := resp.GetImmediateResponse()
	if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), "this request alone is over the rate limit on tokens per minute: about 18") ||
		strings.Contains(string(im.Body), "max_tokens") {
		t.Fatalf("want 429 naming about 18x tokens counted and no max_tokens, got %v", resp)
	}
	s.close()
}

// TestRateRefundedWhenHoldRefused: a request admitted by its rates and then refused by its hold
// (402) gives its rate back: the next one is refused for credits again, not for its rate.
func TestRateRefundedWhenHoldRefused(t *testing.T) {
	e := rateKeyed(t, "5", n64(1), nil)
	for _, id := range []string{"r1", "r2"} {
		s := e.open()
		s.roundTrip(chatHeaders("Bearer "+validSecret, id, true))
		resp := s.roundTrip(requestBody(shortPrompt))
		im := resp.GetImmediateResponse()
		if im == nil || im.Status.Code != 402 {
			t.Fatalf("%s: want 402 insufficient_credits, got %v", id, resp)
		}
		if h := setHeaders(t, im.Headers); h["x-ratelimit-remaining-requests"] != "1" {
			t.Fatalf("%s: a refused request's headers %v", id, h)
		}
		s.close()
	}
}

// TestRateStreamCountsAsItGoes: a stream's tokens are charged to its key's tokens per minute
// while it runs (at most once a second), not only at its end, and its end corrects the count
// to the provider's usage.
func TestRateStreamCountsAsItGoes(t *testing.T) {
	e := rateKeyed(t, "1000000", nil, n64(6000)) // 100 tokens a second
	lim := ratelimit.Limits{Tokens: 6000}
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	s.roundTrip(requestBody(`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	s.roundTrip(sseHeaders())
	admitted := e.srv.sh.Rates.Peek("key:key_valid", lim).Tokens.Remaining
	long := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("word ", 1000) + "\"}}]}\n\n"
	time.Sleep(1100 * time.Millisecond) // past the first second: the next chunk is charged
	s.roundTrip(bodyChunk(long, false))
	s.roundTrip(bodyChunk(long, false))
	mid := e.srv.sh.Rates.Peek("key:key_valid", lim).Tokens.Remaining
	if admitted-mid < 800 {
		t.Fatalf("remaining tokens %d at admission, %d after 2000 words streamed: the stream is not counted as it goes", admitted, mid)
	}
	s.roundTrip(bodyChunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":10}}\n\ndata: [DONE]\n\n", true))
	s.close()
	if end := e.srv.sh.Rates.Peek("key:key_valid", lim).Tokens.Remaining; end < 6000-20 {
		t.Fatalf("after usage of 15 tokens: %d remaining, want about 5985", end)
	}
}

// TestRateLimitMediaCreate: a media create is admitted by its key's rates like a chat request
// (the shared key-admission step): over them it is 429 rate_limit_exceeded and no provider is
// called.
func TestRateLimitMediaCreate(t *testing.T) {
	k := keyRecord("key_valid", validSecret, false)
	k.RateLimits = &store.RateLimits{RequestsPerMinute: n64(1)}
	e, calls := busyTasks(t, k)
	if g, _, _ := e.srv.sh.Rates.Admit("key:key_valid", ratelimit.Limits{Requests: 1}, 0); g == nil { // the key's one request this minute
		t.Fatal("the key's first request was refused")
	}
	s := e.open()
	s.roundTrip(requestHeaders(false, hdr(":method", "POST", true), hdr(":path", "/v1/videos", true),
		hdr("authorization", "Bearer "+validSecret, true), hdr("content-type", "application/json", true)))
	out, _ := s.answers(1, requestBody(`{"model":"hailuo-02","prompt":"a cat"}`))
	im := out[0].GetImmediateResponse()
	if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), `"code":"rate_limit_exceeded"`) || setHeaders(t, im.Headers)["retry-after"] == "" {
		t.Fatalf("a media create over its key's rate: %v", out[0])
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the provider was called %d times", n)
	}
}

// TestRouteRateLimit: a route's rates count every request made through it, all keys together,
// on top of each key's own: two keys without limits share a route of 2 requests a minute, so
// the third request through it, from either key, is 429 rate_limit_exceeded naming the route
// (with the route's headers, the keys having none); the same keys naming the model directly
// are not limited by the route.
func TestRouteRateLimit(t *testing.T) {
	g := pricedGateway(t)
	g.Routes = append(g.Routes, ir.Route{Name: "bot", ID: "route:bot", Rule: ir.RulePriorityFallback, Models: []string{"gpt"},
		Status: ir.RouteActive, RateLimits: ir.RateLimits{RequestsPerMinute: 2}})
	other := testSecret(9)
	e := startServer(t, core.Compile(g, []store.Key{keyRecord("key_valid", validSecret, false), keyRecord("key_other", other, false)}))
	const viaRoute = `{"model":"route:bot","messages":[{"role":"user","content":"hi"}]}`
	send := func(secret, body string) *extprocv3.ProcessingResponse {
		s := e.open()
		defer s.close()
		s.roundTrip(chatHeaders("Bearer "+secret, "r", true))
		return s.roundTrip(requestBody(body))
	}
	for i, secret := range []string{validSecret, other} {
		if im := send(secret, viaRoute).GetImmediateResponse(); im != nil {
			t.Fatalf("request %d through the route: %d %s", i+1, im.Status.Code, im.Body)
		}
	}
	for _, secret := range []string{validSecret, other} {
		im := send(secret, viaRoute).GetImmediateResponse()
		if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), `"code":"rate_limit_exceeded"`) ||
			!strings.Contains(string(im.Body), "on requests per minute of route route:bot") || !strings.Contains(string(im.Body), "a higher limit on route route:bot") {
			t.Fatalf("third request through the route: want 429 naming the route, got %v", im)
		}
		h := setHeaders(t, im.Headers)
		if ra, err := strconv.Atoi(h["retry-after"]); err != nil || ra < 59 || ra > 61 || h["x-ratelimit-limit-requests"] != "2" || h["x-ratelimit-remaining-requests"] != "0" {
			t.Fatalf("429 headers %v", h)
		}
	}
	for i := range 5 {
		for _, secret := range []string{validSecret, other} {
			if im := send(secret, shortPrompt).GetImmediateResponse(); im != nil {
				t.Fatalf("direct request %d: %d %s", i, im.Status.Code, im.Body)
			}
		}
	}
}

// TestRouteAndKeyRates: a key with rates of its own through a route with rates: the answer's
// x-ratelimit headers are the key's (OpenAI sends one set); a request the route refuses gives
// the key's count back; a prompt over the route's whole tokens per minute is told so, naming
// the route.
func TestRouteAndKeyRates(t *testing.T) {
	g := pricedGateway(t)
	g.Routes = append(g.Routes, ir.Route{Name: "bot", ID: "route:bot", Rule: ir.RulePriorityFallback, Models: []string{"gpt"},
		Status: ir.RouteActive, RateLimits: ir.RateLimits{RequestsPerMinute: 1}},
		ir.Route{Name: "tiny", ID: "route:tiny", Rule: ir.RulePriorityFallback, Models: []string{"gpt"},
			Status: ir.RouteActive, RateLimits: ir.RateLimits{TokensPerMinute: 5}})
	k := keyRecord("key_valid", validSecret, false)
	k.RateLimits = &store.RateLimits{RequestsPerMinute: n64(10)}
	e := startServer(t, core.Compile(g, []store.Key{k}))
	send := func(body string) *extprocv3.ProcessingResponse {
		s := e.open()
		defer s.close()
		s.roundTrip(chatHeaders("Bearer "+validSecret, "r", true))
		return s.roundTrip(requestBody(body))
	}
	const viaBot = `{"model":"route:bot","messages":[{"role":"user","content":"hi"}]}`
	if im := send(viaBot).GetImmediateResponse(); im != nil {
		t.Fatalf("first through route:bot: %v", im)
	}
	im := send(viaBot).GetImmediateResponse()
	if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), "route route:bot") {
		t.Fatalf("second through route:bot (1 a minute): %v", im)
	}
	if h := setHeaders(t, im.Headers); h["x-ratelimit-limit-requests"] != "1" { // the route's state refused it
		t.Fatalf("429 headers %v", h)
	}
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r", true))
	resp := s.roundTrip(requestBody(shortPrompt))
	if resp.GetImmediateResponse() != nil {
		t.Fatalf("a direct request: %v", resp)
	}
	resp = s.roundTrip(servedHeaders("200", "application/json", "openai/gpt"))
	h := setHeaders(t, resp.GetResponseHeaders().GetResponse().GetHeaderMutation())
	s.close()
	if h["x-ratelimit-limit-requests"] != "10" || h["x-ratelimit-remaining-requests"] != "8" { // 2 admitted by the key: the refused one was given back
		t.Fatalf("the key's headers after the route's refusal: %v", h)
	}
	im = send(`{"model":"route:tiny","messages":[{"role":"user","content":"` + strings.Repeat("many words here ", 5) + `"}]}`).GetImmediateResponse()
	if im == nil || im.Status.Code != 429 || !strings.Contains(string(im.Body), "over the rate limit on tokens per minute of route route:tiny") {
		t.Fatalf("a prompt over route:tiny's whole tokens per minute: %v", im)
	}
}
