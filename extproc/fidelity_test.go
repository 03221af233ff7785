package extproc

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// answerHeaders are the response headers the router-level filter sees: the route's served
// header and whatever the attempt's filter added.
func answerHeaders(served string, extra ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
	hs := append([]*corev3.HeaderValue{hdr(":status", "200", true), hdr("content-type", "application/json", true), hdr(ir.ServedHeader, served, true)}, extra...)
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}},
	}}
}

// TestRemovedParamsNamesNestedFields: fields an adapter drops inside fields it carries
// (messages[].name, tools[].function.strict on Gemini) reach x-tollway-removed-params next to
// the top-level ones, through the attempt's header; before, they vanished without a word.
// A provider speaking OpenAI's API cannot add names through that header.
func TestRemovedParamsNamesNestedFields(t *testing.T) {
	e := startServer(t, core.Compile(fuzzGateway(), []store.Key{keyRecord("key_valid", validSecret, false)}))
	body := `{"model":"flash","logit_bias":{"1":2},"messages":[{"role":"user","content":"hi","name":"alice"}],` +
		`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true}}]}`

	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "req-nested", true))
	if rb := s.roundTrip(requestBody(body)).GetRequestBody(); rb == nil {
		t.Fatal("the router-level filter did not accept the request")
	}

	a := e.openAttempt("gemini", "flash")
	a.roundTrip(chatHeaders("Bearer "+validSecret, "req-nested", true))
	up := a.roundTrip(requestBody(body)).GetRequestBody().GetResponse().GetBodyMutation().GetBody()
	if strings.Contains(string(up), "alice") || strings.Contains(string(up), "strict") || strings.Contains(string(up), "logit") {
		t.Errorf("Gemini got fields it has no place for: %s", up)
	}
	ah := a.roundTrip(responseHeaders("200", true)).GetResponseHeaders()
	nested := setHeaders(t, ah.GetResponse().GetHeaderMutation())[ir.AttemptRemovedHeader]
	if nested != "messages[].name,tools[].function.strict" {
		t.Errorf("attempt's %s = %q", ir.AttemptRemovedHeader, nested)
	}

	rh := s.roundTrip(answerHeaders("gemini/flash", hdr(ir.AttemptRemovedHeader, nested, true))).GetResponseHeaders()
	mut := rh.GetResponse().GetHeaderMutation()
	if got, want := setHeaders(t, mut)["x-tollway-removed-params"], "logit_bias,messages[].name,tools[].function.strict"; got != want {
		t.Errorf("x-tollway-removed-params = %q, want %q", got, want)
	}
	if !contains(mut.GetRemoveHeaders(), ir.AttemptRemovedHeader) {
		t.Errorf("%s reaches the client (removed: %v)", ir.AttemptRemovedHeader, mut.GetRemoveHeaders())
	}

	// An OpenAI-shaped provider's answer headers are not the gateway's: a header of that name
	// from it is ignored.
	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "req-forged", true))
	s.roundTrip(requestBody(`{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`))
	rh = s.roundTrip(answerHeaders("openai/gpt", hdr(ir.AttemptRemovedHeader, "made_up", true))).GetResponseHeaders()
	if got := setHeaders(t, rh.GetResponse().GetHeaderMutation())["x-tollway-removed-params"]; got != "" {
		t.Errorf("x-tollway-removed-params = %q from an OpenAI provider's own header", got)
	}
}

// TestAttemptRefusesWhatTheProviderCannotTake: a value OpenAI allows but the attempt's
// provider does not (Anthropic's temperature tops out at 1; Gemini takes one candidate) is a
// 400 invalid_request naming the field, the provider and the fix, answered by the attempt
// before anything reaches the provider. Before, temperature 1.5 went to Anthropic to fail
// there, and n=2 was dropped without a word.
func TestAttemptRefusesWhatTheProviderCannotTake(t *testing.T) {
	e := startServer(t, core.Compile(fuzzGateway(), []store.Key{keyRecord("key_valid", validSecret, false)}))
	for _, c := range []struct {
		provider, model, body string
		want                  []string
	}{
		{"anthropic", "claude", `{"model":"claude","temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, []string{"temperature", "Anthropic", "0 to 1"}},
		{"gemini", "flash", `{"model":"flash","n":2,"messages":[{"role":"user","content":"hi"}]}`, []string{"n=2", "Gemini", "n=1"}},
		{"anthropic", "claude", `{"model":"claude","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/bmp;base64,AAAA"}}]}]}`, []string{"image/bmp", "image/jpeg, image/png, image/gif, image/webp"}},
	} {
		a := e.openAttempt(c.provider, c.model)
		a.roundTrip(chatHeaders("Bearer "+validSecret, "req-refused", true))
		imm := a.roundTrip(requestBody(c.body)).GetImmediateResponse()
		if imm == nil || imm.GetStatus().GetCode() != 400 {
			t.Errorf("%s: answered %v, want an immediate 400", c.body, imm)
			continue
		}
		got := string(imm.GetBody())
		if !strings.Contains(got, `"code":"invalid_request"`) || !strings.Contains(got, `"request_id":"req-refused"`) {
			t.Errorf("%s: body %s", c.body, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: message %s lacks %q", c.body, got, w)
			}
		}
	}
}
