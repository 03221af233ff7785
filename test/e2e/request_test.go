package e2e

// The request path's edges through the real Envoy: client identifiers, media type and size
// limits, internal headers, the model an answer names, and a provider refusing the gateway's
// credential.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/xds/ir"
)

const hello = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`

// post sends a chat request with the given headers (content-type JSON unless set).
func (g *gateway) post(key string, body io.Reader, size int64, headers map[string]string) *http.Response {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions", body)
	if err != nil {
		g.t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

var uuid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestRequestIDIsBounded: a client's x-request-id becomes part of usage record ids and logs.
// One over 128 bytes (a 40 KB one used to be accepted, and made the store refuse a whole batch
// of other tenants' records) or with characters outside visible ASCII is refused with a fresh
// id in both the header and the body; a valid one is kept.
func TestRequestIDIsBounded(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	for _, id := range []string{strings.Repeat("r", 40<<10), strings.Repeat("r", 129), "has space", "caf\u00e9"} {
		resp := g.post(key, strings.NewReader(hello), int64(len(hello)), map[string]string{"x-request-id": id})
		e := wantError(t, resp, 400, "invalid_request_id")
		if !uuid.MatchString(e.Error.RequestID) || !strings.Contains(e.Error.Message, "128") {
			t.Errorf("id %.20q: request_id %q, message %q", id, e.Error.RequestID, e.Error.Message)
		}
	}
	// Refused the same way where no body is read: the catalog, a wrong path.
	for _, path := range []string{"/models", "/nothing"} {
		req, _ := http.NewRequest(http.MethodGet, g.BaseURL+path, nil)
		req.Header.Set("x-request-id", strings.Repeat("x", 200))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, resp, 400, "invalid_request_id")
	}
	if n := fake.RequestCount(); n != 0 {
		t.Fatalf("refused requests reached the provider (%d)", n)
	}
	id := strings.Repeat("A", 128)
	resp := g.post(key, strings.NewReader(hello), int64(len(hello)), map[string]string{"x-request-id": id})
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-request-id") != id {
		t.Fatalf("a 128-byte id: status %d, x-request-id %q", resp.StatusCode, resp.Header.Get("x-request-id"))
	}
	if recs := g.waitRecords("acme", 1); !strings.HasPrefix(recs[0].RequestID, id+".") {
		t.Fatalf("usage record id %q does not carry the request id", recs[0].RequestID)
	}
}

// TestMediaTypeAndSizeLimits: a chat body must be JSON (415 otherwise; none at all is read as
// JSON) and at most 32 MiB, whether its size is declared or not (413 before the provider, which
// used to get bodies of 32-40 MiB and answer its own 413).
func TestMediaTypeAndSizeLimits(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		e := wantError(t, g.post(key, strings.NewReader(hello), int64(len(hello)), map[string]string{"content-type": ct}), 415, "unsupported_media_type")
		if !strings.Contains(e.Error.Message, "application/json") {
			t.Errorf("415 does not name the fix: %q", e.Error.Message)
		}
	}
	for _, ct := range []string{"", "application/json; charset=utf-8", "Application/JSON"} {
		resp := g.post(key, strings.NewReader(hello), int64(len(hello)), map[string]string{"content-type": ct})
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("content-type %q: status %d", ct, resp.StatusCode)
		}
	}
	served := fake.RequestCount()

	// One byte over the limit, declared or chunked (TestLargeBodyPasses sends exactly the limit).
	// An image: the fake echoes text prompts, and this is about the request.
	sized := func(n int) string {
		head := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,`
		tail := `"}}]}]}`
		return head + strings.Repeat("A", n-len(head)-len(tail)) + tail
	}
	over := sized(ir.MaxBodyBytes + 1)
	e := wantError(t, g.post(key, strings.NewReader(over), int64(len(over)), nil), 413, "request_too_large")
	if !strings.Contains(e.Error.Message, "32 MiB") {
		t.Errorf("413 message %q", e.Error.Message)
	}
	// Without content-length (chunked): refused once buffered.
	wantError(t, g.post(key, io.MultiReader(strings.NewReader(over)), -1, nil), 413, "request_too_large")
	if n := fake.RequestCount(); n != served {
		t.Fatalf("provider saw %d requests over the limit", n-served)
	}
}

// TestInternalHeadersNeverReachProviders: x-tollway-* and x-envoy-* headers a client sends are
// removed on the way in, and nothing of Tollway's or Envoy's own reaches the provider.
func TestInternalHeadersNeverReachProviders(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	sent := map[string]string{
		"x-tollway-provider": "evil", "x-tollway-phase": "upstream", "x-tollway-cluster": "provider.fake",
		"x-tollway-model": "gpt-4o-mini", "x-tollway-served": "fake/other", "x-envoy-original-path": "/admin",
		"x-envoy-max-retries": "7", "x-envoy-upstream-rq-timeout-ms": "1", "x-envoy-retry-on": "4xx",
		// A provider acts on headers of its own: a made-up organization turns the gateway's
		// key into a 401 for this client and marks the provider down for everyone.
		"openai-organization": "org-evil", "openai-project": "proj-evil", "anthropic-beta": "x",
		"cookie": "session=1", "accept-encoding": "gzip",
	}
	resp := g.post(key, strings.NewReader(hello), int64(len(hello)), sent)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("provider saw %d requests", len(reqs))
	}
	for k, v := range reqs[0].Header {
		if l := strings.ToLower(k); strings.HasPrefix(l, "x-tollway-") || strings.HasPrefix(l, "x-envoy-") || sent[l] != "" {
			t.Errorf("provider received %s: %v", k, v)
		}
	}
	if resp.Header.Get("x-tollway-provider") != "fake" {
		t.Errorf("x-tollway-provider on the answer = %q", resp.Header.Get("x-tollway-provider"))
	}
}

// TestAnswersNameTheCatalogModel: the model field of an answer, plain or streamed, is the
// catalog id the client can send again (it used to be the provider's name for it, which is in
// x-tollway-upstream-model), with billing on and off.
func TestAnswersNameTheCatalogModel(t *testing.T) {
	t.Parallel()
	for _, billing := range []bool{true, false} {
		t.Run(fmt.Sprintf("billing=%v", billing), func(t *testing.T) {
			opts := fakeupstream.Options{APIKey: providerKey, ChunkDelay: time.Millisecond}
			fake := fakeupstream.Start(t, opts)
			g := startGateway(t, catalog(fake.URL())+fmt.Sprintf("billing: {enabled: %v}\n", billing), "FAKE_PROVIDER_KEY="+providerKey)
			key := g.newKey("acme")
			resp := g.chat(context.Background(), key, hello)
			var plain struct {
				Model string `json:"model"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&plain); err != nil || plain.Model != "gpt-4o-mini" {
				t.Errorf("plain answer model %q (%v), want gpt-4o-mini", plain.Model, err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("x-tollway-upstream-model"); got != "fake-llama-3" {
				t.Errorf("x-tollway-upstream-model = %q", got)
			}
			resp = g.chat(context.Background(), key, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"one two three four"}]}`)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			chunks, usage := 0, 0
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var c struct {
					Model string          `json:"model"`
					Usage json.RawMessage `json:"usage"`
				}
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					t.Fatalf("chunk %q: %v", data, err)
				}
				if c.Model != "gpt-4o-mini" {
					t.Errorf("chunk names model %q: %s", c.Model, data)
				}
				if len(c.Usage) > 0 && string(c.Usage) != "null" {
					usage++
				}
				chunks++
			}
			if chunks < 5 || usage != 0 {
				t.Errorf("%d chunks, %d with usage (the client did not ask for it)", chunks, usage)
			}
		})
	}
}

// TestProviderRefusesTheGatewaysKey: a provider's 401 is the gateway's credential at fault
// (clients' keys never reach providers). The client gets 502 upstream_auth_failed (it used to
// get 401 invalid_api_key and would rotate a valid key), the log one ERROR line naming the
// provider, the catalog is_ready false until the provider answers again; a chain still falls
// back to the next provider.
func TestProviderRefusesTheGatewaysKey(t *testing.T) {
	t.Parallel()
	first := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	second := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, Name: "second"})
	cfg := fmt.Sprintf(`providers:
  - {name: first, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: second, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: solo
    providers: [{provider: first, model: m1}]
  - id: chained
    providers: [{provider: first, model: m1}, {provider: second, model: m2}]
`, first.URL(), second.URL())
	g := startGateway(t, cfg, "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	ready := func(id string) any {
		resp, err := http.Get(g.BaseURL + "/models/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return e["is_ready"]
	}
	waitFor(t, "solo to be ready", 10*time.Second, func() bool { return ready("solo") == true })

	first.FailNext(401, "Incorrect API key provided: sk-fa***cret.")
	e := wantError(t, g.chat(context.Background(), key, `{"model":"solo","messages":[{"role":"user","content":"hi"}]}`), 502, "upstream_auth_failed")
	if !strings.Contains(e.Error.Message, "first") || strings.Contains(e.Error.Message, "sk-") {
		t.Errorf("message %q: want the provider named, no key", e.Error.Message)
	}
	if ready("solo") != false {
		t.Error("solo still is_ready after its only provider refused the gateway's key")
	}
	logs := g.logs.String()
	if n := strings.Count(logs, "PROVIDER REFUSED THE GATEWAY'S CREDENTIAL"); n != 1 || !strings.Contains(logs, "provider=first") || strings.Contains(logs, providerKey) {
		t.Errorf("want one ERROR line naming the provider and not the key; %d lines in:\n%s", n, logs)
	}

	// A chain falls back past the refusing provider.
	first.FailNext(401, "")
	resp := g.chat(context.Background(), key, `{"model":"chained","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-tollway-provider") != "second" {
		t.Fatalf("chain after a 401: status %d from %q", resp.StatusCode, resp.Header.Get("x-tollway-provider"))
	}

	// A later answer from the provider clears it.
	resp = g.chat(context.Background(), key, `{"model":"solo","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || ready("solo") != true {
		t.Fatalf("after the provider answered again: status %d, is_ready %v", resp.StatusCode, ready("solo"))
	}

	// A refusal Envoy retried elsewhere is noticed too (the router's refusal log): the client
	// was served by the second provider, and the first counts as down.
	first.FailNext(401, "")
	resp = g.chat(context.Background(), key, `{"model":"chained","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-tollway-provider") != "second" {
		t.Fatalf("chain after a 401: status %d from %q", resp.StatusCode, resp.Header.Get("x-tollway-provider"))
	}
	waitFor(t, "the retried-away refusal to mark the first provider", 5*time.Second, func() bool { return ready("solo") == false })
}

// TestGeminiBadKeyIsACredentialRefusal: Gemini answers a bad API key with 400 INVALID_ARGUMENT,
// which used to reach the client as its own mistake and was not retried. It is a refused
// credential like any provider's 401: 502 upstream_auth_failed, and a chain falls back.
func TestGeminiBadKeyIsACredentialRefusal(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	cfg := fmt.Sprintf(`providers:
  - {name: gem, type: gemini, base_url: %s, api_key: "${WRONG_KEY}"}
  - {name: backup, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: solo
    providers: [{provider: gem, model: gemini-2.5-flash}]
  - id: chained
    providers: [{provider: gem, model: gemini-2.5-flash}, {provider: backup, model: m2}]
`, fake.GeminiURL(), fake.URL())
	g := startGateway(t, cfg, "FAKE_PROVIDER_KEY="+providerKey, "WRONG_KEY=not-the-key")
	key := g.newKey("acme")
	wantError(t, g.chat(context.Background(), key, `{"model":"solo","messages":[{"role":"user","content":"hi"}]}`), 502, "upstream_auth_failed")
	resp := g.chat(context.Background(), key, `{"model":"chained","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-tollway-provider") != "backup" {
		t.Fatalf("chain past a Gemini bad key: status %d from %q", resp.StatusCode, resp.Header.Get("x-tollway-provider"))
	}
	if !strings.Contains(g.logs.String(), "provider=gem") {
		t.Error("the refusal was not logged")
	}
}

// pausedReader yields first, waits pause, then yields rest: a client on a slow link.
type pausedReader struct {
	first, rest io.Reader
	pause       time.Duration
	paused      bool
}

func (r *pausedReader) Read(p []byte) (int, error) {
	if n, err := r.first.Read(p); n > 0 || err != io.EOF {
		return n, err
	}
	if !r.paused {
		r.paused = true
		time.Sleep(r.pause)
	}
	return r.rest.Read(p)
}

// TestSlowUploadIsRead: Envoy sends a body to ext_proc chunk by chunk while ext_proc holds its
// answer to the headers, and restarts its 5 s message timeout at every chunk; a body whose client
// pauses longer than that between chunks is still read whole (ext_proc asks Envoy for up to 60 s
// after each chunk of a body still being read) instead of failing as the gateway's fault.
func TestSlowUploadIsRead(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	text := strings.Repeat("slow ", 40<<10) // 200 KiB
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + text + `"}]}`
	half := 100 << 10
	resp := g.post(key, &pausedReader{first: strings.NewReader(body[:half]), rest: strings.NewReader(body[half:]), pause: 6 * time.Second}, int64(len(body)), nil)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d after a 6 s pause mid-upload: %.300s", resp.StatusCode, raw)
	}
	if reqs := fake.Requests(); len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), text) {
		t.Fatal("the provider did not receive the whole body")
	}
	// Without a content-length (chunked): Envoy buffers it (its route is a -buffered one) and
	// ext_proc reads it whole, as for any body of 1,000,000 bytes or more.
	big := strings.Repeat("chunked ", 256<<10) // 2 MiB
	resp = g.post(key, io.MultiReader(strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`), strings.NewReader(big), strings.NewReader(`"}]}`)), -1, nil)
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chunked 2 MiB body: status %d: %.300s", resp.StatusCode, raw)
	}
	if reqs := fake.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), big) {
		t.Fatal("the provider did not receive the whole chunked body")
	}
}
