package extproc

import (
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// TestHeadersOverTheLimit: headers over 60 KiB or 100 entries are a 431 headers_too_large with
// the request id, on any path, before the key is even looked at.
func TestHeadersOverTheLimit(t *testing.T) {
	e := startServer(t, testRuntime())
	with := func(extra ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
		r := chatHeaders("Bearer "+validSecret, "rid-big", true)
		hs := r.GetRequestHeaders().Headers
		hs.Headers = append(hs.Headers, extra...)
		return r
	}
	var many []*corev3.HeaderValue
	for i := range 95 {
		many = append(many, hdr(fmt.Sprintf("x-h%d", i), "v", true))
	}
	for name, req := range map[string]*extprocv3.ProcessingRequest{
		"size":  with(hdr("x-big", strings.Repeat("a", 60<<10), true)),
		"count": with(many...),
	} {
		t.Run(name, func(t *testing.T) {
			imm := e.open().roundTrip(req).GetImmediateResponse()
			if imm == nil || imm.GetStatus().GetCode() != 431 || !strings.Contains(string(imm.GetBody()), `"code":"headers_too_large"`) ||
				!strings.Contains(string(imm.GetBody()), `"request_id":"rid-big"`) {
				t.Fatalf("got %v", imm)
			}
		})
	}
	if resp := e.open().roundTrip(with(hdr("x-fits", strings.Repeat("a", 50<<10), true))); resp.GetImmediateResponse() != nil {
		t.Fatalf("headers under the limit refused: %v", resp.GetImmediateResponse())
	}
}

// TestChatTurnsResponseProcessingOn: Envoy sends response headers only after ext_proc accepted
// the request's headers (the filter is configured with them off), and every later override
// keeps them on: an override that left the header mode at DEFAULT made Envoy 1.40 refuse the
// content-length of rewritten error bodies.
func TestChatTurnsResponseProcessingOn(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.open()
	check := func(what string, m *extprocv3filter.ProcessingMode, body extprocv3filter.ProcessingMode_BodySendMode) {
		t.Helper()
		if m.GetResponseHeaderMode() != extprocv3filter.ProcessingMode_SEND || m.GetRequestBodyMode() != extprocv3filter.ProcessingMode_BUFFERED ||
			m.GetResponseBodyMode() != body {
			t.Fatalf("%s: mode override %v", what, m)
		}
	}
	check("request headers", s.roundTrip(chatHeaders("Bearer "+validSecret, "rid-1", true)).GetModeOverride(), extprocv3filter.ProcessingMode_NONE)
	if resp := s.roundTrip(requestBody(`{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`)); resp.GetImmediateResponse() != nil {
		t.Fatalf("refused: %v", resp.GetImmediateResponse())
	}
	check("error response headers", s.roundTrip(responseHeaders("503", true)).GetModeOverride(), extprocv3filter.ProcessingMode_BUFFERED)
}
