package fakeupstream

import (
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"strings"
	"time"
)

var discardLogger = log.New(io.Discard, "", 0)

// maxBody is above the gateway's 32 MiB limit: the gateway admits up to exactly 32 MiB and its
// per-attempt rewrite may add a few bytes (the provider's model name, stream options).
const maxBody = 40 << 20

func (s *Server) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.enter() {
			panic(http.ErrAbortHandler) // closing: drop the connection
		}
		defer s.wg.Done()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		s.record(r, body)
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "Request body too large or unreadable.", "", "")
			return
		}
		w.Header().Set("X-Request-Id", "req_fake"+s.nextID())
		if s.anthropicRoute(w, r, body) || s.geminiRoute(w, r, body) {
			return // native APIs check their own credentials
		}
		if s.opts.APIKey != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || got != s.opts.APIKey {
				msg := "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
				if ok {
					msg = "Incorrect API key provided: " + redact(got) + "."
				}
				writeError(w, http.StatusUnauthorized, msg, "", "invalid_api_key")
				return
			}
		}
		path := r.URL.Path
		switch {
		case path == "/v1/chat/completions" && r.Method == http.MethodPost:
			s.chatCompletions(w, r, body)
		case path == "/v1/models" && r.Method == http.MethodGet:
			s.listModels(w)
		case strings.HasPrefix(path, "/v1/models/") && r.Method == http.MethodGet:
			s.getModel(w, strings.TrimPrefix(path, "/v1/models/"))
		default:
			writeError(w, http.StatusNotFound, "Invalid URL ("+r.Method+" "+path+")", "", "")
		}
	})
}

// redact shows a key the way OpenAI does: the ends only.
func redact(k string) string {
	if len(k) <= 8 {
		return "***"
	}
	return k[:3] + "***" + k[len(k)-4:]
}

// writeError sends OpenAI's error shape. Empty param and code are JSON null.
func writeError(w http.ResponseWriter, status int, message, param, code string) {
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

// faultDefaults gives a realistic message and code for a scripted failure.
func faultDefaults(status int) (message, code string) {
	switch status {
	case http.StatusTooManyRequests:
		return "Rate limit reached for requests. Please try again in 1s.", "rate_limit_exceeded"
	case http.StatusServiceUnavailable:
		return "The engine is currently overloaded, please try again later.", ""
	case http.StatusUnauthorized:
		return "Incorrect API key provided.", "invalid_api_key"
	case http.StatusNotFound:
		return "The model does not exist or you do not have access to it.", "model_not_found"
	}
	if status >= 500 {
		return "The server had an error while processing your request. Sorry about that!", ""
	}
	return http.StatusText(status), ""
}

func (s *Server) listModels(w http.ResponseWriter) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, id := range s.opts.Models {
		list.Data = append(list.Data, model{id, "model", 1700000000, s.opts.Name})
	}
	writeJSON(w, list)
}

func (s *Server) getModel(w http.ResponseWriter, id string) {
	for _, m := range s.opts.Models {
		if m == id {
			writeJSON(w, map[string]any{"id": m, "object": "model", "created": 1700000000, "owned_by": s.opts.Name})
			return
		}
	}
	writeError(w, http.StatusNotFound, "The model '"+id+"' does not exist", "model", "model_not_found")
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// chatRequest holds the fields the fake acts on. Unknown fields are accepted
// (real OpenAI rejects them) so gateway extensions never break the fake.
type chatRequest struct {
	Model         string          `json:"model"`
	Messages      []message       `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	Tools         []tool          `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	MaxTokens     int             `json:"max_tokens"`
	MaxCompletion int             `json:"max_completion_tokens"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// parseChat decodes and validates a body; on failure it has written the 400.
func parseChat(w http.ResponseWriter, body []byte) (*chatRequest, bool) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			writeError(w, http.StatusBadRequest, "Invalid type for '"+te.Field+"': expected "+te.Type.String()+", but got "+te.Value+" instead.", te.Field, "invalid_type")
		} else {
			writeError(w, http.StatusBadRequest, "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)", "", "")
		}
		return nil, false
	}
	switch {
	case req.Model == "":
		writeError(w, http.StatusBadRequest, "you must provide a model parameter", "", "")
	case req.Messages == nil:
		writeError(w, http.StatusBadRequest, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
	case len(req.Messages) == 0:
		writeError(w, http.StatusBadRequest, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
	default:
		return &req, true
	}
	return nil, false
}

// text flattens message content: a string, or parts joined with spaces.
func text(content json.RawMessage) string {
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

// toolToCall returns the tool the reply should call, or "" for a text reply.
func (req *chatRequest) toolToCall() string {
	if len(req.Tools) == 0 || req.Messages[len(req.Messages)-1].Role == "tool" {
		return ""
	}
	var choice string
	if json.Unmarshal(req.ToolChoice, &choice) == nil && choice == "none" {
		return ""
	}
	var forced tool
	if json.Unmarshal(req.ToolChoice, &forced) == nil && forced.Function.Name != "" {
		return forced.Function.Name
	}
	return req.Tools[0].Function.Name
}

// replyText is the deterministic answer to a text turn.
func (s *Server) replyText(req *chatRequest) string {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		return "Tool said: " + text(last.Content)
	}
	var prompt string
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			prompt = text(req.Messages[i].Content)
			break
		}
	}
	return "Hello from " + s.opts.Name + "/" + req.Model + ": " + prompt
}

// promptTokens is a deterministic stand-in for tokenization: words of all messages.
func (req *chatRequest) promptTokens() int {
	n := 0
	for _, m := range req.Messages {
		n += len(strings.Fields(text(m.Content)))
	}
	return n
}

// tokens splits text into word pieces that concatenate back to text exactly.
func tokens(s string) []string {
	parts := strings.SplitAfter(s, " ")
	if len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// The arguments of every tool call, and the pieces they are streamed in.
const toolArgs = `{"city":"Paris"}`

var toolArgPieces = []string{`{"`, `city`, `":"`, `Paris`, `"}`}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, body []byte) {
	fault, faulted := s.nextFault()
	if faulted {
		if !sleep(r.Context(), fault.Delay) {
			return
		}
		if fault.Reset {
			panic(http.ErrAbortHandler) // nothing written: the client sees a reset, no status
		}
		for k, v := range fault.Header {
			w.Header()[k] = v
		}
		if fault.Status > 0 {
			if fault.Body != "" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(fault.Status)
				io.WriteString(w, fault.Body)
				return
			}
			msg, code := faultDefaults(fault.Status)
			if fault.Message != "" {
				msg = fault.Message
			}
			writeError(w, fault.Status, msg, "", code)
			return
		}
	}
	req, ok := parseChat(w, body)
	if !ok {
		return
	}
	var toks []string
	toolName := req.toolToCall()
	finish := "stop"
	if toolName != "" {
		toks = toolArgPieces
		finish = "tool_calls"
	} else {
		toks = tokens(s.replyText(req))
		if max := cmp.Or(req.MaxCompletion, req.MaxTokens); max > 0 && len(toks) > max {
			toks, finish = toks[:max], "length"
		}
	}
	u := usage{PromptTokens: req.promptTokens(), CompletionTokens: len(toks)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	r2 := reply{
		id:      "chatcmpl-fake" + s.nextID(),
		created: time.Now().Unix(),
		model:   req.Model,
		toks:    toks,
		finish:  finish,
		usage:   u,
	}
	if toolName != "" {
		r2.toolName, r2.toolID = toolName, "call_"+s.nextID()
	}
	cut := -1
	if faulted && fault.Cut {
		cut = fault.CutAfter
	}
	if req.Stream {
		s.stream(w, r, &r2, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, cut)
	} else {
		r2.writeCompletion(w, cut)
	}
}
