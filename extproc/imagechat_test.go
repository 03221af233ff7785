package extproc

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// TestImageChatBilling: the hold of an I3 chat request covers the images its output budget
// pays for; the answer is billed request + image price x the images in its content + tokens.
func TestImageChatBilling(t *testing.T) {
	rt := core.Compile(fixture.ImageGateway(t), []store.Key{keyRecord("key_valid", validSecret, false)})
	ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.NewFromInt(100)}, nil, "2026-11")
	rec := &recorder{}
	e := startServerWith(t, rt, &Billing{Ledger: ledger, Record: rec.record, Now: func() time.Time { return testNow }})
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	body := `{"model":"nb","max_tokens":3000,"messages":[{"role":"user","content":"draw"}]}`
	s.roundTrip(requestBody(body))
	// 3,000 output tokens pay for two 1,290-token images: the hold is the prompt bound's price,
	// 3,000 completion tokens, two images and the request.
	bound, _ := billing.PromptBound([]byte(body)) // the plan's bound of a text prompt
	want := decimal.RequireFromString("0.000001").Mul(decimal.NewFromInt(int64(bound))).
		Add(decimal.RequireFromString("0.006")).Add(decimal.RequireFromString("0.078")).Add(decimal.RequireFromString("0.01"))
	if avail, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow); !decimal.NewFromInt(100).Sub(avail).Equal(want) {
		t.Fatalf("held %s, want %s", decimal.NewFromInt(100).Sub(avail), want)
	}
	s.roundTrip(servedHeaders("200", "application/json", "gemini/nb"))
	s.roundTrip(responseBody(`{"id":"r","object":"chat.completion","model":"gemini-2.5-flash-image","choices":[{"index":0,"message":{"role":"assistant","content":[` +
		`{"type":"text","text":"two foxes"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`))
	s.close()
	if len(rec.all()) != 1 {
		t.Fatalf("records %+v", rec.all())
	}
	// 0.01 + 2 x 0.039 + 5 x 0.000001 + 3 x 0.000002
	if r := rec.all()[0]; !r.Cost.Equal(decimal.RequireFromString("0.088011")) || r.Model != "nb" || r.PromptTokens != 5 || r.CompletionTokens != 3 {
		t.Fatalf("record %+v", r)
	}
}

// TestImageChatBillsImageTokensOnce: an I3 answer's usage counts every output token, the
// images' named in completion_tokens_details.image_tokens; with an image price those are
// billed per image, not again as tokens; without one they are output like the rest (issue 26
// item 12: 46 text tokens of this real answer shape went unbilled).
func TestImageChatBillsImageTokensOnce(t *testing.T) {
	g := fixture.ImageGateway(t)
	p, err := ir.ParsePricing(map[string]any{"prompt": "0.000001", "completion": "0.00003"})
	if err != nil {
		t.Fatal(err)
	}
	g.Models = append(g.Models, ir.Model{ID: "nb-tokens", Family: "I3", Variant: "flash-2.5", Pricing: p, Targets: []ir.Target{{Provider: "gemini", Model: "gemini-2.5-flash-image"}}})
	rt := core.Compile(g, []store.Key{keyRecord("key_valid", validSecret, false)})
	ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.NewFromInt(100)}, nil, "2026-11")
	rec := &recorder{}
	e := startServerWith(t, rt, &Billing{Ledger: ledger, Record: rec.record, Now: func() time.Time { return testNow }})
	answer := `{"id":"r","object":"chat.completion","model":"gemini-2.5-flash-image","choices":[{"index":0,"message":{"role":"assistant","content":[` +
		`{"type":"text","text":"Pip the axolotl."},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":17,"completion_tokens":1336,"total_tokens":1353,"completion_tokens_details":{"reasoning_tokens":0,"image_tokens":1290}}}`
	for i, model := range []string{"nb", "nb-tokens"} {
		s := e.open()
		s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
		s.roundTrip(requestBody(`{"model":"` + model + `","max_tokens":3000,"messages":[{"role":"user","content":"draw"}]}`))
		s.roundTrip(servedHeaders("200", "application/json", "gemini/"+model))
		s.roundTrip(responseBody(answer))
		s.close()
		if len(rec.all()) != i+1 {
			t.Fatalf("records %+v", rec.all())
		}
		// nb: 0.01 + 0.039 + 17 x 0.000001 + 46 x 0.000002; nb-tokens: 17 x 0.000001 + 1336 x 0.00003.
		want := map[string]string{"nb": "0.049109", "nb-tokens": "0.040097"}[model]
		if r := rec.all()[i]; !r.Cost.Equal(decimal.RequireFromString(want)) || r.Model != model || r.PromptTokens != 17 || r.CompletionTokens != 1336 {
			t.Fatalf("%s: record %+v, want cost %s", model, r, want)
		}
	}
}
