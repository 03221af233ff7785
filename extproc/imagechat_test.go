package extproc

import (
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// imageGateway is testGateway with a Gemini provider serving an I3 model (nb, flash-2.5) and a
// video model on MiniMax.
func imageGateway(t *testing.T) *ir.Gateway {
	g := testGateway()
	g.Providers = append(g.Providers,
		ir.Provider{Name: "gemini", Type: ir.ProviderTypeGemini, Host: "generativelanguage.googleapis.com", Port: 443, TLS: true, BasePath: "/v1beta", NeedsKey: true, APIKey: "g-key"},
		ir.Provider{Name: "hailuo", Type: ir.ProviderTypeMiniMax, Host: "api.minimax.io", Port: 443, TLS: true, NeedsKey: true, APIKey: "mm"},
	)
	p, err := ir.ParsePricing(map[string]any{"request": "0.01", "image": "0.039", "prompt": "0.000001", "completion": "0.000002"})
	if err != nil {
		t.Fatal(err)
	}
	g.Models = append(g.Models,
		ir.Model{ID: "nb", Family: "I3", Variant: "flash-2.5", Pricing: p, Targets: []ir.Target{{Provider: "gemini", Model: "gemini-2.5-flash-image"}}},
		ir.Model{ID: "hailuo-02", Family: "V1", Targets: []ir.Target{{Provider: "hailuo", Model: "MiniMax-Hailuo-02"}}},
	)
	return g
}

// TestImageChatPlan: an I3 model is planned like a chat model and rewritten for Gemini with
// images asked for; streaming it and any other media model are refused before any hold.
func TestImageChatPlan(t *testing.T) {
	rt := core.Compile(imageGateway(t), nil)
	body := `{"model":"nb","messages":[{"role":"user","content":[{"type":"text","text":"draw a fox"}]}]}`
	plan, e := planChat(rt, []byte(body))
	if e != nil || plan.cluster != ir.ModelChainCluster("nb") {
		t.Fatalf("%+v %v", plan, e)
	}
	up, removed, err := attemptRequest(rt, []byte(body), rt.Models["nb"], rt.Providers["gemini"])
	if err != nil || len(removed) != 0 || up.Path != "/models/gemini-2.5-flash-image:generateContent" || !strings.Contains(string(up.Body), `"responseModalities":["TEXT","IMAGE"]`) {
		t.Fatalf("attempt %+v %v %v", up, removed, err)
	}
	for body, want := range map[string]string{
		`{"model":"nb","stream":true,"messages":[{"role":"user","content":"x"}]}`:                                                  `stream is not supported for image model "nb"`,
		`{"model":"hailuo-02","messages":[{"role":"user","content":"x"}]}`:                                                         `model "hailuo-02" is a video model, not a chat model: create its tasks with POST /v1/videos`,
		`{"model":"gpt","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`: "send it back in a user message",
	} {
		if _, e := planChat(rt, []byte(body)); e == nil || e.Status != 400 || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %+v; want a 400 saying %q", body, e, want)
		}
	}
}

// TestImageChatBilling: the hold of an I3 chat request covers the images its output budget
// pays for; the answer is billed request + image price x the images in its content + tokens.
func TestImageChatBilling(t *testing.T) {
	rt := core.Compile(imageGateway(t), []store.Key{keyRecord("key_valid", validSecret, false)})
	ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.NewFromInt(100)}, nil, "2026-11")
	rec := &recorder{}
	e := startServerWith(t, rt, &Billing{Ledger: ledger, Record: rec.record, Now: func() time.Time { return testNow }})
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	body := `{"model":"nb","max_tokens":3000,"messages":[{"role":"user","content":"draw"}]}`
	s.roundTrip(requestBody(body))
	// 3,000 output tokens pay for two 1,290-token images: the hold is the prompt bound's price,
	// 3,000 completion tokens, two images and the request.
	plan, _ := planChat(rt, []byte(body))
	want := decimal.RequireFromString("0.000001").Mul(decimal.NewFromInt(plan.promptBound)).
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

// TestMeterCountsImageParts: an answer whose content is an array of parts is read for its text
// (an estimate needs it) and its images (billed per image), without the data URLs.
func TestMeterCountsImageParts(t *testing.T) {
	m := &meter{}
	m.body([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"hello there"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}}]}`))
	u, est := m.result(func() int64 { return 4 })
	if !est || u.Images != 1 || u.PromptTokens != 4 || u.CompletionTokens != 2 || m.text.String() != "hello there" {
		t.Fatalf("%+v %v %q", u, est, m.text.String())
	}
	m = &meter{}
	m.body([]byte(`{"choices":[{"message":{"content":null}},{"message":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	if u, est := m.result(nil); est || u.Images != 0 || u.CompletionTokens != 1 {
		t.Fatalf("%+v", u)
	}
}

// TestImageChatCatalogParameters: the catalog lists for an I3 model the chat parameters it
// honours, not every Gemini chat parameter (it refuses tools, reasoning_effort, and takes n and
// response_format only at their defaults).
func TestImageChatCatalogParameters(t *testing.T) {
	rt := core.Compile(imageGateway(t), nil)
	got := strings.Join(rt.Models["nb"].Sampling, ",")
	if got != "frequency_penalty,max_completion_tokens,max_tokens,presence_penalty,seed,stop,temperature,top_p" {
		t.Fatalf("supported_sampling_parameters %s", got)
	}
}

// TestImageChatBillsImageTokensOnce: an I3 answer's usage counts every output token, the
// images' named in completion_tokens_details.image_tokens; with an image price those are
// billed per image, not again as tokens; without one they are output like the rest (issue 26
// item 12: 46 text tokens of this real answer shape went unbilled).
func TestImageChatBillsImageTokensOnce(t *testing.T) {
	g := imageGateway(t)
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
