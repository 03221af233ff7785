package extproc

import (
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// This file is the scenario `make walk` traces (test/walk): one streamed chat completion in
// OpenAI's chat API, answered by Anthropic, as Tollway's own Envoy sends it: on the default,
// split gateway (routing.fast_lane: true; answers.go) through the router-level stream (the
// request), the attempt's and the chunk lane's answer filter's (the answer); on an unsplit one
// (routing.fast_lane: false, `make walk WALK_FLAGS=-unsplit`) through the router-level stream
// and the attempt's. The trace is cut at each WalkMark; test/walk maps the stubs below to the
// production code they stand for (cmd/tollway/internal/metrics, store/settle).

// walkObserver stands in for cmd/tollway/internal/metrics.Metrics (the server's observer and the
// ledger's).
type walkObserver struct{}

func (walkObserver) StreamStarted(string)              {}
func (walkObserver) StreamEnded(string, time.Duration) {}
func (walkObserver) RequestDone(*Outcome)              {}
func (walkObserver) Held(error)                        {}
func (walkObserver) Ended(bool)                        {}

// walkRecord, walkHold and walkEnd stand in for the wiring of cmd/tollway/internal/server
// (observe.go's bill.Record wrapper and store/settle's Settler).
func walkRecord(store.UsageRecord)                       {}
func walkHold(store.UsageRecord, func() decimal.Decimal) {}
func walkEnd(string)                                     {}

const walkBody = `{"model":"claude","messages":[{"role":"user","content":"Hello"}],"stream":true,"max_tokens":256}`

// Anthropic's SSE: the first chunk (not walked), a typical chunk, the last chunk.
const (
	walkFirst = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	walkTypical = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n"
	walkLast    = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// WalkMark is called between the scenario's phases so that a trace can be cut there.
//
//go:noinline
func WalkMark(phase string) { _ = phase }

// walkGateway is the scenario's ext_proc server: the test gateway with Anthropic serving
// "claude", billing on its ledger, whose clock now stands still.
func walkGateway(t *testing.T) (*envoy, *billing.Ledger, func() time.Time) {
	g := testGateway()
	g.Providers = append(g.Providers, ir.Provider{Name: "anthropic", Type: ir.ProviderTypeAnthropic, Host: "api.anthropic.com", Port: 443, TLS: true, BasePath: "/v1", NeedsKey: true, APIKey: "sk-ant"})
	p, err := ir.ParsePricing(map[string]any{"prompt": "0.000003", "completion": "0.000015"})
	if err != nil {
		t.Fatal(err)
	}
	g.Models = append(g.Models, ir.Model{ID: "claude", MaxOutputLength: 8192, Pricing: p, Targets: []ir.Target{{Provider: "anthropic", Model: "claude-sonnet-4-5"}}})
	rt := core.Compile(g, []store.Key{keyRecord("key_valid", validSecret, false)})
	ledger := billing.NewLedger(map[string]decimal.Decimal{"acct-key_valid": decimal.RequireFromString("100")}, nil, "2026-11")
	ledger.SetObserver(walkObserver{})
	// The books' clock stands still: a chunk never falls due for a checkpoint however slowly
	// the tracer lets it pass (billing.CheckpointEvery), so that every trace walks the same.
	now := func() time.Time { return time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC) }
	b := &Billing{Ledger: ledger, Record: walkRecord, Hold: walkHold, End: walkEnd, Now: now}
	e := startServerWith(t, rt, b)
	e.srv.SetObserver(walkObserver{})
	return e, ledger, now
}

// walkRequest is the request's headers and body on the router-level stream r; it returns the
// replies.
func walkRequest(t *testing.T, r *stream) []*extprocv3.ProcessingResponse {
	t.Helper()
	out := r.pipelined(2, withLength(chatHeaders("Bearer "+validSecret, "req-walk", true), len(walkBody)), chunk(true, walkBody, true))
	if out[1].GetRequestBody() == nil {
		t.Fatalf("router body: %v", out[1])
	}
	return out
}

// walkAttempt is the attempt's stream to Anthropic: the request rewritten for it, the answer's
// headers.
func walkAttempt(t *testing.T, e *envoy) *attemptStream {
	t.Helper()
	WalkMark("attempt-request")
	a := e.openAttempt("anthropic", "claude")
	h := chatHeaders("Bearer "+validSecret, "req-walk", true)
	hs := h.GetRequestHeaders().GetHeaders()
	hs.Headers = append(hs.Headers, hdr("x-envoy-expected-rq-timeout-ms", "60000", true), hdr("x-envoy-internal", "true", true))
	if resp := a.roundTrip(h); resp.GetRequestHeaders() == nil {
		t.Fatalf("attempt headers: %v", resp)
	}
	resp := a.roundTrip(requestBody(walkBody))
	if got := string(resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody()); !strings.Contains(got, `"claude-sonnet-4-5"`) {
		t.Fatalf("attempt body not rewritten for Anthropic: %s", got)
	}
	WalkMark("attempt-response-headers")
	if resp := a.roundTrip(answerWith("200", "text/event-stream")); resp.GetResponseHeaders() == nil {
		t.Fatalf("attempt response headers: %v", resp)
	}
	return a
}

// walkAnswer is the answer on the stream that reads it (side: "router" unsplit, "answer"
// split; pass sends it one message and reads its reply): its headers, then each chunk
// translated on the attempt's stream a and passed on. It returns what the client got.
func walkAnswer(t *testing.T, a *attemptStream, side string, pass func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse) string {
	t.Helper()
	WalkMark(side + "-response-headers")
	rh := answerWith("200", "text/event-stream", hdr(ir.ServedHeader, "anthropic/claude", true), hdr(ir.AttemptsHeader, "1", true))
	if out := pass(rh); out.GetResponseHeaders() == nil {
		t.Fatalf("%s response headers: %v", side, out)
	}
	var client strings.Builder
	for _, c := range []struct {
		name, body string
		eos        bool
	}{{"first", walkFirst, false}, {"typical", walkTypical, false}, {"last", walkLast, true}} {
		WalkMark("attempt-" + c.name)
		translated := a.roundTrip(chunk(false, c.body, c.eos)).GetResponseBody().GetResponse().GetBodyMutation().GetBody()
		WalkMark(side + "-" + c.name)
		out := pass(chunk(false, string(translated), c.eos))
		client.Write(out.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	return client.String()
}

// walkBilled checks the client's stream and the bill: 9 prompt tokens at 0.000003, 3
// completion tokens at 0.000015.
func walkBilled(t *testing.T, client string, ledger *billing.Ledger, now func() time.Time) {
	t.Helper()
	for _, want := range []string{`"content":" there"`, `"model":"claude"`, "data: [DONE]"} {
		if !strings.Contains(client, want) {
			t.Errorf("the client's stream lacks %s:\n%s", want, client)
		}
	}
	available, _ := ledger.Snapshot("acct-key_valid", "key_valid", now())
	if want := decimal.RequireFromString("99.999928"); !available.Equal(want) {
		t.Errorf("balance after the answer = %s, want %s (100 less 0.000072)", available, want)
	}
}

// TestWalkScenario: on the default, split gateway a streamed chat to Anthropic is read on the
// router-level stream, which parks its exchange; the answer is translated chunk by chunk on the
// attempt's stream and passed to the client on the chunk lane's answer filter's stream, which
// adopts the exchange by the id Envoy forwards; the answer is billed its exact cost at the last
// chunk, and the exchange, ended with the answer filter's stream, leaves the book.
func TestWalkScenario(t *testing.T) {
	e, ledger, now := walkGateway(t)

	WalkMark("router-request")
	r := e.openSplit()
	id := parkedAs(t, walkRequest(t, r)...)
	// The router-level stream reads no answer: Envoy may close it as soon as the request is
	// read (it closes an ext_proc stream once nothing more is to be processed), before the
	// attempt.
	WalkMark("router-close")
	r.close()

	a := walkAttempt(t, e)
	WalkMark("answer-response-headers") // the answer filter's stream opens with the answer's headers
	ans := e.openAnswer(id)
	client := walkAnswer(t, a, "answer", func(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse { return ans.pipelined(1, m)[0] })

	WalkMark("attempt-close")
	a.close()
	WalkMark("answer-close")
	ans.close()
	WalkMark("end")

	walkBilled(t, client, ledger, now)
	e.srv.answers.mu.Lock()
	defer e.srv.answers.mu.Unlock()
	for _, x := range e.srv.answers.parked { // only to write its line if its entry lacks the bill
		if !x.park.answered {
			t.Errorf("exchange %s left parked, not answered, after the answer filter's stream ended", x.park.id)
		}
	}
}

// TestWalkUnsplit: on an unsplit gateway (routing.fast_lane: false) the same chat is read and
// answered on the router-level stream, translated on the attempt's, and billed the same.
func TestWalkUnsplit(t *testing.T) {
	e, ledger, now := walkGateway(t)

	WalkMark("router-request")
	r := e.openPhase(ir.PhaseRouter)
	walkRequest(t, r)
	a := walkAttempt(t, e)
	client := walkAnswer(t, a, "router", func(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse { return r.pipelined(1, m)[0] })

	WalkMark("attempt-close")
	a.close()
	WalkMark("router-close")
	r.close()
	WalkMark("end")

	walkBilled(t, client, ledger, now)
}
