package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// The fast lane (routing.fast_lane, docs/performance.md#fast-lane): an OpenAI-shaped stream is
// metered in Envoy and billed from its access log entry, with no ext_proc message per chunk.

// startFastLane is startPriced on a split gateway.
func startFastLane(t *testing.T, opts fakeupstream.Options) (*gateway, *fakeupstream.Server) {
	t.Helper()
	opts.APIKey = providerKey
	fake := fakeupstream.Start(t, opts)
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")+"routing: {fast_lane: true}\n", "FAKE_PROVIDER_KEY="+providerKey)
	return g, fake
}

// extProcMessages is how many messages Envoy has sent to ext_proc so far, over every filter.
func (g *gateway) extProcMessages() float64 {
	g.t.Helper()
	status, body := g.adminRaw("GET", "/metrics/envoy", "", nil)
	if status != http.StatusOK {
		g.t.Fatalf("GET /metrics/envoy: %d %s", status, body)
	}
	var n float64
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "envoy_http_ext_proc") && strings.Contains(line, "stream_msgs_sent{") {
			if v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64); err == nil {
				n += v
			}
		}
	}
	return n
}

// TestFastLaneStreamsSkipExtProcPerChunk: a stream the client did not ask usage for passes no
// ext_proc message per chunk, gets the catalog model and no usage chunk, and is billed to the
// digit what the same request costs whole and on the chunk lane.
func TestFastLaneStreamsSkipExtProcPerChunk(t *testing.T) {
	t.Parallel()
	// A pause between chunks, so that Envoy reads them one by one whatever the machine's load.
	g, _ := startFastLane(t, fakeupstream.Options{ChunkDelay: 5 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	prompt := strings.Repeat("word ", 60)
	body := `{"model":"priced","messages":[{"role":"user","content":"` + prompt + `"}]`

	resp := g.chat(ctx, key, body+`}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("plain: %d %s", resp.StatusCode, raw)
	}

	before := g.extProcMessages()
	fastResp := g.chat(ctx, key, body+`,"stream":true}`)
	fastID := fastResp.Header.Get("x-request-id")
	events := readStream(t, fastResp)
	fast := g.extProcMessages() - before
	if len(events) < 30 {
		t.Fatalf("the stream had %d events; the test needs a long one", len(events))
	}
	if fast > 8 {
		t.Errorf("a fast-lane stream of %d events cost %v ext_proc messages: want a few for the request and the answer's headers, none per chunk", len(events), fast)
	}
	for _, e := range events[:len(events)-1] {
		var c struct {
			Model   string
			Usage   any
			Choices []any
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		if c.Model != "priced" {
			t.Errorf("event names model %q, want the catalog's %q: %s", c.Model, "priced", e)
		}
		if c.Usage != nil && len(c.Choices) == 0 {
			t.Errorf("client got the usage chunk the gateway asked for on its behalf: %s", e)
		}
	}

	before = g.extProcMessages()
	events = readStream(t, g.chat(ctx, key, body+`,"stream":true,"stream_options":{"include_usage":true}}`))
	chunk := g.extProcMessages() - before
	if chunk < float64(len(events))/4 { // a loaded Envoy may still read two events at once
		t.Errorf("a chunk-lane stream of %d events cost %v ext_proc messages, the fast lane's %v: the lanes did not differ", len(events), chunk, fast)
	}

	recs := g.waitRecords("acme", 3)
	for _, r := range recs {
		if r.Estimated || r.Model != "priced" || r.Provider != "fake" {
			t.Fatalf("record %+v", r)
		}
		if !r.Cost.Equal(recs[0].Cost) || r.PromptTokens != recs[0].PromptTokens || r.CompletionTokens != recs[0].CompletionTokens {
			t.Fatalf("the lane changed the bill: %+v vs %+v", r, recs[0])
		}
	}
	// Its access log line, written by Tollway once the stream was billed, has the bill.
	line := g.accessLine(fastID)
	for k, v := range map[string]any{"status": float64(200), "model": "priced", "provider": "fake", "account": "acme",
		"cost": recs[0].Cost.String(), "estimated": false, "method": "POST", "path": "/v1/chat/completions",
		"prompt_tokens": float64(recs[0].PromptTokens), "completion_tokens": float64(recs[0].CompletionTokens)} {
		if line[k] != v {
			t.Errorf("fast-lane access line %s = %v, want %v (%v)", k, line[k], v, line)
		}
	}
	if n := strings.Count(g.logs.String(), `"request_id":"`+fastID+`"`); n != 1 {
		t.Errorf("fast-lane stream %s has %d access log lines, want 1 (Tollway's, not Envoy's too)", fastID, n)
	}
	t.Logf("ext_proc messages for a stream of %d events: fast lane %v, chunk lane %v", len(events), fast, chunk)
}

// TestFastLaneIsTheDefault: with no routing section at all, an OpenAI-shaped stream takes the
// fast lane (a few ext_proc messages for a many-chunk answer) and is billed to the digit what
// the same request costs whole; a gateway set to routing.fast_lane: false streams the same
// answer through ext_proc chunk by chunk, billed the same.
func TestFastLaneIsTheDefault(t *testing.T) {
	t.Parallel()
	// A pause between chunks, so that Envoy reads them one by one whatever the machine's load.
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 5 * time.Millisecond})
	catalog := pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")
	if strings.Contains(catalog, "routing") {
		t.Fatal("the catalog sets routing: the test needs a configuration without it")
	}
	def := startGateway(t, catalog, "FAKE_PROVIDER_KEY="+providerKey)
	chunky := startGateway(t, catalog+"routing: {fast_lane: false}\n", "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	body := `{"model":"priced","messages":[{"role":"user","content":"` + strings.Repeat("word ", 60) + `"}]`
	stream := func(g *gateway) (events int, msgs float64) {
		t.Helper()
		before := g.extProcMessages()
		n := len(readStream(t, g.chat(ctx, g.newKey("acme"), body+`,"stream":true}`)))
		return n, g.extProcMessages() - before
	}
	for _, g := range []*gateway{def, chunky} {
		if err := g.NewAccount(ctx, "acme", "25"); err != nil {
			t.Fatal(err)
		}
	}
	resp := def.chat(ctx, def.newKey("acme"), body+`}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("plain: %d %s", resp.StatusCode, raw)
	}
	events, fast := stream(def)
	if events < 30 {
		t.Fatalf("the stream had %d events; the test needs a long one", events)
	}
	if fast > 8 {
		t.Errorf("with no routing config a stream of %d events cost %v ext_proc messages: want the fast lane's few, none per chunk", events, fast)
	}
	chunkEvents, chunk := stream(chunky)
	if chunk < float64(chunkEvents)/4 { // a loaded Envoy may still read two events at once
		t.Errorf("routing.fast_lane: false streamed %d events for %v ext_proc messages: want the chunk lane's, about one per chunk", chunkEvents, chunk)
	}
	recs := append(def.waitRecords("acme", 2), chunky.waitRecords("acme", 1)...)
	for _, r := range recs {
		if r.Estimated || !r.Cost.Equal(recs[0].Cost) || r.PromptTokens != recs[0].PromptTokens || r.CompletionTokens != recs[0].CompletionTokens {
			t.Fatalf("plain, default stream and chunk-lane stream billed differently: %+v", recs)
		}
	}
	t.Logf("ext_proc messages for a stream of %d events: default %v, fast_lane false %v", events, fast, chunk)
}

// TestFastLaneCutStreamsAreEstimated: a stream the provider drops and one the client hangs up
// on are billed as estimates of what passed, never free.
func TestFastLaneCutStreamsAreEstimated(t *testing.T) {
	t.Parallel()
	g, fake := startFastLane(t, fakeupstream.Options{ChunkDelay: 50 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	body := `{"model":"priced","stream":true,"messages":[{"role":"user","content":"one two three four five six seven eight nine ten"}]}`

	fake.CutStreamAfter(4) // the connection dropped: Envoy resets the client's stream too
	resp := g.chat(ctx, key, body)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()

	cctx, cancel := context.WithCancel(ctx)
	resp = g.chat(cctx, key, body)
	sc := bufio.NewScanner(resp.Body)
	for i := 0; i < 3 && sc.Scan(); i++ {
	}
	cancel()
	resp.Body.Close()

	recs := g.waitRecords("acme", 2)
	for _, r := range recs {
		if !r.Estimated || r.CompletionTokens == 0 || r.PromptTokens == 0 || !r.Cost.IsPositive() {
			t.Fatalf("cut stream record %+v: want an estimate of what was sent", r)
		}
	}
}

// TestFastLaneProviderErrorKeepsTheSpecShape: a provider's error on a fast-lane request is read
// whole (the answer filter asks for its body) and answered in the spec's shape, unbilled.
func TestFastLaneProviderErrorKeepsTheSpecShape(t *testing.T) {
	t.Parallel()
	g, fake := startFastLane(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	fake.FailNext(400, "bad things in the request")
	resp := g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct {
			Message, Code string
			RequestID     string `json:"request_id"`
		}
	}
	if resp.StatusCode != 400 || json.Unmarshal(raw, &e) != nil || e.Error.RequestID == "" || !strings.Contains(e.Error.Message, "bad things") {
		t.Fatalf("provider error: %d %s", resp.StatusCode, raw)
	}
	// A good stream afterwards is billed, and the failed one left no record.
	readStream(t, g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	recs := g.waitRecords("acme", 1)
	time.Sleep(200 * time.Millisecond)
	if recs = g.records("account=acme"); len(recs) != 1 || recs[0].Estimated {
		t.Fatalf("records %+v: want the one good stream, exact", recs)
	}
}

// TestFastLaneLongStreamsEndOnce: streams open past several of the answer log's periodic entries
// (ir.MeterReportEvery) are billed once, exactly, at their end (a periodic entry ends nothing),
// and each has one access log line, on either lane.
func TestFastLaneLongStreamsEndOnce(t *testing.T) {
	t.Parallel()
	g, _ := startFastLane(t, fakeupstream.Options{ChunkDelay: 60 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	body := `{"model":"priced","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 30) + `"}]`
	var ids []string
	for _, b := range []string{body + `}`, body + `,"stream_options":{"include_usage":true}}`} {
		start := time.Now()
		resp := g.chat(ctx, key, b)
		ids = append(ids, resp.Header.Get("x-request-id"))
		if events := readStream(t, resp); time.Since(start) < 1500*time.Millisecond {
			t.Fatalf("a stream of %d events took %v; the test needs one open past several periodic entries", len(events), time.Since(start))
		}
	}
	recs := g.waitRecords("acme", 2)
	time.Sleep(time.Second) // a record a late periodic entry wrongly settled would show by now
	if recs = g.waitRecords("acme", 2); len(recs) != 2 {
		t.Fatalf("%d records for 2 streams: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if r.Estimated || !r.Cost.Equal(recs[0].Cost) || r.CompletionTokens != recs[0].CompletionTokens {
			t.Fatalf("the lanes billed a long stream differently, or by an estimate: %+v", recs)
		}
	}
	for _, id := range ids {
		g.accessLine(id)
		if n := strings.Count(g.logs.String(), `"request_id":"`+id+`"`); n != 1 {
			t.Errorf("long stream %s has %d access log lines, want 1 (no periodic line)", id, n)
		}
	}
}
