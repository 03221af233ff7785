package extproc

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// recorder collects what the server hands to durable storage.
type recorder struct {
	mu   sync.Mutex
	recs []store.UsageRecord
}

func (r *recorder) record(rec store.UsageRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

func (r *recorder) all() []store.UsageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.UsageRecord(nil), r.recs...)
}

var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// billedServer runs the ext_proc server with billing: model "gpt" priced at $1 per prompt token
// and $2 per completion token (so costs are easy to read), key_valid on account acct-key_valid;
// opts change the billing before it serves.
func billedServer(t *testing.T, credits string, limit *decimal.Decimal, opts ...func(*Billing)) (*envoy, *billing.Ledger, *recorder) {
	t.Helper()
	g := pricedGateway(t)
	k := keyRecord("key_valid", validSecret, false)
	k.MonthlyLimit = limit
	rt := core.Compile(g, []store.Key{k})
	ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.RequireFromString(credits)}, nil, "2026-11")
	rec := &recorder{}
	b := &Billing{Ledger: ledger, Record: rec.record, Now: func() time.Time { return testNow }}
	for _, o := range opts {
		o(b)
	}
	e := startServerWith(t, rt, b)
	return e, ledger, rec
}

func pricedGateway(t *testing.T) *ir.Gateway { return fixture.PricedGateway(t) }

func sseHeaders() *extprocv3.ProcessingRequest {
	return servedHeaders("200", "text/event-stream", "openai/gpt")
}

// servedHeaders are response headers as the router-level filter sees them: with the attempt's
// x-tollway-served.
func servedHeaders(status, contentType, served string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hdr(":status", status, true), hdr("content-type", contentType, true), hdr(ir.ServedHeader, served, true),
		}}},
	}}
}

func bodyChunk(s string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(s), EndOfStream: eos},
	}}
}

const shortPrompt = `{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`

func TestAdmissionRefusals(t *testing.T) {
	// The hold for shortPrompt is its prompt bound x $1 + 10 output tokens x $2: more than $5.
	e, _, rec := billedServer(t, "5", nil)
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	resp := s.roundTrip(requestBody(shortPrompt))
	if im := resp.GetImmediateResponse(); im == nil || im.Status.Code != 402 || !strings.Contains(string(im.Body), "insufficient_credits") {
		t.Fatalf("want 402 insufficient_credits, got %v", resp)
	}
	limit := decimal.RequireFromString("5")
	e, _, _ = billedServer(t, "1000", &limit)
	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r2", true))
	resp = s.roundTrip(requestBody(shortPrompt))
	if im := resp.GetImmediateResponse(); im == nil || im.Status.Code != 403 || !strings.Contains(string(im.Body), "spend_limit_exceeded") {
		t.Fatalf("want 403 spend_limit_exceeded, got %v", resp)
	}
	if len(rec.all()) != 0 {
		t.Fatal("a refused request was billed")
	}
}

func TestAdmissionBillsPlainAnswerFromUsage(t *testing.T) {
	e, ledger, rec := billedServer(t, "1000", nil)
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	s.roundTrip(requestBody(shortPrompt))
	// The attempt enforces the model's output cap the hold was sized with.
	rt := e.srv.runtime.Load()
	up, _, err := chat.AttemptRequest(rt, []byte(shortPrompt), rt.Models["gpt"], rt.Providers["openai"])
	if err != nil || string(decodeObject(t, up.Body)["max_tokens"]) != "10" {
		t.Fatalf("the model's output cap was not enforced upstream: %v %s", err, up.Body)
	}
	avail, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow)
	if !avail.LessThan(decimal.NewFromInt(1000)) {
		t.Fatal("no hold taken before forwarding")
	}
	resp := s.roundTrip(servedHeaders("200", "application/json", "openai/gpt"))
	if m := resp.GetModeOverride(); m.GetResponseBodyMode() != extprocv3filter.ProcessingMode_BUFFERED {
		t.Fatalf("plain answer not buffered for metering: %v", m)
	}
	s.roundTrip(responseBody(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hey"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`))
	s.close()
	recs := rec.all()
	if len(recs) != 1 || !recs[0].Cost.Equal(decimal.NewFromInt(11)) || recs[0].Estimated || recs[0].Provider != "openai" || !strings.HasPrefix(recs[0].RequestID, "r1.") {
		t.Fatalf("records %+v: want one of $11 (3x1 + 4x2) from usage", recs)
	}
	if avail, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow); !avail.Equal(decimal.NewFromInt(989)) {
		t.Fatalf("available %s after settling $11 of 1000", avail)
	}
}

// TestOverReportedUsageIsBilledTheHold: a provider reporting far more completion tokens than
// the request's cap allows is billed the hold, not its report, whole answers and streams alike;
// the balance and the key's limit are never passed.
func TestOverReportedUsageIsBilledTheHold(t *testing.T) {
	limit := decimal.RequireFromString("500")
	e, ledger, rec := billedServer(t, "1000", &limit)
	answers := map[string][]*extprocv3.ProcessingRequest{
		"whole": {servedHeaders("200", "application/json", "openai/gpt"),
			responseBody(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hey"}}],"usage":{"prompt_tokens":3,"completion_tokens":1000000,"total_tokens":1000003}}`)},
		"stream": {sseHeaders(), bodyChunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hey\"},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1000000}}\n\ndata: [DONE]\n\n", true)},
	}
	for _, name := range []string{"whole", "stream"} {
		before, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow)
		s := e.open()
		s.roundTrip(chatHeaders("Bearer "+validSecret, name, true))
		stream := ""
		if name == "stream" {
			stream = `"stream":true,`
		}
		s.roundTrip(requestBody(`{"model":"gpt",` + stream + `"messages":[{"role":"user","content":"hi"}]}`))
		held, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow)
		hold := before.Sub(held)
		for _, m := range answers[name] {
			s.roundTrip(m)
		}
		s.close()
		recs := rec.all()
		r := recs[len(recs)-1]
		after, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow)
		if !hold.IsPositive() || !r.Cost.Equal(hold) || !before.Sub(after).Equal(hold) || !r.Overage.Equal(decimal.NewFromInt(2_000_003).Sub(hold)) {
			t.Fatalf("%s: record %+v, debited %s: want the hold %s, not $2,000,003", name, r, before.Sub(after), hold)
		}
	}
}

func TestAdmissionStreamsAndCuts(t *testing.T) {
	// The cut stream below is billed from a token count: load the tokenizer first, outside the
	// streams' deadline (seconds under -race on a busy machine; it is not what is tested here).
	billing.Warm()
	e, ledger, rec := billedServer(t, "1000", nil)
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	streamed := `{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	s.roundTrip(requestBody(streamed))
	rt := e.srv.runtime.Load()
	up, _, err := chat.AttemptRequest(rt, []byte(streamed), rt.Models["gpt"], rt.Providers["openai"])
	if err != nil || !strings.Contains(string(decodeObject(t, up.Body)["stream_options"]), `"include_usage":true`) {
		t.Fatalf("stream usage not requested upstream: %v %s", err, up.Body)
	}
	if m := s.roundTrip(sseHeaders()).GetModeOverride(); m.GetResponseBodyMode() != extprocv3filter.ProcessingMode_STREAMED {
		t.Fatalf("SSE not streamed through the meter: %v", m)
	}
	text := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello\"}}]}\n\n"
	if r := s.roundTrip(bodyChunk(text, false)); r.GetResponseBody().GetResponse().GetBodyMutation() != nil {
		t.Fatal("a content chunk was rewritten")
	}
	r := s.roundTrip(bodyChunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", true))
	if got := string(r.GetResponseBody().GetResponse().GetBodyMutation().GetBody()); got != "data: [DONE]\n\n" {
		t.Fatalf("client got %q; the usage chunk it did not ask for must go", got)
	}
	s.close()
	if recs := rec.all(); len(recs) != 1 || !recs[0].Cost.Equal(decimal.NewFromInt(7)) || recs[0].Estimated {
		t.Fatalf("records %+v: want $7 from the usage chunk", recs)
	}

	// A stream that ends without its end (client gone, provider cut) is billed from what was sent.
	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r2", true))
	s.roundTrip(requestBody(`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	s.roundTrip(sseHeaders())
	s.roundTrip(bodyChunk(text, false))
	s.close()
	waitFor := time.Now().Add(2 * time.Second)
	for len(rec.all()) < 2 && time.Now().Before(waitFor) {
		time.Sleep(10 * time.Millisecond)
	}
	recs := rec.all()
	if len(recs) != 2 || !recs[1].Estimated || recs[1].CompletionTokens != 1 || recs[1].PromptTokens == 0 {
		t.Fatalf("records %+v: want an estimate for the cut stream", recs)
	}

	// A provider error releases the hold and bills nothing.
	before, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow)
	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r3", true))
	s.roundTrip(requestBody(shortPrompt))
	s.roundTrip(servedHeaders("503", "application/json", "openai/gpt"))
	s.roundTrip(responseBody(`{"error":{"message":"overloaded","code":"overloaded"}}`))
	s.close()
	if after, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow); !after.Equal(before) || len(rec.all()) != 2 {
		t.Fatalf("a failed request changed the books: %s -> %s", before, after)
	}
}

// BenchmarkAdmission is the request side's CPU with and without billing: parse and plan, then
// (billing on) the prompt bound, the worst-case price, the hold and its provisional record.
func BenchmarkAdmission(b *testing.B) {
	g := testGateway()
	p, _ := ir.ParsePricing(map[string]any{"prompt": "0.00000015", "completion": "0.0000006"})
	g.Models[0].Pricing = p
	rt := core.Compile(g, []store.Key{keyRecord("key_valid", validSecret, false)})
	body := []byte(`{"model":"gpt","stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words"}],"max_tokens":32,"temperature":0.2}`)
	for _, billed := range []bool{false, true} {
		var bl *Billing
		if billed {
			ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.NewFromInt(1e9)}, nil, "2026-11")
			bl = &Billing{Ledger: ledger, Record: func(store.UsageRecord) {}, Hold: func(store.UsageRecord, func() decimal.Decimal) {}, End: func(string) {}, Now: time.Now}
		}
		s := NewServer(nil, rt, bl)
		hdrs := chatHeaders("Bearer "+validSecret, "r1", true).GetRequestHeaders()
		b.Run(map[bool]string{false: "off", true: "on"}[billed], func(b *testing.B) {
			for b.Loop() {
				x := s.newExchange(rt)
				x.requestHeaders(hdrs)
				x.requestBody(&extprocv3.HttpBody{Body: body, EndOfStream: true})
				x.finish()
			}
		})
	}
}

// TestAdmissionBillsOtherModels: usage the provider reports on other models than the one asked
// (an Anthropic advisor's iterations, usage.other_models) is billed at the prices of the
// catalog model that serves it, on the answering provider first, else on a provider of the
// same type; a model the catalog does not have is not billed (issue 26 item 11).
func TestAdmissionBillsOtherModels(t *testing.T) {
	g := testGateway()
	price := func(m map[string]any) ir.Pricing {
		p, err := ir.ParsePricing(m)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	g.Models[0].Pricing = price(map[string]any{"prompt": "1", "completion": "2"})
	g.Models[0].MaxOutputLength = 1000 // a hold well above the bill
	g.Models = append(g.Models,
		ir.Model{ID: "advisor", Pricing: price(map[string]any{"prompt": "10", "completion": "20", "input_cache_read": "5", "request": "1000"}), Targets: []ir.Target{{Provider: "openai", Model: "o3-advisor"}}},
		ir.Model{ID: "advisor-groq", Pricing: price(map[string]any{"prompt": "3", "completion": "7"}), Targets: []ir.Target{{Provider: "groq", Model: "o4-advisor"}}},
		ir.Model{ID: "advisor-local", Pricing: price(map[string]any{"prompt": "1000"}), Targets: []ir.Target{{Provider: "local", Model: "o3-advisor"}}},
	)
	rt := core.Compile(g, []store.Key{keyRecord("key_valid", validSecret, false)})
	ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.NewFromInt(10000)}, nil, "2026-11")
	rec := &recorder{}
	e := startServerWith(t, rt, &Billing{Ledger: ledger, Record: rec.record, Now: func() time.Time { return testNow }})
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	s.roundTrip(requestBody(shortPrompt))
	s.roundTrip(servedHeaders("200", "application/json", "openai/gpt"))
	s.roundTrip(responseBody(`{"choices":[{"index":0,"message":{"role":"assistant","content":"4"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,` +
		`"other_models":[{"model":"o3-advisor","prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}},` +
		`{"model":"o4-advisor","prompt_tokens":1,"completion_tokens":1},{"model":"mystery","prompt_tokens":100,"completion_tokens":100}]}}`))
	s.close()
	// 3x1 + 4x2; o3-advisor on openai: 8x10 + 2x5 + 1x20 (tokens only: its request price is
	// not this request's); o4-advisor on groq (type openai): 1x3 + 1x7; mystery: not billed.
	recs := rec.all()
	if len(recs) != 1 || !recs[0].Cost.Equal(decimal.NewFromInt(11+110+10)) || recs[0].PromptTokens != 3 || recs[0].CompletionTokens != 4 || recs[0].Model != "gpt" {
		t.Fatalf("records %+v: want one of $131", recs)
	}
	if avail, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow); !avail.Equal(decimal.NewFromInt(10000 - 131)) {
		t.Fatalf("available %s after settling $131 of 10000", avail)
	}
}
