package extproc

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// testGateway is the catalog the extproc tests run against.
//
//	openai  needs a key, has one
//	local   needs no key
//	nokey   needs a key, has none
//	groq    needs a key, has one
func testGateway() *ir.Gateway {
	return &ir.Gateway{
		Listener: ir.Listener{Address: "127.0.0.1", Port: 8080},
		Providers: []ir.Provider{
			{Name: "openai", Type: ir.ProviderTypeOpenAI, Host: "api.openai.com", Port: 443, TLS: true, BasePath: "/v1", NeedsKey: true, APIKey: "sk-openai-secret"},
			{Name: "local", Type: ir.ProviderTypeOpenAI, Host: "127.0.0.1", Port: 11434, BasePath: "/v1"},
			{Name: "nokey", Type: ir.ProviderTypeOpenAI, Host: "example.com", Port: 443, TLS: true, BasePath: "/v1", NeedsKey: true},
			{Name: "groq", Type: ir.ProviderTypeOpenAI, Host: "api.groq.com", Port: 443, TLS: true, BasePath: "/openai/v1", NeedsKey: true, APIKey: "gsk-groq-secret"},
		},
		Models: []ir.Model{
			{ID: "gpt", Targets: []ir.Target{{Provider: "openai", Model: "gpt-4o-2024-08-06"}, {Provider: "local", Model: "llama3.2"}},
				SupportedParameters: []string{"temperature", "max_tokens", "tools"}},
			{ID: "free", Targets: []ir.Target{{Provider: "local", Model: "qwen2.5:7b"}}},
			{ID: "broken", Targets: []ir.Target{{Provider: "nokey", Model: "x"}}},
			{ID: "fallback", Targets: []ir.Target{{Provider: "nokey", Model: "a"}, {Provider: "groq", Model: "llama-3.3-70b"}}},
		},
	}
}

// testSecret is a well-formed API key derived from seed.
func testSecret(seed byte) string {
	var b [32]byte
	for i := range b {
		b[i] = seed + byte(i)
	}
	return store.KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func keyRecord(id, secret string, revoked bool) store.Key {
	h := sha256.Sum256([]byte(secret))
	k := store.Key{ID: id, Account: "acct-" + id, Hash: hex.EncodeToString(h[:]), CreatedAt: time.Unix(1700000000, 0).UTC()}
	if revoked {
		t := time.Unix(1700000100, 0).UTC()
		k.RevokedAt = &t
	}
	return k
}

var (
	validSecret   = testSecret(1)
	revokedSecret = testSecret(2)
	unknownSecret = testSecret(3)
)

func testRuntime() *core.Runtime {
	return core.Compile(testGateway(), []store.Key{
		keyRecord("key_valid", validSecret, false),
		keyRecord("key_revoked", revokedSecret, true),
	})
}

// decodeObject parses a JSON object body into raw fields.
func decodeObject(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %s is not a JSON object: %v", body, err)
	}
	return m
}

func jsonString(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s is not a JSON string: %v", raw, err)
	}
	return s
}

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
