package e2e

// What the gateway does when its store cannot make records durable (a full filesystem, for
// real: a small tmpfs), and what a kill -9 leaves of the requests in flight.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// durableCatalog: a priced chat model on the fake and a MiniMax video model on it.
func durableCatalog(fake *fakeupstream.Server) string {
	return fmt.Sprintf(`providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: priced
    providers: [{provider: fake, model: fake-priced}]
    context_length: 128000
    max_output_length: 1000
    pricing: {prompt: "0.000001", completion: "0.000002", request: "0.0001"}
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
`, fake.URL(), fake.MiniMaxURL())
}

// durableGateway starts a gateway with its store in dir and durableCatalog, account acme
// holding credits: the gateway, a key of acme, and what starts it again on the same store.
func durableGateway(t *testing.T, dir string, fake *fakeupstream.Server, credits string, env ...string) (*gateway, string, func() *gateway) {
	t.Helper()
	start := func() *gateway {
		return startWith(t, harness.Options{Dir: dir, Body: durableCatalog(fake), Env: append([]string{"FAKE_PROVIDER_KEY=" + providerKey}, env...)})
	}
	g := start()
	if err := g.NewAccount(context.Background(), "acme", credits); err != nil {
		t.Fatal(err)
	}
	return g, g.newKey("acme"), start
}

// served sends one chat request with id as its x-request-id: status and error code.
func (g *gateway) served(key, id string) (int, string) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions",
		strings.NewReader(`{"model":"priced","messages":[{"role":"user","content":"keep the books when the disk is full"}]}`))
	req.Header.Set("authorization", "Bearer "+key)
	req.Header.Set("x-request-id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e apiError
	_ = jsonUnmarshal(string(raw), &e)
	return resp.StatusCode, e.Error.Code
}

// recordsByRequest are account's usage records by the client's x-request-id (a record's id
// adds a suffix to it), and what they cost in all; a request recorded twice fails the test.
func (g *gateway) recordsByRequest(account string) (map[string]usageRecord, decimal.Decimal) {
	g.t.Helper()
	out, sum := map[string]usageRecord{}, decimal.Zero
	for _, r := range g.records("account=" + account) {
		id, _, _ := strings.Cut(r.RequestID, ".")
		if _, dup := out[id]; dup {
			g.t.Fatalf("request %s recorded twice", id)
		}
		out[id] = r
		sum = sum.Add(r.Cost)
	}
	return out, sum
}

// storeState is GET /admin/v1/status's store.
func (g *gateway) storeState() map[string]any {
	g.t.Helper()
	_, st := g.adminJSON("GET", "/admin/v1/status", nil)
	s, _ := st["store"].(map[string]any)
	return s
}

// metric is the value of a metric line (name with its labels) in GET /metrics, "" if absent.
func (g *gateway) metric(name string) string {
	g.t.Helper()
	_, body := g.adminRaw("GET", "/metrics", "", nil)
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// untilRefused sends requests one after another until one is refused with 503
// store_unavailable (at most for 3 s): the ids answered 200 before it, and when it came.
func (g *gateway) untilRefused(key, prefix string, since time.Time) (answered []string, refusedAfter time.Duration) {
	g.t.Helper()
	for i := 0; time.Since(since) < 3*time.Second; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		switch status, code := g.served(key, id); {
		case status == 200:
			answered = append(answered, id)
		case status == 503 && code == "store_unavailable":
			return answered, time.Since(since)
		default:
			g.t.Fatalf("request %s while the disk is full: %d %s", id, status, code)
		}
	}
	g.t.Fatalf("the disk is full and %d requests were answered 200 in 3s, none refused with 503 store_unavailable: they are served unbilled", len(answered))
	return nil, 0
}

// TestFullDiskFailsClosed: with the store on a filesystem that fills up, the gateway refuses
// billable requests and task creates with 503 store_unavailable within a second (no video is
// created at the provider), status, /metrics and the log say so, it serves again by itself
// once space is freed, and every request it answered has its record, a kill -9 during the
// outage included.
func TestFullDiskFailsClosed(t *testing.T) {
	// Runs alone (no t.Parallel): it asserts a refusal within a second.
	disk := harness.SmallDisk(t, 48<<20)
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g, key, start := durableGateway(t, disk, fake, "1000")
	ctx := context.Background()
	answered := map[string]bool{}
	for i := range 10 {
		id := fmt.Sprintf("before-%d", i)
		if status, code := g.served(key, id); status != 200 {
			t.Fatalf("%s: %d %s", id, status, code)
		}
		answered[id] = true
	}
	g.waitRecords("acme", 10)
	if s := g.storeState(); s["state"] != "ok" {
		t.Fatalf("store before the disk filled: %v", s)
	}

	// The disk fills: refused within a second, however the store finds out.
	free := harness.FillDisk(t, disk)
	ids, after := g.untilRefused(key, "full", time.Now())
	for _, id := range ids {
		answered[id] = true
	}
	if after > time.Second {
		t.Fatalf("first 503 store_unavailable %v after the disk filled (%d answered meanwhile); want within 1s", after, len(ids))
	}
	for i := range 20 {
		if status, code := g.served(key, fmt.Sprintf("refused-%d", i)); status != 503 || code != "store_unavailable" {
			t.Fatalf("request %d on a full disk: %d %s, want 503 store_unavailable", i, status, code)
		}
	}
	wantError(t, g.chat(ctx, key, `{"model":"priced","stream":true,"messages":[{"role":"user","content":"hi"}]}`), 503, "store_unavailable")
	if s := g.storeState(); s["state"] != "unavailable" || s["cause"] != "disk full" || !strings.Contains(fmt.Sprint(s["error"]), "no space left on device") {
		t.Fatalf("status's store on a full disk: %v", s)
	}
	if v := g.metric("tollway_store_available"); v != "0" {
		t.Fatalf("tollway_store_available %q on a full disk, want 0", v)
	}
	if !strings.Contains(g.logs.String(), "STORE UNAVAILABLE") {
		t.Fatal("no STORE UNAVAILABLE in the log")
	}
	// A task create is refused before any provider is asked: no video the operator pays for
	// and nobody can see.
	creates := func() int {
		n := 0
		for _, r := range fake.Requests() {
			if r.Path == "/v1/video_generation" {
				n++
			}
		}
		return n
	}
	if code, obj := g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a fox","duration":6,"resolution":"768P"}`); code != 503 || obj["error"].(map[string]any)["code"] != "store_unavailable" {
		t.Fatalf("video create on a full disk: %d %v", code, obj)
	}
	if n := creates(); n != 0 {
		t.Fatalf("%d video creates reached the provider while the store was full", n)
	}

	// Space comes back: the gateway serves again by itself, and what it answered is on disk.
	free()
	back := time.Now()
	waitFor(t, "requests served again", 5*time.Second, func() bool {
		status, _ := g.served(key, fmt.Sprintf("back-%d", time.Now().UnixNano()))
		return status == 200
	})
	t.Logf("served again %v after space was freed", time.Since(back).Round(time.Millisecond))
	if s := g.storeState(); s["state"] != "ok" {
		t.Fatalf("store after space was freed: %v", s)
	}
	if v := g.metric("tollway_store_available"); v != "1" {
		t.Fatalf("tollway_store_available %q after recovery, want 1", v)
	}
	if code, obj := g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a fox","duration":6,"resolution":"768P"}`); code != 200 {
		t.Fatalf("video create after recovery: %d %v", code, obj)
	}

	// Full again, and the gateway is killed during the outage: nothing it answered is lost.
	// Its records are written (on the reserve, or in the room the gateway keeps free) instead
	// of waiting in memory: nothing is left queued once a group commit had its time.
	free = harness.FillDisk(t, disk)
	ids, _ = g.untilRefused(key, "again", time.Now())
	for _, id := range ids {
		answered[id] = true
	}
	waitFor(t, "nothing queued during the outage", time.Second, func() bool { return g.storeState()["queued"] == 0.0 })
	g.Kill()
	free()
	g2 := start()
	seen, sum := g2.recordsByRequest("acme")
	for id := range answered {
		if _, ok := seen[id]; !ok {
			t.Errorf("request %s was answered 200 and has no usage record after the kill", id)
		}
	}
	if bal := g2.balance("acme"); !bal.Add(sum).Equal(decimal.NewFromInt(1000)) {
		t.Fatalf("balance %s + recorded %s != 1000", bal, sum)
	}
	t.Logf("%d requests answered across two outages and a kill -9, each recorded; first refusal %v after the disk filled", len(answered), after.Round(time.Millisecond))
}

// TestKill9MidStreamBillsEstimates: 100 streams cut by kill -9 each leave a record at the next
// start: an estimate (estimated, estimate_reason gateway_restart) of the prompt and the
// completion checkpointed while they streamed, debited like any record. On the chunk lane
// (routing.fast_lane: false), which checkpoints from the chunks themselves: its 2 s cut comes
// before a fast-lane checkpoint is sure to be due (TestFastLaneKill9MidStreamBillsEstimates).
func TestKill9MidStreamBillsEstimates(t *testing.T) {
	t.Parallel()
	kill9MidStream(t, 100, cutStreams{wait: 20, perChunk: 1}, "TOLLWAY_ROUTING_FAST_LANE=false")
}

// TestFastLaneKill9MidStreamBillsEstimates: the same on the fast lane (the default, set here all
// the same), where ext_proc sees no chunk: the stream meter's counts reach Tollway in the answer
// log's periodic entries, which checkpoint the stream's progress as the chunk lane's chunks do.
func TestFastLaneKill9MidStreamBillsEstimates(t *testing.T) {
	t.Parallel()
	// A periodic entry every 0.5 s (ir.MeterReportEvery) checkpoints at most every second: by 4 s
	// (40 chunks) a loaded machine has checkpointed each stream past its first 64 bytes
	// at least twice. The estimate counts 3 bytes a token (billing.TokensFromBytes): up to
	// 2 a word of the fake's.
	kill9MidStream(t, 20, cutStreams{wait: 40, perChunk: 2}, "TOLLWAY_ROUTING_FAST_LANE=true")
}

// cutStreams is how far kill9MidStream lets its streams run (wait chunks each) and how many
// completion tokens a chunk may be billed at most.
type cutStreams struct{ wait, perChunk int }

// kill9MidStream cuts n streams by kill -9 of a gateway started with env and checks each is
// billed at the next start from its checkpointed progress.
func kill9MidStream(t *testing.T, n int, cut cutStreams, env ...string) {
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 100 * time.Millisecond, NoRecord: true})
	g, key, start := durableGateway(t, t.TempDir(), fake, "100", env...)
	// The fake echoes the prompt a word per chunk: about 60 chunks, 6 s a stream.
	prompt := strings.Repeat("tell me a long story about the sea ", 8)
	body := fmt.Sprintf(`{"model":"priced","stream":true,"messages":[{"role":"user","content":%q}]}`, prompt)
	var mu sync.Mutex
	chunks := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("cut-%03d", i)
			req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions", strings.NewReader(body))
			req.Header.Set("authorization", "Bearer "+key)
			req.Header.Set("x-request-id", id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("stream %s: %d", id, resp.StatusCode)
				return
			}
			buf := make([]byte, 4096)
			for {
				k, err := resp.Body.Read(buf)
				mu.Lock()
				chunks[id] += strings.Count(string(buf[:k]), "data: ")
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	// Every stream well under way (several checkpoints each), none finished.
	waitFor(t, fmt.Sprintf("every stream past %d chunks", cut.wait), 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(chunks) < n {
			return false
		}
		for _, c := range chunks {
			if c < cut.wait {
				return false
			}
		}
		return true
	})
	g.Kill()
	wg.Wait()

	g2 := start()
	got, sum := g2.recordsByRequest("acme")
	for i := range n {
		id := fmt.Sprintf("cut-%03d", i)
		r, ok := got[id]
		switch {
		case !ok:
			t.Errorf("stream %s (%d chunks) was cut by kill -9 and has no record", id, chunks[id])
		case !r.Estimated || r.EstimateReason != "gateway_restart":
			t.Errorf("stream %s: record %+v, want estimated with estimate_reason gateway_restart", id, r)
		case r.PromptTokens <= 0 || r.CompletionTokens < 5 || r.CompletionTokens > int64(cut.perChunk*chunks[id])+5:
			// A chunk is a word of the answer, a few tokens for "fake/fake-priced:".
			t.Errorf("stream %s: %d prompt and %d completion tokens; the client got %d chunks", id, r.PromptTokens, r.CompletionTokens, chunks[id])
		}
	}
	if bal := g2.balance("acme"); !bal.Add(sum).Equal(decimal.NewFromInt(100)) {
		t.Fatalf("balance %s + recorded %s != 100", bal, sum)
	}
	if s := g2.usage("account=acme"); s.EstimatedRequests != int64(n) || !s.Cost.Equal(sum) {
		t.Fatalf("usage %+v: want %d estimated requests costing %s", s, n, sum)
	}
	t.Logf("%d streams cut by kill -9, each billed at the next start; %s in all", len(got), sum)
}

// TestFullDiskRefusesPaidRequests: with the store's disk full, a paid request is refused with
// 503 store_unavailable before its credential is used: the facilitator is never called, the
// payer keeps its money, and the same credential pays once the store is back.
func TestFullDiskRefusesPaidRequests(t *testing.T) {
	t.Parallel()
	disk := harness.SmallDisk(t, 48<<20)
	p := startPaidIn(t, disk)
	sig := p.capture("chat-mini", paidChat, "--scheme", "exact").Signature
	verify, settle := p.facilitatorCalls()
	payer := p.tokenBalance(p.bed.PayerAddress)

	free := harness.FillDisk(t, disk)
	waitFor(t, "the store's outage", time.Second, func() bool { return p.storeState()["state"] == "unavailable" })
	wantPayError(t, p.paidDo("POST", "/x402/chat-mini", paidChat, nil), 503, "store_unavailable")
	wantPayError(t, p.paidDo("POST", "/x402/chat-mini", paidChat, map[string]string{"payment-signature": sig}), 503, "store_unavailable")
	wantPayError(t, p.paidDo("POST", "/x402/video", `{"model":"hailuo-02","prompt":"a fox","duration":6,"resolution":"768P"}`, nil), 503, "store_unavailable")
	if v, s := p.facilitatorCalls(); v != verify || s != settle {
		t.Fatalf("facilitator called during the outage: verify %d -> %d, settle %d -> %d", verify, v, settle, s)
	}
	if b := p.tokenBalance(p.bed.PayerAddress); b.Cmp(payer) != 0 {
		t.Fatalf("the payer was charged during the outage: %s -> %s", payer, b)
	}

	free()
	waitFor(t, "the store back", 5*time.Second, func() bool { return p.storeState()["state"] == "ok" })
	resp := p.paidDo("POST", "/x402/chat-mini", paidChat, map[string]string{"payment-signature": sig})
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("the credential refused during the outage, after it: %d %s", resp.StatusCode, raw)
	}
}
