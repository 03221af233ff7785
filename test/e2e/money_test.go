package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// pricedCatalog has a priced model (object pricing), a tiered one and a free one, all on the
// fake, plus a priced model on a provider that is down.
func pricedCatalog(fakeURL, downURL string) string {
	return fmt.Sprintf(`providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: down, type: openai, base_url: %s}
models:
  - id: priced
    name: Priced
    providers: [{provider: fake, model: fake-priced}]
    context_length: 128000
    max_output_length: 1000
    supported_features: [tools]
    pricing: {prompt: "0.000001", completion: "0.000002", request: "0.0001"}
  - id: tiered
    providers: [{provider: fake, model: fake-tiered}]
    pricing:
      - {range_start: 0, range_end: 1000, prompt: "0.000001", completion: "0.000002"}
      - {range_start: 1000, range_end: null, prompt: "0.000002", completion: "0.000004"}
  - id: capped
    providers: [{provider: fake, model: fake-capped}]
    max_output_length: 10
    pricing: {prompt: "0", completion: "0.01"}
  - id: free
    providers: [{provider: fake, model: fake-free}]
  - id: offline
    providers: [{provider: down, model: m}]
    pricing: {prompt: "0.000001", completion: "0.000001"}
`, fakeURL, downURL)
}

func startPriced(t *testing.T, opts fakeupstream.Options) (*gateway, *fakeupstream.Server) {
	t.Helper()
	opts.APIKey = providerKey
	fake := fakeupstream.Start(t, opts)
	g := startGateway(t, pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1"), "FAKE_PROVIDER_KEY="+providerKey)
	return g, fake
}

type usageSummary struct {
	Requests          int64
	PromptTokens      int64 `json:"prompt_tokens"`
	CompletionTokens  int64 `json:"completion_tokens"`
	EstimatedRequests int64 `json:"estimated_requests"`
	Cost              decimal.Decimal
}

func (g *gateway) usage(query string) usageSummary {
	g.t.Helper()
	resp, err := http.Get("http://" + g.Admin + "/admin/v1/usage?" + query)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var s usageSummary
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		g.t.Fatal(err)
	}
	return s
}

type usageRecord struct {
	RequestID        string `json:"request_id"`
	Model            string
	Provider         string
	Route            string
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	Cost             decimal.Decimal
	Overage          decimal.Decimal // what the provider reported beyond the hold: not billed
	Estimated        bool
	EstimateReason   string `json:"estimate_reason"`
	Payment          *struct {
		Endpoint, Scheme, Network, Asset, Payer, Amount, Transaction, Status, Reason string
		AmountUSD                                                                    decimal.Decimal `json:"amount_usd"`
	}
}

func (g *gateway) records(query string) []usageRecord {
	g.t.Helper()
	resp, err := http.Get("http://" + g.Admin + "/admin/v1/usage/records?" + query)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Data []usageRecord }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		g.t.Fatal(err)
	}
	return out.Data
}

func (g *gateway) balance(account string) decimal.Decimal {
	g.t.Helper()
	_, out := g.adminJSON("GET", "/admin/v1/accounts", nil)
	for _, a := range out["data"].([]any) {
		m := a.(map[string]any)
		if m["id"] == account {
			return decimal.RequireFromString(m["balance"].(string))
		}
	}
	g.t.Fatalf("no account %s", account)
	return decimal.Zero
}

// waitRecords waits for n durable usage records of account (settling is asynchronous).
func (g *gateway) waitRecords(account string, n int) []usageRecord {
	g.t.Helper()
	return waitRecordsOf(g.t, g, account, n)
}

// waitRecordsOf is waitRecords failing t (a subtest's, which must not fail its parent).
func waitRecordsOf(t testing.TB, g *gateway, account string, n int) []usageRecord {
	t.Helper()
	var recs []usageRecord
	waitFor(t, fmt.Sprintf("%d usage records", n), 10*time.Second, func() bool {
		recs = g.records("account=" + account)
		return len(recs) >= n
	})
	return recs
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	g, _ := startPriced(t, fakeupstream.Options{})
	get := func(key, path string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, g.BaseURL+path, nil)
		if key != "" {
			req.Header.Set("authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	// Without a key, as in the spec's example. is_ready turns false for the provider that is
	// down once Envoy's health check has run.
	var byID map[string]map[string]any
	waitFor(t, "is_ready to reflect provider health", 20*time.Second, func() bool {
		code, out := get("", "/models")
		if code != 200 {
			t.Fatalf("GET /v1/models: %d %v", code, out)
		}
		byID = map[string]map[string]any{}
		for _, e := range out["data"].([]any) {
			m := e.(map[string]any)
			byID[m["id"].(string)] = m
		}
		return byID["offline"]["is_ready"] == false
	})
	if len(byID) != 5 {
		t.Fatalf("catalog has %d models", len(byID))
	}
	p := byID["priced"]
	for _, f := range []string{"id", "name", "input_modalities", "output_modalities", "context_length", "max_output_length",
		"supported_sampling_parameters", "supported_features", "pricing", "is_ready", "is_free"} {
		if _, ok := p[f]; !ok {
			t.Errorf("catalog entry lacks %s", f)
		}
	}
	if p["is_ready"] != true || p["is_free"] != false || p["context_length"].(float64) != 128000 {
		t.Errorf("priced entry: %v", p)
	}
	price := p["pricing"].(map[string]any)
	if price["prompt"] != "0.000001" || price["request"] != "0.0001" || price["image"] != "0" {
		t.Errorf("pricing object: %v", price)
	}
	tiers, ok := byID["tiered"]["pricing"].([]any)
	if !ok || len(tiers) != 2 || tiers[1].(map[string]any)["range_end"] != nil || tiers[0].(map[string]any)["range_end"].(float64) != 1000 {
		t.Errorf("tiered pricing: %v", byID["tiered"]["pricing"])
	}
	if byID["free"]["is_free"] != true {
		t.Error("free model not is_free")
	}
	// A key restricted to some models sees only those, and may only use those.
	key, err := g.NewKey(context.Background(), "acme", "--models", "free,capped")
	if err != nil {
		t.Fatal(err)
	}
	_, out := get(key, "/models")
	if n := len(out["data"].([]any)); n != 2 {
		t.Fatalf("restricted key sees %d models", n)
	}
	wantError(t, g.chat(context.Background(), key, `{"model":"priced","messages":[{"role":"user","content":"hi"}]}`), 403, "model_not_allowed")
	if code, _ := get("", "/models/tiered"); code != 200 {
		t.Errorf("GET /v1/models/tiered: %d", code)
	}
	resp, err := http.Get(g.BaseURL + "/models/nope")
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, resp, 404, "model_not_found")
}

// TestStreamingDoesNotChangeTheBill sends one request plain and streamed: same cost, exact to
// the last digit, from the provider's usage; the usage chunk the gateway asked for is not shown
// to a client that did not ask, and is shown to one that did.
func TestStreamingDoesNotChangeTheBill(t *testing.T) {
	t.Parallel()
	g, fake := startPriced(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	body := `{"model":"priced","messages":[{"role":"user","content":"count the words in this prompt please"}]`
	resp := g.chat(ctx, key, body+`}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	events := readStream(t, g.chat(ctx, key, body+`,"stream":true}`))
	for _, e := range events {
		if strings.Contains(e, `"usage":{`) {
			t.Fatalf("client got a usage chunk it did not ask for: %s", e)
		}
	}
	sent := fake.Requests()
	if !strings.Contains(string(sent[len(sent)-1].Body), `"include_usage":true`) {
		t.Fatal("the gateway did not ask the provider for stream usage")
	}
	events = readStream(t, g.chat(ctx, key, body+`,"stream":true,"stream_options":{"include_usage":true}}`))
	if !strings.Contains(strings.Join(events, "\n"), `"usage":{`) {
		t.Fatal("client asked for usage and did not get it")
	}
	recs := g.waitRecords("acme", 3)
	for _, r := range recs {
		if r.Estimated || r.Provider != "fake" || r.Model != "priced" {
			t.Fatalf("record %+v", r)
		}
		if !r.Cost.Equal(recs[0].Cost) || r.PromptTokens != recs[0].PromptTokens || r.CompletionTokens != recs[0].CompletionTokens {
			t.Fatalf("streaming changed the bill: %+v vs %+v", r, recs[0])
		}
		// cost = prompt x 0.000001 + completion x 0.000002 + 0.0001 per request, exactly
		want := decimal.New(r.PromptTokens, -6).Add(decimal.New(2*r.CompletionTokens, -6)).Add(decimal.RequireFromString("0.0001"))
		if !r.Cost.Equal(want) {
			t.Fatalf("cost %s, want %s", r.Cost, want)
		}
	}
	total := recs[0].Cost.Mul(decimal.NewFromInt(3))
	if got := g.balance("acme"); !got.Add(total).Equal(decimal.NewFromInt(25)) {
		t.Fatalf("balance %s + spent %s != 25", got, total)
	}
	if s := g.usage("account=acme&model=priced"); s.Requests != 3 || !s.Cost.Equal(total) {
		t.Fatalf("usage summary %+v", s)
	}
	// The CLI shows the same numbers, and a credit is usable at once.
	out, err := g.cli("usage", "--account", "acme", "--model", "priced", "--since", time.Now().UTC().Format(time.DateOnly))
	if err != nil || !strings.Contains(out, "TOTAL") || !strings.Contains(out, total.String()) {
		t.Fatalf("tollway usage: %v\n%s", err, out)
	}
	if out, err = g.cli("accounts", "credit", "acme", "0.5"); err != nil {
		t.Fatal(err)
	}
	want := decimal.RequireFromString("25.5").Sub(total)
	if got := g.balance("acme"); !got.Equal(want) {
		t.Fatalf("after a credit of 0.5: balance %s, want %s", got, want)
	}
	if out, err = g.cli("accounts", "list"); err != nil || !strings.Contains(out, want.String()) {
		t.Fatalf("accounts list: %v\n%s", err, out)
	}
	if _, err := g.cli("accounts", "credit", "acme", "-1"); err == nil {
		t.Fatal("a negative credit was accepted")
	}
}

func readStream(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, raw)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream did not end with [DONE]: %v", events)
	}
	return events
}

// TestCutStreamsAreBilledFromWhatWasSent: a provider that drops the stream and a client that
// hangs up both leave an estimated record counted by the tokenizer, never a free request.
func TestCutStreamsAreBilledFromWhatWasSent(t *testing.T) {
	t.Parallel()
	g, fake := startPriced(t, fakeupstream.Options{ChunkDelay: 50 * time.Millisecond})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	body := `{"model":"priced","stream":true,"messages":[{"role":"user","content":"one two three four five six seven eight nine ten"}]}`

	fake.CutStreamAfter(4)
	resp := g.chat(ctx, key, body)
	_, _ = io.ReadAll(resp.Body) // ends early, without [DONE]
	resp.Body.Close()

	cctx, cancel := context.WithCancel(ctx)
	resp = g.chat(cctx, key, body)
	sc := bufio.NewScanner(resp.Body)
	for i := 0; i < 3 && sc.Scan(); i++ {
	}
	cancel() // the client goes away mid-stream
	resp.Body.Close()

	recs := g.waitRecords("acme", 2)
	for _, r := range recs {
		if !r.Estimated || r.CompletionTokens == 0 || r.PromptTokens == 0 || !r.Cost.IsPositive() {
			t.Fatalf("cut stream record %+v: want an estimate of what was sent", r)
		}
	}
	if s := g.usage("account=acme"); s.EstimatedRequests != 2 {
		t.Fatalf("usage summary %+v", s)
	}
}

// TestSpendLimitCannotBeOutrun: 50 concurrent requests against a key whose monthly limit covers
// 10 worst cases. At most the limit is ever spent, every refusal says why, and the books balance.
func TestSpendLimitCannotBeOutrun(t *testing.T) {
	t.Parallel()
	g, fake := startPriced(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	// capped: prompt free, 10 output tokens at most at $0.01 -> worst case exactly $0.10
	key := g.newKey("acme", "--monthly-limit", "1.00")
	faults := make([]fakeupstream.Fault, 50)
	for i := range faults {
		faults[i] = fakeupstream.Fault{Delay: 700 * time.Millisecond} // all 50 in flight at once
	}
	fake.Script(faults...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := g.chat(ctx, key, `{"model":"capped","messages":[{"role":"user","content":"a b c d e f g h i j k l"}]}`)
			defer resp.Body.Close()
			var e apiError
			raw, _ := io.ReadAll(resp.Body)
			_ = json.Unmarshal(raw, &e)
			mu.Lock()
			codes[fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes["200 "] != 10 || codes["403 spend_limit_exceeded"] != 40 {
		t.Fatalf("outcomes %v: want exactly 10 served and 40 refused with spend_limit_exceeded", codes)
	}
	recs := g.waitRecords("acme", 10)
	spent := decimal.Zero
	for _, r := range recs {
		spent = spent.Add(r.Cost)
	}
	if spent.GreaterThan(decimal.RequireFromString("1.00")) {
		t.Fatalf("spent %s past the 1.00 limit", spent)
	}
	if got := g.balance("acme"); !got.Add(spent).Equal(decimal.NewFromInt(25)) {
		t.Fatalf("balance %s + spent %s != 25", got, spent)
	}
	// Credits run out the same way, with their own code.
	if err := g.NewAccount(ctx, "poor", "0.05"); err != nil {
		t.Fatal(err)
	}
	wantError(t, g.chat(ctx, g.newKey("poor"), `{"model":"capped","messages":[{"role":"user","content":"hi"}]}`), 402, "insufficient_credits")
}

// TestKill9UnderLoadKeepsTheBooks kills the gateway with SIGKILL while requests are in flight,
// restarts it on the same store, and checks that no debit the store had acknowledged is lost,
// none is counted twice, and credits still equal balance plus recorded spend, exactly.
func TestKill9UnderLoadKeepsTheBooks(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	dir := t.TempDir()
	body := pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")
	start := func() *gateway {
		hg, err := harness.Start(context.Background(), harness.Options{
			Bin: tollwayBin, EnvoyBin: envoyBin, Dir: dir, Body: body, Env: []string{"FAKE_PROVIDER_KEY=" + providerKey},
		})
		if err != nil {
			t.Fatal(err)
		}
		g := &gateway{Gateway: hg, t: t, logs: hg.Logs}
		t.Cleanup(g.Stop)
		return g
	}
	g := start()
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "1000"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions",
					strings.NewReader(`{"model":"priced","messages":[{"role":"user","content":"keep the books straight"}]}`))
				req.Header.Set("authorization", "Bearer "+key)
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	var acked int64
	waitFor(t, "300 durable usage records", 30*time.Second, func() bool {
		acked = g.usage("account=acme").Requests
		return acked >= 300
	})
	if err := g.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-g.Exited()
	close(stop)
	wg.Wait()

	g2 := start()
	s := g2.usage("account=acme")
	if s.Requests < acked {
		t.Fatalf("%d acknowledged debits before the kill, %d after the restart", acked, s.Requests)
	}
	recs := g2.records("account=acme")
	seen := map[string]bool{}
	sum := decimal.Zero
	for _, r := range recs {
		if seen[r.RequestID] {
			t.Fatalf("request %s recorded twice", r.RequestID)
		}
		seen[r.RequestID] = true
		sum = sum.Add(r.Cost)
	}
	if int64(len(recs)) != s.Requests || !sum.Equal(s.Cost) {
		t.Fatalf("records (%d, %s) disagree with the summary (%d, %s)", len(recs), sum, s.Requests, s.Cost)
	}
	if bal := g2.balance("acme"); !bal.Add(s.Cost).Equal(decimal.NewFromInt(1000)) {
		t.Fatalf("balance %s + spent %s != 1000", bal, s.Cost)
	}
	t.Logf("%d debits acknowledged before kill -9, %d on disk after restart; books balance to the digit", acked, s.Requests)
}

// TestProviderErrorsAreNotBilled: the metering filter sees the provider's status through Envoy, so
// an error answer releases its hold and leaves no record, while the next answer is billed to the
// provider that served it.
func TestProviderErrorsAreNotBilled(t *testing.T) {
	t.Parallel()
	g, fake := startPriced(t, fakeupstream.Options{})
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	body := `{"model":"priced","messages":[{"role":"user","content":"hi"}]}`
	fake.Script(fakeupstream.Fault{Status: 400, Message: "bad request from the provider"})
	wantError(t, g.chat(ctx, key, body), 400, "invalid_request_error")
	stream := `{"model":"priced","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fake.Script(fakeupstream.Fault{Status: 422})
	wantError(t, g.chat(ctx, key, stream), 422, "invalid_request_error")
	resp := g.chat(ctx, key, body)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	g.waitRecords("acme", 1)
	time.Sleep(300 * time.Millisecond) // a late record for an error would show up by now
	recs := g.waitRecords("acme", 1)
	if len(recs) != 1 || recs[0].Provider == "" || recs[0].Estimated {
		t.Fatalf("records %+v: want only the served request, billed from usage to its provider", recs)
	}
	if got := g.balance("acme"); !got.Add(recs[0].Cost).Equal(decimal.NewFromInt(25)) {
		t.Fatalf("balance %s + spent %s != 25: an error moved money", got, recs[0].Cost)
	}
}
