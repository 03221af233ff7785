package demo

// This file is the OpenAI chat-completions wire format as an answering server speaks it:
// decoding and checking a request, OpenAI's error shape, and rendering an answer whole or as
// server-sent events. The demo server and test/fakeupstream both answer through it, so the two
// cannot drift apart on the wire.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

// ChatRequest is a chat completion request (its shape is apischema/openai's), with what an
// answering server reads of it.
type ChatRequest struct{ openai.ChatRequest }

// Error is an OpenAI-shaped error answer: {"error":{"message","type","param","code"}}.
type Error struct {
	Status               int
	Message, Param, Code string // empty Param and Code are JSON null
}

// Write sends the error.
func (e *Error) Write(w http.ResponseWriter) { WriteError(w, e.Status, e.Message, e.Param, e.Code) }

// WriteError sends OpenAI's error shape. Empty param and code are JSON null.
func WriteError(w http.ResponseWriter, status int, message, param, code string) {
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	e := apiError{Message: message, Type: errorType(status)}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	b, _ := json.Marshal(map[string]apiError{"error": e})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// ParseChat decodes and checks a request body, with OpenAI's messages for what it refuses.
func ParseChat(body []byte) (*ChatRequest, *Error) {
	var req ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return nil, &Error{http.StatusBadRequest, "Invalid type for '" + te.Field + "': expected " + te.Type.String() + ", but got " + te.Value + " instead.", te.Field, "invalid_type"}
		}
		return nil, &Error{Status: http.StatusBadRequest, Message: "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"}
	}
	switch {
	case req.Model == "":
		return nil, &Error{Status: http.StatusBadRequest, Message: "you must provide a model parameter"}
	case req.Messages == nil:
		return nil, &Error{http.StatusBadRequest, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"}
	case len(req.Messages) == 0:
		return nil, &Error{http.StatusBadRequest, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array"}
	}
	return &req, nil
}

// Text flattens message content: a string, or its parts joined with spaces (non-text parts as
// [image], [<type>]).
func Text(content json.RawMessage) string {
	if len(content) == 0 || content[0] != '[' {
		var s string
		json.Unmarshal(content, &s) // null or non-string: empty
		return s
	}
	var parts []openai.Part
	json.Unmarshal(content, &parts)
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, p.Text)
		case "image_url":
			out = append(out, "[image]")
		default:
			out = append(out, "["+p.Type+"]")
		}
	}
	return strings.Join(out, " ")
}

// ToolToCall returns the function the answer should call: the forced one, else the first
// tool; "" for a text answer (no tools, tool_choice "none", or a tool result to answer). params
// is the function's JSON schema when it is among the tools.
func (r *ChatRequest) ToolToCall() (name string, params json.RawMessage) {
	if len(r.Tools) == 0 || r.Messages[len(r.Messages)-1].Role == "tool" {
		return "", nil
	}
	var choice string
	if json.Unmarshal(r.ToolChoice, &choice) == nil && choice == "none" {
		return "", nil
	}
	name = r.Tools[0].Function.Name
	var forced openai.NamedToolChoice
	if json.Unmarshal(r.ToolChoice, &forced) == nil && forced.Function.Name != "" {
		name = forced.Function.Name
	}
	for _, t := range r.Tools {
		if t.Function.Name == name {
			return name, t.Function.Parameters
		}
	}
	return name, nil
}

// OutputCap is max_completion_tokens, else max_tokens; 0 when neither is set.
func (r *ChatRequest) OutputCap() int {
	if r.MaxCompletionTokens > 0 {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// PromptTokens is a deterministic stand-in for a tokenizer: the words of every message.
func (r *ChatRequest) PromptTokens() int {
	n := 0
	for _, m := range r.Messages {
		n += len(strings.Fields(Text(m.Content)))
	}
	return n
}

// Pieces splits text into word pieces (each with its trailing space) that concatenate back to
// text exactly: the answer's tokens, one per streamed chunk.
func Pieces(s string) []string {
	parts := strings.SplitAfter(s, " ")
	if len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// Answer is one chat completion answer, rendered whole (Completion) or streamed (Events).
type Answer struct {
	ID, Model   string
	Created     int64
	Fingerprint string   // system_fingerprint
	Pieces      []string // content pieces, or the tool call's argument pieces
	Finish      string   // finish_reason
	Usage       openai.Usage
	ToolName    string // set for a tool-call answer
	ToolID      string
	// Reasoning, when set, is a reasoning model's thinking, streamed in these pieces before the
	// answer (and in the message, whole) under ReasoningField: "reasoning_content" (DeepSeek,
	// vLLM; the default) or "reasoning" (OpenRouter, which repeats it in reasoning_details).
	Reasoning      []string
	ReasoningField string
}

// reasoningField is the member the answer's reasoning goes in.
func (a *Answer) reasoningField() string {
	if a.ReasoningField == "" {
		return "reasoning_content"
	}
	return a.ReasoningField
}

// reasoningDelta is the delta of one piece of reasoning, as the server named by its field
// writes it: DeepSeek's content null beside it, OpenRouter's empty content and the piece again
// in reasoning_details.
func (a *Answer) reasoningDelta(b []byte, piece string) []byte {
	if a.reasoningField() == "reasoning" {
		b = append(b, `{"content":"","reasoning":`...)
		b = appendQuoted(b, piece)
		b = append(b, `,"reasoning_details":[{"type":"reasoning.text","text":`...)
		b = appendQuoted(b, piece)
		return append(b, `,"format":"unknown","index":0}]}`...)
	}
	b = append(b, `{"content":null,"reasoning_content":`...)
	b = appendQuoted(b, piece)
	return append(b, '}')
}

// Completion is the answer as a chat.completion object, newline-terminated.
func (a *Answer) Completion() []byte {
	msg := openai.ResponseMessage{Role: "assistant", Refusal: null, Annotations: []struct{}{}}
	text := strings.Join(a.Pieces, "")
	if a.ToolName != "" {
		msg.ToolCalls = []openai.ToolCall{{ID: a.ToolID, Type: "function", Function: openai.FunctionCall{Name: a.ToolName, Arguments: text}}}
	} else {
		msg.Content = openai.TextContent(text)
	}
	if len(a.Reasoning) > 0 {
		r := strings.Join(a.Reasoning, "")
		if a.reasoningField() == "reasoning" {
			msg.Reasoning = &r
		} else {
			msg.ReasoningContent = &r
		}
	}
	usage := a.Usage
	b, _ := json.Marshal(openai.ChatCompletion{
		Header:      openai.Header{ID: a.ID, Object: openai.ObjectCompletion, Created: a.Created, Model: a.Model},
		Choices:     []openai.Choice{{Message: msg, Logprobs: null, FinishReason: a.Finish}},
		Usage:       &usage,
		ServiceTier: "default", SystemFingerprint: a.Fingerprint,
	})
	return append(b, '\n')
}

// Events is the answer as server-sent chat.completion.chunk events, OpenAI's way: a role chunk
// (carrying the tool call's id and name), one chunk per piece of reasoning then of the answer, an empty-delta chunk with
// finish_reason, the usage chunk (choices: []) when includeUsage, then "data: [DONE]". Each
// event ends with a blank line.
func (a *Answer) Events(includeUsage bool) [][]byte {
	// Everything before the choices is the same in every chunk.
	head := []byte(`data: {"id":"` + a.ID + `","object":"chat.completion.chunk","created":` +
		strconv.FormatInt(a.Created, 10) + `,"model":`)
	head = appendQuoted(head, a.Model)
	head = append(head, `,"service_tier":"default","system_fingerprint":`...)
	head = appendQuoted(head, a.Fingerprint)
	head = append(head, `,"choices":[`...)
	usageNull := ""
	if includeUsage {
		usageNull = `,"usage":null` // as OpenAI does on every chunk but the last
	}
	events := make([][]byte, 0, len(a.Pieces)+4)
	// chunk adds one choice with the given delta JSON.
	chunk := func(delta []byte, finish string) {
		ev := append([]byte(nil), head...)
		ev = append(ev, `{"index":0,"delta":`...)
		ev = append(ev, delta...)
		ev = append(ev, `,"logprobs":null,"finish_reason":`...)
		if finish == "" {
			ev = append(ev, "null"...)
		} else {
			ev = appendQuoted(ev, finish)
		}
		events = append(events, append(ev, "}]"+usageNull+"}\n\n"...))
	}

	var delta []byte
	if a.ToolName != "" {
		delta = append(delta, `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"`+a.ToolID+`","type":"function","function":{"name":`...)
		delta = appendQuoted(delta, a.ToolName)
		delta = append(delta, `,"arguments":""}}],"refusal":null}`...)
	} else {
		delta = append(delta, `{"role":"assistant","content":"","refusal":null}`...)
	}
	chunk(delta, "")
	for _, p := range a.Reasoning {
		chunk(a.reasoningDelta(delta[:0], p), "")
	}
	for _, p := range a.Pieces {
		if a.ToolName != "" {
			delta = append(delta[:0], `{"tool_calls":[{"index":0,"function":{"arguments":`...)
			delta = appendQuoted(delta, p)
			delta = append(delta, "}}]}"...)
		} else {
			delta = append(delta[:0], `{"content":`...)
			delta = appendQuoted(delta, p)
			delta = append(delta, '}')
		}
		chunk(delta, "")
	}
	chunk([]byte("{}"), a.Finish)
	if includeUsage {
		u, _ := json.Marshal(a.Usage)
		ev := append([]byte(nil), head...)
		ev = append(ev, "],\"usage\":"...)
		ev = append(ev, u...)
		events = append(events, append(ev, "}\n\n"...))
	}
	return append(events, []byte("data: [DONE]\n\n"))
}

// null is a member OpenAI writes as null (a message's refusal, a choice's logprobs).
var null = json.RawMessage("null")

func appendQuoted(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
