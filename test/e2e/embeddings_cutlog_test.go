package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestCutAnswerAccessLine: a whole answer (embeddings, a plain chat completion) cut after the
// provider answered is billed once, and its access log line (one, for the request) carries that
// bill: the record's exact cost and tokens, estimated, on the default split gateway, whatever the shape of the cut: the client hanging up mid-body,
// the provider dropping the connection mid-body, after its headers, or right behind them.
func TestCutAnswerAccessLine(t *testing.T) {
	t.Parallel()
	// A routing.fast_lane: false gateway ({"unsplit", "routing: {fast_lane: false}\n"}) still
	// writes these lines without their bill: it has no answer log to write them from.
	for _, gw := range []struct{ name, extra string }{{"split", ""}} {
		t.Run(gw.name, func(t *testing.T) {
			t.Parallel()
			g, fake := startEmbeddings(t, gw.extra)
			for i, c := range []struct {
				name, path, body string
				fault            fakeupstream.Fault
			}{
				{"client hangs up mid-body", "/embeddings", `{"model":"emb-small","input":"the provider embedded all of this"}`, fakeupstream.Fault{Stall: true}},
				{"provider cuts mid-body", "/embeddings", `{"model":"emb-small","input":"the provider embedded all of this"}`, fakeupstream.Fault{Cut: true}},
				{"provider cuts after its headers", "/embeddings", `{"model":"emb-small","input":"the provider embedded all of this"}`, fakeupstream.Fault{CutHeaders: true, CutPause: 300 * time.Millisecond}},
				{"provider cuts behind its headers", "/embeddings", `{"model":"emb-small","input":"the provider embedded all of this"}`, fakeupstream.Fault{CutHeaders: true}},
				{"chat cut mid-body", "/chat/completions", `{"model":"chatty","messages":[{"role":"user","content":"tell me all of it"}]}`, fakeupstream.Fault{Cut: true}},
			} {
				account, id := fmt.Sprintf("cut%d", i), fmt.Sprintf("cutlog-%s-%d", gw.name, i)
				if err := g.NewAccount(context.Background(), account, "1"); err != nil {
					t.Fatal(err)
				}
				fake.Reset()
				fake.Script(c.fault)
				sendCut(t, g, fake, g.newKey(account), id, c.path, c.body, c.fault.Stall)
				recs := waitRecordsOf(t, g, account, 1)
				r := recs[0]
				if len(recs) != 1 || !r.Estimated || !r.Cost.IsPositive() || !strings.HasPrefix(r.RequestID, id+".") {
					t.Errorf("%s: records %+v, want one estimate for %s", c.name, recs, id)
					continue
				}
				line := g.accessLine(id)
				for k, v := range map[string]any{"cost": r.Cost.String(), "estimated": true, "account": account, "provider": "oa",
					"prompt_tokens": float64(r.PromptTokens), "completion_tokens": float64(r.CompletionTokens)} {
					if line[k] != v {
						t.Errorf("%s: access line %s = %v, want %v (the record's) (%v)", c.name, k, line[k], v, line)
					}
				}
				if n := strings.Count(g.logs.String(), `"request_id":"`+id+`"`); n != 1 {
					t.Errorf("%s: request %s has %d access log lines, want 1", c.name, id, n)
				}
			}
		})
	}
}

// sendCut sends a request with its id whose answer the fake cuts; hangUp has the client go
// away once the provider's answer has begun; it returns the client's error.
func sendCut(t *testing.T, g *gateway, fake *fakeupstream.Server, key, id, path, body string, hangUp bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.BaseURL+path, strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("authorization", "Bearer "+key)
	req.Header.Set("x-request-id", id)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	if hangUp {
		waitFor(t, "the provider's answer", 10*time.Second, func() bool { return fake.RequestCount() == 1 })
		time.Sleep(300 * time.Millisecond) // its headers and half its body reach the gateway
		cancel()
	}
	return <-done
}
