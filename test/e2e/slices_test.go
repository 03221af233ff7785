package e2e

// Spend limits and balances exact across replicas (budget slices, docs/money.md#slices):
// three replicas, each with its own Envoy, on one database.

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
)

// demoCatalog is the demo model as `tollway run --demo` has it: an answer to "Hello" holds
// $0.01527 and costs $0.01019.
const demoCatalog = `billing: {enabled: true}
providers:
  - {name: demo, type: demo}
models:
  - id: demo-chat
    providers: [{provider: demo, model: demo-chat}]
    pricing: {prompt: "0.00001", completion: "0.00002", request: "0.01"}
    context_length: 8192
    max_output_length: 256
`

// knowsKey waits until every replica of gs knows key (GET /v1/key answers; nothing billed).
func knowsKey(t *testing.T, gs []*gateway, key string) {
	t.Helper()
	for i, g := range gs {
		waitFor(t, fmt.Sprintf("replica %d knows the key", i+1), 10*time.Second, func() bool {
			req, _ := http.NewRequest("GET", g.BaseURL+"/key", nil)
			req.Header.Set("authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
	}
}

// status sends body with key to g and says the status and the error code, if any.
func status(g *gateway, key, body string) (int, string) {
	resp := g.chat(context.Background(), key, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code := ""
	if _, rest, ok := strings.Cut(string(b), `"code":"`); ok {
		code, _, _ = strings.Cut(rest, `"`)
	}
	return resp.StatusCode, code
}

// TestClusterSliceEdge: a key limited to $0.05 a month, an answer that holds $0.01527 and
// costs $0.01019, requests one at a time round-robin across three replicas: served four times
// and refused the fifth (403 spend_limit_exceeded), exactly as on one gateway; the records
// add up to $0.04076.
func TestClusterSliceEdge(t *testing.T) {
	t.Parallel()
	gs := startCluster(t, pgDSN(t), 3, demoCatalog)
	if err := gs[0].NewAccount(context.Background(), "acme", "25"); err != nil {
		t.Fatal(err)
	}
	key := gs[0].newKey("acme", "--monthly-limit", "0.05")
	knowsKey(t, gs, key)
	const hello = `{"model":"demo-chat","messages":[{"role":"user","content":"Hello"}]}`
	var got []string
	for i := range 6 {
		st, code := status(gs[i%3], key, hello)
		got = append(got, strings.TrimSpace(fmt.Sprintf("%d %s", st, code)))
	}
	if want := "[200 200 200 200 403 spend_limit_exceeded 403 spend_limit_exceeded]"; fmt.Sprint(got) != want {
		t.Fatalf("answers %v, want %s", got, want)
	}
	recs := gs[1].waitRecords("acme", 4)
	_, sum := gs[2].recordsByRequest("acme")
	if len(recs) != 4 || !sum.Equal(decimal.RequireFromString("0.04076")) {
		t.Fatalf("%d records costing %s, want 4 costing 0.04076", len(recs), sum)
	}
}

// TestClusterSliceBurst: 60 requests at once across three replicas, each costing exactly its
// hold ($0.01): a key limited to $0.25 serves exactly 25 and refuses the rest with 403
// spend_limit_exceeded; an account of $0.25 without a limit serves exactly 25 and refuses the
// rest with 402 insufficient_credits. Zero overspend, and no refusal while budget was left.
func TestClusterSliceBurst(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	gs := startCluster(t, pgDSN(t), 3, "billing: {enabled: true}\n"+catalog(fake.URL(), `pricing: {request: "0.01"}`), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	for _, c := range []struct {
		account, credits string
		flags            []string
		status           int
		code             string
	}{
		{"limited", "100", []string{"--monthly-limit", "0.25"}, 403, "spend_limit_exceeded"},
		{"poor", "0.25", nil, 402, "insufficient_credits"},
	} {
		if err := gs[0].NewAccount(ctx, c.account, c.credits); err != nil {
			t.Fatal(err)
		}
		key := gs[0].newKey(c.account, c.flags...)
		knowsKey(t, gs, key)
		var mu sync.Mutex
		counts := map[string]int{}
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				st, code := status(gs[i%3], key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
				mu.Lock()
				counts[strings.TrimSpace(fmt.Sprintf("%d %s", st, code))]++
				mu.Unlock()
			})
		}
		wg.Wait()
		refused := fmt.Sprintf("%d %s", c.status, c.code)
		if counts["200"] != 25 || counts[refused] != 35 {
			t.Fatalf("%s: answers %v, want 25 served and 35 refused with %s", c.account, counts, refused)
		}
		gs[0].waitRecords(c.account, 25)
		_, sum := gs[1].recordsByRequest(c.account)
		if !sum.Equal(decimal.RequireFromString("0.25")) {
			t.Fatalf("%s: records cost %s, want 0.25", c.account, sum)
		}
		t.Logf("%s: 60 at once on 3 replicas: %v", c.account, counts)
	}
}

// TestClusterSliceKilledReplica: a replica killed with SIGKILL holding a slice of an account's
// balance keeps it from the others only until its lease ends; then they serve the whole
// balance, and not a cent more.
func TestClusterSliceKilledReplica(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	gs := startCluster(t, pgDSN(t), 3, "billing: {enabled: true}\n"+catalog(fake.URL(), `pricing: {request: "0.01"}`), "FAKE_PROVIDER_KEY="+providerKey)
	if err := gs[0].NewAccount(context.Background(), "acme", "0.1"); err != nil {
		t.Fatal(err)
	}
	key := gs[0].newKey("acme")
	knowsKey(t, gs, key)
	const hi = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	if st, code := status(gs[2], key, hi); st != 200 {
		t.Fatalf("C: %d %s", st, code)
	}
	gs[2].waitRecords("acme", 1)
	gs[2].Kill() // holding the rest of its slice: a quarter of $0.1, less the $0.01 it spent
	killed := time.Now()
	served := 1
	for served < 20 {
		if st, _ := status(gs[served%2], key, hi); st != 200 {
			break
		}
		served++
	}
	// Its last renewal may be a third of a lease before the kill: by then its slice may be back.
	if took := time.Since(killed); served != 8 && took < clusterLease*2/3 {
		t.Fatalf("served %d before the first refusal (%v after the kill), want 8: $0.015 is the dead replica's until its lease ends", served, took)
	}
	time.Sleep(clusterLease + 500*time.Millisecond - time.Since(killed))
	for served < 20 {
		if st, _ := status(gs[served%2], key, hi); st != 200 {
			break
		}
		served++
	}
	if served != 10 {
		t.Fatalf("served %d in all after the dead replica's lease ended, want 10 ($0.1 at $0.01)", served)
	}
	gs[0].waitRecords("acme", 10)
	if _, sum := gs[1].recordsByRequest("acme"); !sum.Equal(decimal.RequireFromString("0.1")) {
		t.Fatalf("records cost %s, want 0.1", sum)
	}
}
