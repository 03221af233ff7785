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
)

// ChatRequest holds the fields of a chat completion request an answering server acts on.
// Unknown fields are accepted (OpenAI refuses them) so gateway extensions never break a server.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	Tools               []Tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
}

// StreamOptions is stream_options; IncludeUsage asks for a final usage chunk.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one entry of messages. Content stays raw: a string, an array of parts, or null.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// Tool is one entry of tools.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"` // a JSON schema
	} `json:"function"`
}

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
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
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
	var forced Tool
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

// Usage is OpenAI's usage object.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Answer is one chat completion answer, rendered whole (Completion) or streamed (Events).
type Answer struct {
	ID, Model   string
	Created     int64
	Fingerprint string   // system_fingerprint
	Pieces      []string // content pieces, or the tool call's argument pieces
	Finish      string   // finish_reason
	Usage       Usage
	ToolName    string // set for a tool-call answer
	ToolID      string
}

type completion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	Choices           []choice `json:"choices"`
	Usage             Usage    `json:"usage"`
	ServiceTier       string   `json:"service_tier"`
	SystemFingerprint string   `json:"system_fingerprint"`
}

type choice struct {
	Index        int       `json:"index"`
	Message      outMsg    `json:"message"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

type outMsg struct {
	Role        string     `json:"role"`
	Content     *string    `json:"content"`
	Refusal     *string    `json:"refusal"`
	ToolCalls   []toolCall `json:"tool_calls,omitempty"`
	Annotations []struct{} `json:"annotations"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Completion is the answer as a chat.completion object, newline-terminated.
func (a *Answer) Completion() []byte {
	msg := outMsg{Role: "assistant", Annotations: []struct{}{}}
	text := strings.Join(a.Pieces, "")
	if a.ToolName != "" {
		tc := toolCall{ID: a.ToolID, Type: "function"}
		tc.Function.Name, tc.Function.Arguments = a.ToolName, text
		msg.ToolCalls = []toolCall{tc}
	} else {
		msg.Content = &text
	}
	b, _ := json.Marshal(completion{
		ID: a.ID, Object: "chat.completion", Created: a.Created, Model: a.Model,
		Choices:     []choice{{Message: msg, FinishReason: a.Finish}},
		Usage:       a.Usage,
		ServiceTier: "default", SystemFingerprint: a.Fingerprint,
	})
	return append(b, '\n')
}

// Events is the answer as server-sent chat.completion.chunk events, OpenAI's way: a role chunk
// (carrying the tool call's id and name), one chunk per piece, an empty-delta chunk with
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

func appendQuoted(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
