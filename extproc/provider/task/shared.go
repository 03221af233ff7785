package task

// What the task adapters share: the refusal of fields a family does not take, field readers of
// a task body, and the pieces of an upstream request and of a refusal.

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/tollway/tollway/extproc/provider"
)

// onlyFields refuses fields outside known (plus the gateway's own), listing what the family
// takes: a misspelt field must not be silently dropped.
func onlyFields(family string, req provider.Request, known []string) error {
	return provider.OnlyMembers(family, req, known, provider.ItsFields, taskGatewayFields...)
}

// taskGatewayFields are the gateway's own fields of a task request: never sent to a provider.
var taskGatewayFields = []string{"model", "route", "route_mode", "callback_url"}

func stringOf(req provider.Request, key string) (string, bool, error) {
	return provider.ReadString(key, provider.Field(req, key))
}

func intOf(req provider.Request, key string) (int64, bool, error) {
	return provider.ReadInt(key, provider.Field(req, key))
}

// clip shortens a client's value quoted in a refusal.
func clip(s string) string { return provider.Clip(s, provider.Shown) }

// bearer is the headers of a provider that takes its key as a bearer token.
func bearer(key string) map[string]string {
	return map[string]string{"authorization": "Bearer " + key, "content-type": "application/json"}
}

// mustJSON is s as a JSON string.
func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// httpCode is the task error code of a provider's HTTP error status.
func httpCode(status int) string {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "provider_auth_failed"
	case status == http.StatusTooManyRequests:
		return "provider_rate_limited"
	case status == http.StatusBadRequest:
		return "invalid_request"
	}
	return "upstream_error"
}

// joinOr lists vs as "a, b or c".
func joinOr(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	out := vs[0]
	for _, v := range vs[1 : len(vs)-1] {
		out += ", " + v
	}
	return out + " or " + vs[len(vs)-1]
}
