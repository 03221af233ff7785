package extproc

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/core"

	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/xds/ir"
)

// immediateOf returns the immediate response's status, body and x-request-id header.
func immediateOf(t *testing.T, r *extprocv3.ProcessingResponse) (int, apiErrorBody, string) {
	t.Helper()
	im := r.GetImmediateResponse()
	if im == nil {
		t.Fatalf("want an immediate response, got %v", r)
	}
	var b apiErrorBody
	if err := json.Unmarshal(im.GetBody(), &b); err != nil {
		t.Fatalf("body %s: %v", im.GetBody(), err)
	}
	rid := ""
	for _, h := range im.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-request-id" {
			rid = core.HeaderValue(h.GetHeader())
		}
	}
	return int(im.GetStatus().GetCode()), b, rid
}

type apiErrorBody struct {
	Error struct {
		Message   string `json:"message"`
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// TestInvalidRequestIDIsRefusedWithAFreshOne: the client's id cannot be echoed (Envoy copies the
// request's x-request-id into every answer), so it is replaced first and the refusal comes at
// the next message, carrying the replacement in header and body alike.
func TestInvalidRequestIDIsRefusedWithAFreshOne(t *testing.T) {
	s := NewServer(nil, testRuntime(), nil)
	bad := strings.Repeat("r", 40<<10)
	for _, next := range []string{"body", "response headers"} {
		x := s.newExchange(s.runtime.Load())
		r := x.requestHeaders(chatHeaders("Bearer "+validSecret, bad, true).GetRequestHeaders())
		rh := r.GetRequestHeaders()
		if rh == nil {
			t.Fatalf("invalid id answered at once (%v): the answer would carry it", r)
		}
		set := setHeaders(t, rh.GetResponse().GetHeaderMutation())
		fresh := set["x-request-id"]
		if len(fresh) != 36 || fresh == bad {
			t.Fatalf("x-request-id replaced by %q", fresh)
		}
		if m := r.GetModeOverride(); m.GetRequestBodyMode() != extprocv3filter.ProcessingMode_NONE {
			t.Errorf("mode override %v: the body of a refused request must not be buffered", m)
		}
		var out *extprocv3.ProcessingResponse
		if next == "body" {
			out = x.requestBody(&extprocv3.HttpBody{Body: []byte(shortPrompt), EndOfStream: true})
		} else {
			out = x.responseHeaders(responseHeaders("503", true).GetResponseHeaders())
		}
		status, body, rid := immediateOf(t, out)
		if status != 400 || body.Error.Code != "invalid_request_id" || body.Error.RequestID != fresh || rid != fresh {
			t.Errorf("at %s: %d %+v x-request-id %q, want 400 invalid_request_id with %q", next, status, body, rid, fresh)
		}
	}
}

// TestBodySizeLimit: exactly ir.MaxBodyBytes passes, one byte more is 413, whether declared in
// content-length (refused before buffering) or found in the buffered body.
func TestBodySizeLimit(t *testing.T) {
	s := NewServer(nil, testRuntime(), nil)
	headers := func(length int) *extprocv3.HttpHeaders {
		h := chatHeaders("Bearer "+validSecret, "rid", true).GetRequestHeaders()
		h.Headers.Headers = append(h.Headers.Headers, hdr("content-length", strconv.Itoa(length), true))
		return h
	}
	x := s.newExchange(s.runtime.Load())
	if r := x.requestHeaders(headers(ir.MaxBodyBytes)); r.GetRequestHeaders() == nil {
		t.Fatalf("content-length of exactly 32 MiB refused: %v", r)
	}
	x = s.newExchange(s.runtime.Load())
	if status, body, _ := immediateOf(t, x.requestHeaders(headers(ir.MaxBodyBytes+1))); status != 413 || body.Error.Code != "request_too_large" {
		t.Errorf("declared 32 MiB + 1: %d %+v", status, body)
	}
	x = s.newExchange(s.runtime.Load())
	x.requestHeaders(chatHeaders("Bearer "+validSecret, "rid", true).GetRequestHeaders())
	big := make([]byte, ir.MaxBodyBytes+1)
	if status, body, _ := immediateOf(t, x.requestBody(&extprocv3.HttpBody{Body: big, EndOfStream: true})); status != 413 || body.Error.Code != "request_too_large" {
		t.Errorf("buffered 32 MiB + 1: %d %+v", status, body)
	}
}
