package fakeupstream

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollway/tollway/cmd/tollway/demo"
)

// The Anthropic Messages API: POST /v1/messages, authenticated with x-api-key and versioned
// with anthropic-version. Replies follow the OpenAI fake's logic (same texts, same tool call,
// same token counts), in Anthropic's shapes, streamed with Anthropic's event sequence.

// AnthropicURL is the base URL an Anthropic provider config uses: http://127.0.0.1:PORT/v1.
func (s *Server) AnthropicURL() string { return s.url }

// anthropicRoute serves POST /v1/messages; it reports whether the request was for it. It runs
// before the OpenAI Bearer check: Anthropic clients authenticate with x-api-key.
func (s *Server) anthropicRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if r.URL.Path != "/v1/messages" {
		return false
	}
	if r.Method != http.MethodPost {
		writeAnthropicError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return true
	}
	if s.apiKey() != "" {
		switch key := r.Header.Get("X-Api-Key"); {
		case key == "":
			writeAnthropicError(w, http.StatusUnauthorized, "x-api-key header is required")
			return true
		case key != s.apiKey():
			writeAnthropicError(w, http.StatusUnauthorized, "invalid x-api-key")
			return true
		}
	}
	// A missing version is a bad request upstream, not an authentication failure.
	if r.Header.Get("Anthropic-Version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "anthropic-version: header is required")
		return true
	}
	s.anthropicMessages(w, r, body)
	return true
}

// writeAnthropicError sends Anthropic's error shape, with the type that fits the status.
func writeAnthropicError(w http.ResponseWriter, status int, message string) {
	b, _ := json.Marshal(map[string]any{
		"type":  "error",
		"error": map[string]string{"type": anthropicErrorType(status), "message": message},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func anthropicFaultMessage(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "Number of request tokens has exceeded your per-minute rate limit."
	case 529, http.StatusServiceUnavailable:
		return "Overloaded"
	case http.StatusUnauthorized:
		return "invalid x-api-key"
	}
	if status >= 500 {
		return "Internal server error"
	}
	return http.StatusText(status)
}

// applyFault runs the next scripted fault for a native route: the delay, extra headers, and an
// error reply in the provider's shape (writeErr with the status and message to send). It
// reports whether the reply is already written and where to cut the answer (-1: no cut).
func (s *Server) applyFault(w http.ResponseWriter, r *http.Request, defaultMessage func(int) string, writeErr func(int, string)) (replied bool, cut int) {
	fault, ok := s.nextFault()
	if !ok {
		return false, -1
	}
	if !sleep(r.Context(), fault.Delay) {
		return true, -1
	}
	for k, v := range fault.Header {
		w.Header()[k] = v
	}
	if fault.Replay != nil {
		s.replay(w, r, fault)
		return true, -1
	}
	if fault.Status > 0 {
		if fault.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(fault.Status)
			io.WriteString(w, fault.Body)
		} else {
			writeErr(fault.Status, cmp.Or(fault.Message, defaultMessage(fault.Status)))
		}
		return true, -1
	}
	if fault.CutHeaders {
		cutAtHeaders(w, r, fault.CutPause)
		return true, -1
	}
	if fault.Cut {
		return false, fault.CutAfter
	}
	return false, -1
}

// cutAtHeaders sends a 200's headers, flushed, and drops the connection after pause.
func cutAtHeaders(w http.ResponseWriter, r *http.Request, pause time.Duration) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "4096")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).Flush()
	sleep(r.Context(), pause)
	abort(w)
}

type anthropicRequest struct {
	Model      string             `json:"model"`
	MaxTokens  *int               `json:"max_tokens"`
	System     json.RawMessage    `json:"system"`
	Messages   []anthropicMessage `json:"messages"`
	Tools      []anthropicTool    `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	Stream bool `json:"stream"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or blocks
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or text blocks
}

type anthropicTool struct {
	Name string `json:"name"`
}

// anthropicFields are the top-level fields Messages accepts; like the real API the fake
// refuses others, so an adapter that leaks an OpenAI field fails here.
var anthropicFields = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "system": true, "metadata": true,
	"stop_sequences": true, "stream": true, "temperature": true, "top_p": true, "top_k": true,
	"tools": true, "tool_choice": true, "thinking": true, "service_tier": true, "output_config": true,
}

// blocks reads a content value, a string being one text block.
func anthropicBlocks(content json.RawMessage) []anthropicBlock {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}
	}
	var bs []anthropicBlock
	json.Unmarshal(content, &bs)
	return bs
}

// anthropicText flattens blocks like demo.Text does for OpenAI parts: joined with spaces.
func anthropicText(bs []anthropicBlock) string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		switch b.Type {
		case "text":
			out = append(out, b.Text)
		case "tool_result":
			out = append(out, anthropicText(anthropicBlocks(b.Content)))
		case "tool_use":
		default:
			out = append(out, "["+b.Type+"]")
		}
	}
	return strings.Join(out, " ")
}

// parseAnthropic decodes and validates a body the way the real API does; on failure it has
// written the 400.
func parseAnthropic(w http.ResponseWriter, body []byte) (*anthropicRequest, bool) {
	bad := func(msg string) (*anthropicRequest, bool) {
		writeAnthropicError(w, http.StatusBadRequest, msg)
		return nil, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return bad("There was an error parsing the body of your request.")
	}
	for f := range fields {
		if !anthropicFields[f] {
			return bad(f + ": Extra inputs are not permitted")
		}
	}
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad("invalid request body: " + err.Error())
	}
	switch {
	case req.Model == "":
		return bad("model: Field required")
	case req.MaxTokens == nil:
		return bad("max_tokens: Field required")
	case *req.MaxTokens < 1:
		return bad("max_tokens: Input should be greater than or equal to 1")
	case len(req.Messages) == 0:
		return bad("messages: at least one message is required")
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return bad(fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
		}
		for j, b := range anthropicBlocks(m.Content) {
			if b.Type == "text" && b.Text == "" && m.Content[0] == '[' {
				return bad(fmt.Sprintf("messages.%d.content.%d.text: text content blocks must be non-empty", i, j))
			}
		}
	}
	// Every tool_use must be answered in the very next message, and every tool_result must
	// answer a tool_use of the message before: what makes merging tool results necessary.
	for i, m := range req.Messages {
		var prevUses map[string]bool
		if i > 0 {
			prevUses = toolUseIDs(req.Messages[i-1])
		}
		results := map[string]bool{}
		for j, b := range anthropicBlocks(m.Content) {
			if b.Type != "tool_result" {
				continue
			}
			if !prevUses[b.ToolUseID] {
				return bad(fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID))
			}
			results[b.ToolUseID] = true
		}
		if i > 0 {
			for id := range prevUses {
				if !results[id] {
					return bad(fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, id))
				}
			}
		}
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role == "assistant" && len(toolUseIDs(last)) > 0 {
		return bad(fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after", len(req.Messages)-1))
	}
	return &req, true
}

func toolUseIDs(m anthropicMessage) map[string]bool {
	ids := map[string]bool{}
	if m.Role != "assistant" {
		return ids
	}
	for _, b := range anthropicBlocks(m.Content) {
		if b.Type == "tool_use" {
			ids[b.ID] = true
		}
	}
	return ids
}

// lastToolResult returns the text of the last tool_result in the last message, if any.
func (req *anthropicRequest) lastToolResult() (string, bool) {
	bs := anthropicBlocks(req.Messages[len(req.Messages)-1].Content)
	for i := len(bs) - 1; i >= 0; i-- {
		if bs[i].Type == "tool_result" {
			return anthropicText(anthropicBlocks(bs[i].Content)), true
		}
	}
	return "", false
}

func (req *anthropicRequest) toolToCall() string {
	if _, ok := req.lastToolResult(); ok || len(req.Tools) == 0 {
		return ""
	}
	if c := req.ToolChoice; c != nil {
		switch c.Type {
		case "none":
			return ""
		case "tool":
			return c.Name
		}
	}
	return req.Tools[0].Name
}

func (s *Server) anthropicReplyText(req *anthropicRequest) string {
	if out, ok := req.lastToolResult(); ok {
		return "Tool said: " + out
	}
	return "Hello from " + s.opts.Name + "/" + req.Model + ": " + req.lastUserText()
}

// lastUserText is the text of the last user message.
func (req *anthropicRequest) lastUserText() string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == "user" {
			return anthropicText(anthropicBlocks(m.Content))
		}
	}
	return ""
}

// promptTokens counts words, like the OpenAI fake: the system prompt and every message.
func (req *anthropicRequest) promptTokens() int {
	n := len(strings.Fields(anthropicText(anthropicBlocks(req.System))))
	for _, m := range req.Messages {
		n += len(strings.Fields(anthropicText(anthropicBlocks(m.Content))))
	}
	return n
}

type anthropicUsage struct {
	anthropicCounts
	Iterations []anthropicIteration `json:"iterations,omitempty"` // see anthropic_iterations.go
}

type anthropicCounts struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request, body []byte) {
	replied, cut := s.applyFault(w, r, anthropicFaultMessage, func(status int, msg string) { writeAnthropicError(w, status, msg) })
	if replied {
		return
	}
	req, ok := parseAnthropic(w, body)
	if !ok {
		return
	}
	rp := demo.Answer{ID: "msg_fake" + s.nextID(), Model: req.Model, Finish: "end_turn"}
	if rp.ToolName = req.toolToCall(); rp.ToolName != "" {
		rp.Pieces, rp.Finish, rp.ToolID = toolArgPieces, "tool_use", "toolu_fake"+s.nextID()
	} else {
		rp.Pieces = demo.Pieces(s.anthropicReplyText(req))
		if max := *req.MaxTokens; len(rp.Pieces) > max {
			rp.Pieces, rp.Finish = rp.Pieces[:max], "max_tokens"
		}
	}
	u := anthropicUsage{anthropicCounts: anthropicCounts{InputTokens: req.promptTokens(), OutputTokens: len(rp.Pieces)}}
	ss, ok := anthropicServerSide(req.lastUserText(), u)
	if !ok {
		ss = serverSide{start: u, final: u}
		ss.start.OutputTokens = 1 // what Anthropic reports before any output
	}
	if req.Stream {
		s.anthropicStream(w, r, &rp, ss, cut)
		return
	}
	var content []any
	for _, b := range ss.blocks {
		content = append(content, b)
	}
	if rp.ToolName != "" {
		content = append(content, map[string]any{"type": "tool_use", "id": rp.ToolID, "name": rp.ToolName, "input": json.RawMessage(toolArgs)})
	} else {
		content = append(content, map[string]any{"type": "text", "text": strings.Join(rp.Pieces, "")})
	}
	b, _ := json.Marshal(map[string]any{
		"id": rp.ID, "type": "message", "role": "assistant", "model": rp.Model, "content": content,
		"stop_reason": rp.Finish, "stop_sequence": nil, "usage": ss.final,
	})
	writeWhole(w, append(b, '\n'), cut)
}

// replay sends a recorded answer verbatim; an event stream event by event (see Fault.Replay).
func (s *Server) replay(w http.ResponseWriter, r *http.Request, f Fault) {
	w.Header().Set("Content-Type", f.ContentType)
	w.WriteHeader(cmp.Or(f.Status, http.StatusOK))
	if !strings.HasPrefix(f.ContentType, "text/event-stream") {
		w.Write(f.Replay)
		return
	}
	es := &eventStream{w: w, r: r, rc: http.NewResponseController(w), delay: s.opts.ChunkDelay, cut: -1}
	for b := f.Replay; len(b) > 0; {
		n := len(b)
		if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
			n = i + 2
		}
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 && i+4 < n {
			n = i + 4
		}
		if !es.send(b[:n]) {
			return
		}
		b = b[n:]
	}
}

// writeWhole sends a JSON answer; cut >= 0 sends only half of it, then drops the connection.
func writeWhole(w http.ResponseWriter, b []byte, cut int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if cut >= 0 {
		w.Write(b[:len(b)/2])
		abort(w)
	}
	w.Write(b)
}

// eventStream writes server-sent events one by one, flushed, with the server's ChunkDelay
// between them; cut >= 0 drops the connection after that many events.
type eventStream struct {
	w     http.ResponseWriter
	r     *http.Request
	rc    *http.ResponseController
	delay time.Duration
	cut   int
	sent  int
	hold  <-chan struct{} // Options.Hold, for OpenAI streams
	// holdAfter is Options.HoldAfter: the events sent before the hold.
	holdAfter int
}

func (s *Server) newEventStream(w http.ResponseWriter, r *http.Request, cut int) *eventStream {
	h := w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
	}
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, r: r, rc: http.NewResponseController(w), delay: s.opts.ChunkDelay, cut: cut}
}

// send writes one event; false means the client is gone.
func (es *eventStream) send(event []byte) bool {
	if es.sent == es.cut {
		abort(es.w)
	}
	if es.sent > 0 && !sleep(es.r.Context(), es.delay) {
		return false
	}
	if es.sent == max(1, es.holdAfter) && es.hold != nil {
		select {
		case <-es.hold:
		case <-es.r.Context().Done():
			return false
		}
	}
	es.sent++
	if _, err := es.w.Write(event); err != nil {
		return false
	}
	return es.rc.Flush() == nil
}

// anthropicStream sends the reply with Anthropic's event sequence: message_start,
// content_block_start, ping, one delta per piece, content_block_stop, message_delta with the
// stop reason and the final counts (input and cache counts repeated, output cumulative),
// message_stop. A tool call's input arrives as an
// empty input_json_delta followed by several pieces, as Claude sends them.
func (s *Server) anthropicStream(w http.ResponseWriter, r *http.Request, rp *demo.Answer, ss serverSide, cut int) {
	es := s.newEventStream(w, r, cut)
	var buf bytes.Buffer
	event := func(name string, data any) bool {
		buf.Reset()
		buf.WriteString("event: " + name + "\ndata: ")
		b, _ := json.Marshal(data)
		buf.Write(b)
		buf.WriteString("\n\n")
		return es.send(buf.Bytes())
	}
	if !event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": rp.ID, "type": "message", "role": "assistant", "model": rp.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": ss.start,
	}}) {
		return
	}
	if !s.anthropicLeadingBlocks(event, ss.blocks) {
		return
	}
	index := len(ss.blocks)
	block := map[string]any{"type": "text", "text": ""}
	pieces := rp.Pieces
	if rp.ToolName != "" {
		block = map[string]any{"type": "tool_use", "id": rp.ToolID, "name": rp.ToolName, "input": map[string]any{}}
		pieces = append([]string{""}, rp.Pieces...)
	}
	if !event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": block}) ||
		!event("ping", map[string]any{"type": "ping"}) {
		return
	}
	for _, p := range pieces {
		delta := map[string]any{"type": "text_delta", "text": p}
		if rp.ToolName != "" {
			delta = map[string]any{"type": "input_json_delta", "partial_json": p}
		}
		if !event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": delta}) {
			return
		}
	}
	if !event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}) ||
		!event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": rp.Finish, "stop_sequence": nil},
			"usage": ss.final}) { // the current API repeats every count here, as the recordings show
		return
	}
	event("message_stop", map[string]any{"type": "message_stop"})
}
