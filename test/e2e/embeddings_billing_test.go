package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/test/fakeupstream"
)

// TestEmbeddingsBilledOnce: every embeddings request the provider served is billed once, from
// its usage or the gateway's count, and no answer the client cannot use is billed; attacked
// where a hostile client (or a careless provider) finds the corners.
func TestEmbeddingsBilledOnce(t *testing.T) {
	t.Parallel()
	g, fake := startEmbeddings(t, "")
	ctx := context.Background()
	account := func(t *testing.T, name string) string {
		t.Helper()
		if err := g.NewAccount(ctx, name, "1"); err != nil {
			t.Fatal(err)
		}
		return g.newKey(name)
	}

	// 1,200 inputs embedded at 3,072 dimensions as JSON floats (OpenAI's largest model, which
	// takes 2,048 inputs; floats are what curl and most SDKs but Python's ask for) is an answer
	// of about 45 MB: over the gateway's buffer, so it cannot be passed on. The provider served (and charged for) it all
	// the same: the request is billed once, from the gateway's count of its input, and the
	// client is told so and how to ask for an answer that fits.
	t.Run("answer over the buffer", func(t *testing.T) {
		key := account(t, "big")
		fake.Reset()
		texts := make([]string, 1200)
		quoted := make([]string, len(texts))
		var tokens int64
		for i := range texts {
			texts[i] = fmt.Sprintf("document number %d of the batch", i)
			quoted[i] = `"` + texts[i] + `"`
			tokens += int64(billing.CountText(texts[i]))
		}
		resp := g.embed(key, `{"model":"emb-small","dimensions":3072,"input":[`+strings.Join(quoted, ",")+`]}`)
		e := wantError(t, resp, http.StatusBadGateway, "upstream_error")
		for _, says := range []string{"40 MiB", "encoding_format base64", "fewer inputs", "billed"} {
			if !strings.Contains(e.Error.Message, says) {
				t.Errorf("message %q does not say %q", e.Error.Message, says)
			}
		}
		if n := fake.RequestCount(); n != 1 {
			t.Fatalf("the provider saw %d requests, want 1", n)
		}
		recs := waitRecordsOf(t, g, "big", 1)
		want := embSmallPrice.Mul(decimal.NewFromInt(tokens))
		if r := recs[0]; r.PromptTokens != tokens || !r.Cost.Equal(want) || !r.Estimated || r.Provider != "oa" {
			t.Fatalf("record %+v, want %d tokens at %s, estimated", r, tokens, want)
		}
		waitFor(t, "the debit", 10*time.Second, func() bool { return g.balance("big").Equal(decimal.NewFromInt(1).Sub(want)) })
	})

	// The provider has answered 200 and the client hangs up while the answer comes (a hostile
	// client timing it, or a client's timeout under a big answer), or the provider drops the
	// connection halfway through it: the provider did the work, so the request is billed once,
	// from the gateway's count of its input, as chat bills a cut answer.
	t.Run("answer cut", func(t *testing.T) {
		key := account(t, "cut")
		input := "the provider embedded all of this"
		for _, f := range []fakeupstream.Fault{{Stall: true}, {Cut: true}} {
			fake.Reset()
			fake.Script(f)
			err := sendCut(t, g, fake, key, fmt.Sprintf("answer-cut-%v", f.Stall), "/embeddings", `{"model":"emb-small","input":"`+input+`"}`, f.Stall)
			if err == nil && f.Stall {
				t.Fatal("the client was answered before it hung up")
			}
		}
		tokens := int64(billing.CountText(input))
		want := embSmallPrice.Mul(decimal.NewFromInt(tokens))
		recs := waitRecordsOf(t, g, "cut", 2)
		for _, r := range recs {
			if r.PromptTokens != tokens || !r.Cost.Equal(want) || !r.Estimated || r.Provider != "oa" {
				t.Fatalf("record %+v, want %d tokens at %s, estimated", r, tokens, want)
			}
		}
		waitFor(t, "the debit", 10*time.Second, func() bool { return g.balance("cut").Equal(decimal.NewFromInt(1).Sub(want.Mul(decimal.NewFromInt(2)))) })
	})

	// A 200 with fewer embeddings than inputs is no answer to the request (the client's inputs
	// and vectors no longer line up): 502 and not billed, as Gemini's is.
	t.Run("fewer embeddings than inputs", func(t *testing.T) {
		key := account(t, "short")
		short := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.6,0.8]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":2,"total_tokens":2}}`
		for _, model := range []string{"emb-small", "emb-gemini"} {
			fake.Reset()
			body := short
			if model == "emb-gemini" {
				body = `{"embeddings":[{"values":[0.6,0.8]}]}`
			}
			fake.Script(fakeupstream.Fault{Status: http.StatusOK, Body: body})
			e := wantError(t, g.embed(key, `{"model":"`+model+`","input":["one","two"]}`), http.StatusBadGateway, "upstream_error")
			if !strings.Contains(e.Error.Message, "1 embeddings for 2 inputs") {
				t.Fatalf("%s: message %q", model, e.Error.Message)
			}
		}
		g.embedOK(key, `{"model":"emb-small","input":"settles the books"}`) // its record is the only one
		recs := waitRecordsOf(t, g, "short", 1)
		if len(recs) != 1 || recs[0].PromptTokens != 3 {
			t.Fatalf("records %+v: the short answers were billed", recs)
		}
	})

	// An OpenAI-compatible server of a BERT-style model (vLLM, TEI) counts the [CLS] and [SEP]
	// it adds to every input: three one-byte inputs are 9 tokens. The hold covers them, so the
	// bill is the provider's count, not cut to the hold with the rest an overage.
	t.Run("special tokens", func(t *testing.T) {
		key := account(t, "bert")
		fake.Reset()
		fake.Script(fakeupstream.Fault{ReportPrompt: 9})
		a, _ := g.embedOK(key, `{"model":"emb-small","input":["a","b","c"]}`)
		if a.Usage.PromptTokens != 9 {
			t.Fatalf("usage %+v", a.Usage)
		}
		want := embSmallPrice.Mul(decimal.NewFromInt(9))
		if r := waitRecordsOf(t, g, "bert", 1)[0]; !r.Cost.Equal(want) || !r.Overage.IsZero() || r.PromptTokens != 9 {
			t.Fatalf("record %+v, want cost %s and no overage", r, want)
		}
	})
}

// TestEmbeddingsRefusedBeforeTheProvider: what a model's providers cannot take is refused
// before any provider is called, before the request is admitted (its rate count kept, nothing
// held), with a message naming the limit and the fix: Gemini's batchEmbedContents takes at
// most 100 inputs, and text only.
// refusedUnasked checks that each body is 400 invalid_request, its message starting as mapped,
// and that the provider was not asked.
func refusedUnasked(t *testing.T, g *gateway, fake *fakeupstream.Server, key string, cases map[string]string) {
	t.Helper()
	for body, says := range cases {
		fake.Reset()
		e := wantError(t, g.embed(key, body), http.StatusBadRequest, "invalid_request")
		if !strings.HasPrefix(e.Error.Message, says) {
			t.Errorf("message %q, want it to start %q", e.Error.Message, says)
		}
		if n := fake.RequestCount(); n != 0 {
			t.Errorf("the provider was asked %d times", n)
		}
	}
}

func TestEmbeddingsRefusedBeforeTheProvider(t *testing.T) {
	t.Parallel()
	g, fake := startEmbeddings(t, "")
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme", "--rpm", "1")
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf(`"line %d"`, i)
	}
	refusedUnasked(t, g, fake, key, map[string]string{
		`{"model":"emb-gemini","input":[` + strings.Join(many, ",") + `]}`: `input has 101 items; model "emb-gemini" on its provider (Gemini) embeds at most 100 per request: split them over several requests`,
		`{"model":"emb-gemini","input":[[1,2],[3]]}`:                       `input as token arrays cannot be sent to model "emb-gemini": its provider (Gemini) takes text only; send the text`,
		`{"model":"emb-small","input":[[1,2]],"route":{"provider":"gm"}}`:  `input as token arrays cannot be sent to model "emb-small": provider gm (Gemini) takes text only`,
	})
	// A route whose first model is on another provider (down here) goes to its providers; its
	// Gemini attempt refuses the same before Google is asked.
	fake.Reset()
	e := wantError(t, g.embed(g.newKey("acme"), `{"model":"route:emb-route","input":[`+strings.Join(many, ",")+`]}`), http.StatusBadRequest, "invalid_request")
	if !strings.HasPrefix(e.Error.Message, "input has 101 items; provider gm (Gemini) embeds at most 100 per request") || fake.RequestCount() != 0 {
		t.Fatalf("route: %q, %d requests to Gemini", e.Error.Message, fake.RequestCount())
	}
	// The refusals did not take the key's one request a minute.
	g.embedOK(key, `{"model":"emb-gemini","input":"`+strings.Repeat("word ", 100)+`"}`)
	if recs := waitRecordsOf(t, g, "acme", 1); len(recs) != 1 {
		t.Fatalf("records %+v", recs)
	}
}
