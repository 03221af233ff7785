package extproc

import (
	"testing"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/xds/ir"
)

func fuzzGateway() *ir.Gateway    { return fixture.EveryTypeGateway() }
func testGateway() *ir.Gateway    { return fixture.Gateway() }
func testSecret(seed byte) string { return fixture.Secret(seed) }
func testRuntime() *core.Runtime  { return fixture.Runtime() }

var (
	keyRecord     = fixture.KeyRecord
	decodeObject  = fixture.DecodeObject
	jsonString    = fixture.JSONString
	validSecret   = fixture.ValidSecret
	revokedSecret = fixture.RevokedSecret
	unknownSecret = fixture.UnknownSecret
)

// hdr builds a header; raw puts the value in RawValue as Envoy does.
func hdr(k, v string, raw bool) *corev3.HeaderValue {
	if raw {
		return &corev3.HeaderValue{Key: k, RawValue: []byte(v)}
	}
	return &corev3.HeaderValue{Key: k, Value: v}
}

func requestHeaders(eos bool, hs ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos},
	}}
}

func chatHeaders(auth, requestID string, raw bool) *extprocv3.ProcessingRequest {
	return requestHeaders(false,
		hdr(":method", "POST", raw),
		hdr(":path", "/v1/chat/completions", raw),
		hdr(":authority", "127.0.0.1:8080", raw),
		hdr("content-type", "application/json", raw),
		hdr("authorization", auth, raw),
		hdr("x-request-id", requestID, raw),
	)
}

func requestBody(body string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true},
	}}
}

func responseHeaders(status string, raw bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hdr(":status", status, raw), hdr("content-type", "application/json", raw),
		}}},
	}}
}

func responseBody(body string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true},
	}}
}

// setHeaders flattens a mutation's set headers, checking each overwrites.
func setHeaders(t *testing.T, m *extprocv3.HeaderMutation) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range m.GetSetHeaders() {
		if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			t.Errorf("header %s set with append action %v, want OVERWRITE_IF_EXISTS_OR_ADD", o.GetHeader().GetKey(), o.GetAppendAction())
		}
		k := o.GetHeader().GetKey()
		if _, dup := out[k]; dup {
			t.Errorf("header %s set twice", k)
		}
		out[k] = core.HeaderValue(o.GetHeader())
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
