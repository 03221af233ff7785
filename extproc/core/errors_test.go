package core

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestUpstreamError(t *testing.T) {
	long := strings.Repeat("x", 600)
	tests := []struct {
		name     string
		status   int
		body     string
		code     string
		message  string   // exact, when set
		contains []string // otherwise
		absent   []string
	}{
		{
			name: "openai shape with code", status: 429,
			body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			code: "rate_limit_exceeded", message: "Rate limit reached",
		},
		{
			name: "code null falls back to type", status: 400,
			body: `{"error":{"message":"bad things","type":"invalid_request_error","code":null}}`,
			code: "invalid_request_error", message: "bad things",
		},
		{
			name: "numeric code falls back to type", status: 400,
			body: `{"error":{"message":"m","type":"t","code":400}}`,
			code: "t", message: "m",
		},
		{
			name: "no code no type", status: 502,
			body: `{"error":{"message":"upstream broke"}}`,
			code: "upstream_error", message: "upstream broke",
		},
		{
			name: "error as string", status: 404,
			body: `{"error":"model 'llama9' not found"}`,
			code: "upstream_error", message: "model 'llama9' not found",
		},
		{
			name: "non-JSON body", status: 503,
			body: "<html>Service Unavailable</html>",
			code: "upstream_error", contains: []string{"groq", "503", "<html>Service Unavailable</html>"},
		},
		{
			name: "JSON without error field", status: 500,
			body: `{"detail":"boom"}`,
			code: "upstream_error", contains: []string{"groq", "500", `{"detail":"boom"}`},
		},
		{
			name: "error object without message", status: 500,
			body: `{"error":{"code":"x"}}`,
			code: "upstream_error", contains: []string{"groq", "500"},
		},
		{
			name: "empty body", status: 500, body: "",
			code: "upstream_error", contains: []string{"groq", "500"},
		},
		{
			name: "long body truncated", status: 500, body: long,
			code: "upstream_error", contains: []string{"groq", "500", strings.Repeat("x", 512) + "..."},
			absent: []string{strings.Repeat("x", 513)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := UpstreamError(tt.status, "groq", []byte(tt.body))
			if e.Status != tt.status {
				t.Errorf("status = %d, want %d (the provider's)", e.Status, tt.status)
			}
			if e.Code != tt.code {
				t.Errorf("code = %q, want %q", e.Code, tt.code)
			}
			if e.Message == "" {
				t.Error("empty message")
			}
			if tt.message != "" && e.Message != tt.message {
				t.Errorf("message = %q, want %q", e.Message, tt.message)
			}
			for _, s := range tt.contains {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not contain %q", e.Message, s)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(e.Message, s) {
					t.Errorf("message contains %q (len %d); it should be truncated", s[:20], len(e.Message))
				}
			}
		})
	}
}

func TestAPIErrorBody(t *testing.T) {
	e := Errorf(http.StatusBadRequest, "missing_model", "model %q is <required>", "x")
	if e.Message != `model "x" is <required>` {
		t.Fatalf("apiErr formatted %q", e.Message)
	}
	if !strings.Contains(e.Error(), "400") || !strings.Contains(e.Error(), "missing_model") {
		t.Errorf("Error() = %q, want status and code", e.Error())
	}
	for _, tt := range []struct {
		requestID string
		wantKey   bool
	}{{"req-123", true}, {"", false}} {
		var got struct {
			Error map[string]string `json:"error"`
		}
		b := e.Body(tt.requestID)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("Body(%q) = %s: %v", tt.requestID, b, err)
		}
		if got.Error["message"] != e.Message || got.Error["code"] != "missing_model" {
			t.Errorf("Body(%q) = %s", tt.requestID, b)
		}
		if _, ok := got.Error["request_id"]; ok != tt.wantKey || got.Error["request_id"] != tt.requestID {
			t.Errorf("Body(%q) request_id = %q present=%v", tt.requestID, got.Error["request_id"], ok)
		}
	}
}
