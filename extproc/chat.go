package extproc

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// Fields every chat request may carry whatever the model's catalog entry says: they shape the
// conversation or the transport, not the sampling.
var structuralFields = map[string]bool{
	"model": true, "messages": true, "stream": true, "stream_options": true, "user": true,
}

// gatewayFields are Tollway's own and never reach a provider.
var gatewayFields = []string{"route", "route_mode"}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// chatPlan is the decision for one chat request: where it goes and what is sent.
type chatPlan struct {
	model    *model
	provider *ir.Provider
	upstream *provider.Upstream
	removed  []string // parameters dropped because the model does not support them

	stream      bool
	clientUsage bool  // the client asked for stream usage itself
	maxTokens   int64 // the client's output cap (max_completion_tokens or max_tokens); 0 if none
}

// planChat validates a chat request body and builds its upstream request.
func (rt *Runtime) planChat(body []byte) (*chatPlan, *APIError) {
	var req provider.Request
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		return nil, apiErr(http.StatusBadRequest, "invalid_json",
			"request body is not a JSON object (%s); send {\"model\": ..., \"messages\": [...]}", jsonProblem(err))
	}
	var modelID string
	if raw, ok := req["model"]; !ok || json.Unmarshal(raw, &modelID) != nil || modelID == "" {
		return nil, apiErr(http.StatusBadRequest, "missing_model",
			"model is required and must be a string: set it to a model id from GET /v1/models")
	}
	if e := checkMessages(req["messages"]); e != nil {
		return nil, e
	}
	var stream bool
	if raw, ok := req["stream"]; ok {
		var b *bool
		if json.Unmarshal(raw, &b) != nil {
			return nil, apiErr(http.StatusBadRequest, "invalid_request", "stream must be true or false")
		}
		stream = b != nil && *b
	}
	maxTokens, e := maxTokensOf(req)
	if e != nil {
		return nil, e
	}
	pin, e := pinnedProvider(req["route"])
	if e != nil {
		return nil, e
	}
	if strings.HasPrefix(modelID, "route:") {
		return nil, apiErr(http.StatusBadRequest, "route_not_found",
			"route %q does not exist; use a model id from GET /v1/models", modelID)
	}
	m, ok := rt.models[modelID]
	if !ok {
		return nil, apiErr(http.StatusBadRequest, "model_not_found",
			"model %q is not in the catalog; GET /v1/models lists the model ids you can use", modelID)
	}
	target, p, e := rt.choose(m, pin)
	if e != nil {
		return nil, e
	}
	for _, f := range gatewayFields {
		delete(req, f)
	}
	plan := &chatPlan{model: m, provider: p, stream: stream, maxTokens: maxTokens}
	if stream {
		// Streams are billed from the provider's final usage chunk, so always ask for it; the
		// chunk is removed again for clients that did not ask.
		var e *APIError
		if plan.clientUsage, e = requestUsage(req); e != nil {
			return nil, e
		}
	}
	if m.supported != nil {
		for f := range req {
			if !structuralFields[f] && !m.supported[f] {
				plan.removed = append(plan.removed, f)
				delete(req, f)
			}
		}
		sort.Strings(plan.removed)
		plan.maxTokens, _ = maxTokensOf(req) // a cap the provider will not see does not bound the cost
	}
	capOutput(req, plan)
	adapter, err := provider.For(p.Type)
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, "internal_error", "%v", err)
	}
	if plan.upstream, err = adapter.Chat(p, target.Model, req); err != nil {
		return nil, apiErr(http.StatusInternalServerError, "internal_error", "%v", err)
	}
	return plan, nil
}

// capOutput bounds the answer by the model's max_output_length when the client asked for more
// or set no cap, so the worst case the request was admitted for is the most it can cost.
func capOutput(req provider.Request, plan *chatPlan) {
	m := plan.model
	if m.MaxOutputLength <= 0 || (plan.maxTokens > 0 && plan.maxTokens <= m.MaxOutputLength) {
		return
	}
	field := "max_tokens"
	if _, ok := req["max_completion_tokens"]; ok {
		field = "max_completion_tokens"
	}
	if m.supported != nil && !m.supported[field] {
		return // the provider would not see it: the estimate stays the bound
	}
	req[field] = json.RawMessage(strconv.FormatInt(m.MaxOutputLength, 10))
	plan.maxTokens = m.MaxOutputLength
}

// maxTokensOf reads the client's output cap; max_completion_tokens wins over the older max_tokens.
func maxTokensOf(req provider.Request) (int64, *APIError) {
	var out int64
	for _, f := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := req[f]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 {
			return 0, apiErr(http.StatusBadRequest, "invalid_request", "%s must be a positive integer", f)
		}
		out = n
	}
	return out, nil
}

// requestUsage sets stream_options.include_usage on a streamed request and reports whether the
// client had set it. Other stream_options are kept.
func requestUsage(req provider.Request) (bool, *APIError) {
	opts := map[string]json.RawMessage{}
	if raw, ok := req["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			return false, apiErr(http.StatusBadRequest, "invalid_request", `stream_options must be an object like {"include_usage": true}`)
		}
	}
	asked := string(opts["include_usage"]) == "true"
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	req["stream_options"] = raw
	return asked, nil
}

// choose picks the first ready provider of m, or the pinned one.
func (rt *Runtime) choose(m *model, pin string) (ir.Target, *ir.Provider, *APIError) {
	var reasons []string
	for _, t := range m.Targets {
		if pin != "" && t.Provider != pin {
			continue
		}
		p := rt.providers[t.Provider]
		if p != nil && p.Ready() {
			return t, p, nil
		}
		reasons = append(reasons, "provider "+t.Provider+" has no API key configured")
	}
	if pin != "" && len(reasons) == 0 {
		names := make([]string, len(m.Targets))
		for i, t := range m.Targets {
			names[i] = t.Provider
		}
		return ir.Target{}, nil, apiErr(http.StatusBadRequest, "provider_not_available",
			"provider %q does not serve model %q (it is served by %s): remove route.provider or choose one of those",
			pin, m.ID, strings.Join(names, ", "))
	}
	return ir.Target{}, nil, apiErr(http.StatusServiceUnavailable, "model_unavailable",
		"model %q has no provider that can take traffic (%s); try another model", m.ID, strings.Join(reasons, "; "))
}

func pinnedProvider(raw json.RawMessage) (string, *APIError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var r struct {
		Provider *string `json:"provider"`
	}
	if json.Unmarshal(raw, &r) != nil || (r.Provider != nil && *r.Provider == "") {
		return "", apiErr(http.StatusBadRequest, "invalid_request",
			`route must be an object like {"provider": "<provider name>"}`)
	}
	if r.Provider == nil {
		return "", nil
	}
	return *r.Provider, nil
}

func checkMessages(raw json.RawMessage) *APIError {
	var msgs []struct {
		Role *string `json:"role"`
	}
	if len(raw) == 0 {
		return apiErr(http.StatusBadRequest, "missing_messages",
			"messages is required: send an array like [{\"role\": \"user\", \"content\": \"Hello\"}]")
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return apiErr(http.StatusBadRequest, "invalid_messages",
			"messages must be an array of objects with role and content (%s)", jsonProblem(err))
	}
	if len(msgs) == 0 {
		return apiErr(http.StatusBadRequest, "missing_messages", "messages is empty: send at least one message")
	}
	for i, m := range msgs {
		if m.Role == nil || !validRoles[*m.Role] {
			return apiErr(http.StatusBadRequest, "invalid_messages",
				"messages[%d].role must be one of system, developer, user, assistant, tool", i)
		}
	}
	return nil
}

// jsonProblem describes a decoding failure in client terms (no Go type names).
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return "it is null"
	case errors.As(err, &typeErr):
		return "found a JSON " + typeErr.Value + " where an object or array belongs"
	}
	return err.Error()
}
