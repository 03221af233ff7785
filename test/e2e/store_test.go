package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/test/fakeupstream"
)

// TestStoreRetentionAndCompact: the gateway prunes usage records older than
// store.usage_retention_days at start (aggregates and balances stay), `tollway store compact`
// refuses a store a running gateway holds, and on a stopped gateway shrinks the file without
// changing a byte of what the admin API shows.
func TestStoreRetentionAndCompact(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	dir := t.TempDir()
	body := pricedCatalog(fake.URL(), "http://"+deadAddr+"/v1")

	// A store with 40 days of history written before this gateway starts.
	st, err := bbolt.Open(filepath.Join(dir, "tollway.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAccount("acme", decimal.NewFromInt(1000)); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var old []store.UsageRecord
	for i := range 400 {
		old = append(old, store.UsageRecord{
			RequestID: fmt.Sprintf("history-%d", i), KeyID: "key_history", Account: "acme", Model: "priced",
			Provider: "fake", PromptTokens: 10, CompletionTokens: 5, Cost: decimal.RequireFromString("0.01"),
			Time: now.Add(-time.Duration(i) * 6 * time.Hour), // 4 a day for 100 days
		})
	}
	for _, err := range st.SettleBatch(old) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	start := func() *gateway { return startGatewayIn(t, dir, body, "FAKE_PROVIDER_KEY="+providerKey) }
	g := start()
	// The default retention is 35 days: 140 records are kept, the 400 stay in the aggregates.
	waitFor(t, "records older than 35 days pruned", 10*time.Second, func() bool {
		return len(g.records("account=acme")) == 140
	})
	if s := g.usage("account=acme"); s.Requests != 400 || !s.Cost.Equal(decimal.NewFromInt(4)) {
		t.Errorf("usage after pruning: %+v, want all 400 requests costing 4", s)
	}
	if !strings.Contains(g.logs.String(), "pruned usage records") {
		t.Error("no log line for the pruning pass")
	}
	key := g.newKey("acme")
	for range 10 {
		resp := g.chat(context.Background(), key, `{"model":"priced","messages":[{"role":"user","content":"hi"}]}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d", resp.StatusCode)
		}
	}
	g.waitRecords("acme", 150)

	// A running gateway holds the file: compaction refuses at once and says what to do.
	began := time.Now()
	if _, err := g.CLI(context.Background(), "store", "compact"); err == nil || !strings.Contains(err.Error(), "stop the gateway") {
		t.Errorf("compact of a running gateway's store: %v, want a refusal saying to stop the gateway", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("the refusal took %v", d)
	}

	views := func(g *gateway) string {
		var b strings.Builder
		for _, path := range []string{"/admin/v1/usage/records", "/admin/v1/usage", "/admin/v1/accounts"} {
			resp, err := http.Get("http://" + g.Admin + path)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Fprintf(&b, "%s %d %s\n", path, resp.StatusCode, raw)
		}
		return b.String()
	}
	before := views(g)
	g.Stop()

	out, err := g.CLI(context.Background(), "store", "compact")
	if err != nil {
		t.Fatal(err)
	}
	var from, to int64
	if _, err := fmt.Sscanf(out[strings.Index(out, "(")+1:], "%d -> %d bytes", &from, &to); err != nil || to >= from || to == 0 {
		t.Errorf("compact printed %q: want the sizes before and after, smaller after", out)
	}
	t.Logf("%s", strings.TrimSpace(out))

	g2 := start()
	if after := views(g2); after != before {
		t.Errorf("the admin API shows something else after compaction:\n%s\nwant\n%s", after, before)
	}
	// The compacted store keeps taking records.
	resp := g2.chat(context.Background(), key, `{"model":"priced","messages":[{"role":"user","content":"again"}]}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	g2.waitRecords("acme", 151)
}
