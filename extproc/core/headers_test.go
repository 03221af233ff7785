package core

import (
	"strings"
	"testing"
)

func TestCheckRequestID(t *testing.T) {
	for id, ok := range map[string]bool{
		"":                          true, // none sent (Envoy makes one)
		"0b5e8f1c-1e5a-4c5e-9d57-":  true,
		strings.Repeat("a", 128):    true,
		strings.Repeat("a", 129):    false,
		strings.Repeat("a", 40<<10): false,
		"with space":                false,
		"tab\there":                 false,
		"caf\u00e9":                 false,
		"nul\x00":                   false,
	} {
		if got := CheckRequestID(id) == nil; got != ok {
			t.Errorf("checkRequestID(%.20q) ok = %v, want %v", id, got, ok)
		}
	}
}

func TestCheckContentType(t *testing.T) {
	for ct, ok := range map[string]bool{
		"": true, "application/json": true, "application/json; charset=utf-8": true, "APPLICATION/JSON": true,
		"text/plain": false, "application/x-www-form-urlencoded": false, "application/jsonp": false, "json": false,
	} {
		e := CheckContentType(ct)
		if (e == nil) != ok || (e != nil && (e.Status != 415 || e.Code != "unsupported_media_type")) {
			t.Errorf("checkContentType(%q) = %v, want ok=%v", ct, e, ok)
		}
	}
}

func TestInternalHeaders(t *testing.T) {
	for _, k := range []string{"x-tollway-provider", "x-tollway-phase", "x-envoy-original-path", "x-envoy-max-retries", "x-envoy-upstream-rq-timeout-ms"} {
		if !ClientInternalHeader(k) || !UpstreamDropped(k) {
			t.Errorf("%s must be stripped", k)
		}
	}
	for _, k := range []string{"x-envoy-internal", "x-envoy-external-address"} {
		if ClientInternalHeader(k) || !UpstreamDropped(k) {
			t.Errorf("%s: Envoy's own at the edge, never sent to a provider", k)
		}
	}
	if ClientInternalHeader("x-request-id") || UpstreamDropped("x-request-id") || UpstreamDropped(":path") || UpstreamDropped("content-type") {
		t.Error("ordinary headers stripped")
	}
	// A provider acts on headers of its own: a client must not set them through the gateway.
	for _, k := range []string{"openai-organization", "openai-project", "anthropic-beta", "x-goog-user-project", "cookie", "authorization", "accept-encoding"} {
		if !UpstreamDropped(k) {
			t.Errorf("%s reaches the provider", k)
		}
	}
}
