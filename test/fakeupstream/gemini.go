package fakeupstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tollway/tollway/cmd/tollway/demo"
)

// The Gemini API: POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent?alt=sse, authenticated with x-goog-api-key (or ?key=). Replies follow
// the OpenAI fake's logic in Gemini's shapes.

// GeminiBlockTrigger in the last user text makes the Gemini fake block the prompt: HTTP 200
// with no candidates and promptFeedback.blockReason SAFETY, as Gemini answers unsafe prompts.
const GeminiBlockTrigger = "#block-me"

// GeminiURL is the base URL a Gemini provider config uses: http://127.0.0.1:PORT/v1beta.
func (s *Server) GeminiURL() string { return strings.TrimSuffix(s.url, "/v1") + "/v1beta" }

// geminiRoute serves the Gemini endpoints; it reports whether the request was for them. It runs
// before the OpenAI Bearer check: Gemini clients authenticate with x-goog-api-key.
func (s *Server) geminiRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/models/")
	if !ok {
		return false
	}
	if s.apiKey() != "" {
		key := r.Header.Get("X-Goog-Api-Key")
		if key == "" {
			key = r.URL.Query().Get("key")
		}
		switch {
		case key == "":
			writeGeminiError(w, http.StatusForbidden, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
			return true
		case key != s.apiKey():
			writeGeminiError(w, http.StatusBadRequest, "API key not valid. Please pass a valid API key.")
			return true
		}
	}
	model, method, _ := strings.Cut(rest, ":")
	if method == "batchEmbedContents" && r.Method == http.MethodPost {
		s.geminiEmbed(w, r, body, model) // embeddings.go
		return true
	}
	if s.geminiImageRoute(w, r, body, model, method) { // image models: gemini_image.go
		return true
	}
	switch {
	case r.Method != http.MethodPost || (method != "generateContent" && method != "streamGenerateContent"):
		writeGeminiError(w, http.StatusNotFound, "Method not found.")
	case method == "streamGenerateContent" && r.URL.Query().Get("alt") != "sse":
		// The real API then streams one JSON array; the fake only speaks SSE.
		writeGeminiError(w, http.StatusBadRequest, "fakeupstream: streamGenerateContent is only implemented with ?alt=sse")
	default:
		s.geminiGenerate(w, r, body, model, method == "streamGenerateContent")
	}
	return true
}

// writeGeminiError sends Google's error shape: {"error": {code, message, status}}.
func writeGeminiError(w http.ResponseWriter, code int, message string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": message, "status": geminiStatus(code)}})
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func geminiStatus(code int) string {
	switch code {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if code >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

func geminiFaultMessage(code int) string {
	switch code {
	case http.StatusTooManyRequests:
		return "Resource has been exhausted (e.g. check quota)."
	case http.StatusServiceUnavailable:
		return "The model is overloaded. Please try again later."
	}
	if code >= 500 {
		return "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
	}
	return http.StatusText(code)
}

type geminiRequest struct {
	Contents          []geminiContent `json:"contents"`
	SystemInstruction *geminiContent  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	ToolConfig *struct {
		FunctionCallingConfig struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
	GenerationConfig *struct {
		MaxOutputTokens int `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

type geminiPart struct {
	Text       string `json:"text,omitempty"`
	InlineData *struct {
		MimeType string `json:"mimeType"`
	} `json:"inlineData,omitempty"`
	FileData *struct {
		MimeType string `json:"mimeType"`
	} `json:"fileData,omitempty"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
}

// geminiFields are the request fields generateContent accepts (protobuf JSON takes both
// spellings); like the real API the fake refuses others.
var geminiFields = map[string]bool{
	"contents": true, "tools": true, "toolConfig": true, "tool_config": true,
	"safetySettings": true, "safety_settings": true, "systemInstruction": true,
	"system_instruction": true, "generationConfig": true, "generation_config": true,
	"cachedContent": true, "cached_content": true,
}

// parseGemini decodes and validates a body the way the real API does; on failure it has
// written the 400.
func parseGemini(w http.ResponseWriter, body []byte) (*geminiRequest, bool) {
	bad := func(msg string) (*geminiRequest, bool) {
		writeGeminiError(w, http.StatusBadRequest, msg)
		return nil, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return bad("Invalid JSON payload received. Unexpected token.")
	}
	for f := range fields {
		if !geminiFields[f] {
			return bad(fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", f))
		}
	}
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return bad("Invalid JSON payload received. " + err.Error())
	}
	if len(req.Contents) == 0 {
		return bad("* GenerateContentRequest.contents: contents is not specified")
	}
	for i, c := range req.Contents {
		if c.Role != "user" && c.Role != "model" {
			return bad("Please use a valid role: user, model.")
		}
		if len(c.Parts) == 0 {
			return bad(fmt.Sprintf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.", i))
		}
		// Responses must answer the function-call turn just before, all of its calls at once.
		if responses := c.count(func(p geminiPart) bool { return p.FunctionResponse != nil }); responses > 0 {
			if i == 0 || req.Contents[i-1].count(func(p geminiPart) bool { return p.FunctionCall != nil }) == 0 {
				return bad("Please ensure that function response turn comes immediately after a function call turn.")
			}
			if calls := req.Contents[i-1].count(func(p geminiPart) bool { return p.FunctionCall != nil }); calls != responses {
				return bad("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
			}
		}
	}
	return &req, true
}

func (c geminiContent) count(match func(geminiPart) bool) int {
	n := 0
	for _, p := range c.Parts {
		if match(p) {
			n++
		}
	}
	return n
}

// text flattens parts like demo.Text does for OpenAI parts: joined with spaces.
func (c geminiContent) text() string {
	out := make([]string, 0, len(c.Parts))
	for _, p := range c.Parts {
		switch {
		case p.Text != "":
			out = append(out, p.Text)
		case p.InlineData != nil && strings.HasPrefix(p.InlineData.MimeType, "image/"), p.FileData != nil:
			out = append(out, "[image]")
		case p.InlineData != nil:
			out = append(out, "[file]")
		case p.FunctionResponse != nil:
			out = append(out, functionResponseText(p.FunctionResponse.Response))
		}
	}
	return strings.Join(out, " ")
}

// functionResponseText is a response's "content" string, or the response as JSON.
func functionResponseText(resp json.RawMessage) string {
	var r struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(resp, &r) == nil && r.Content != nil {
		return *r.Content
	}
	var buf bytes.Buffer
	json.Compact(&buf, resp)
	return buf.String()
}

func (req *geminiRequest) lastFunctionResponse() (string, bool) {
	parts := req.Contents[len(req.Contents)-1].Parts
	for i := len(parts) - 1; i >= 0; i-- {
		if fr := parts[i].FunctionResponse; fr != nil {
			return functionResponseText(fr.Response), true
		}
	}
	return "", false
}

func (req *geminiRequest) toolToCall() string {
	if _, ok := req.lastFunctionResponse(); ok {
		return ""
	}
	var first string
	for _, t := range req.Tools {
		if len(t.FunctionDeclarations) > 0 {
			first = t.FunctionDeclarations[0].Name
			break
		}
	}
	if first == "" {
		return ""
	}
	if tc := req.ToolConfig; tc != nil {
		switch fc := tc.FunctionCallingConfig; {
		case fc.Mode == "NONE":
			return ""
		case len(fc.AllowedFunctionNames) > 0:
			return fc.AllowedFunctionNames[0]
		}
	}
	return first
}

// prompt is the text of the last user turn that has some.
func (req *geminiRequest) prompt() string {
	for i := len(req.Contents) - 1; i >= 0; i-- {
		if c := req.Contents[i]; c.Role == "user" && c.count(func(p geminiPart) bool { return p.FunctionResponse == nil }) > 0 {
			return c.text()
		}
	}
	return ""
}

func (req *geminiRequest) promptTokens() int {
	n := 0
	if req.SystemInstruction != nil {
		n += len(strings.Fields(req.SystemInstruction.text()))
	}
	for _, c := range req.Contents {
		n += len(strings.Fields(c.text()))
	}
	return n
}

type geminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

func (s *Server) geminiGenerate(w http.ResponseWriter, r *http.Request, body []byte, model string, stream bool) {
	replied, cut := s.applyFault(w, r, geminiFaultMessage, func(code int, msg string) { writeGeminiError(w, code, msg) })
	if replied {
		return
	}
	req, ok := parseGemini(w, body)
	if !ok {
		return
	}
	id := "fake" + s.nextID()
	u := geminiUsage{PromptTokenCount: req.promptTokens()}
	answer := func(parts []any, finish string, u geminiUsage) map[string]any {
		cand := map[string]any{"content": map[string]any{"parts": parts, "role": "model"}, "index": 0}
		if finish != "" {
			cand["finishReason"] = finish
		}
		return map[string]any{"candidates": []any{cand}, "usageMetadata": u, "modelVersion": model, "responseId": id}
	}

	var events []map[string]any // the stream; the last event is also the whole answer's tail
	var parts []any
	finish := "STOP"
	switch tool := req.toolToCall(); {
	case strings.Contains(req.prompt(), GeminiBlockTrigger):
		u.TotalTokenCount = u.PromptTokenCount
		events = []map[string]any{{"promptFeedback": map[string]any{"blockReason": "SAFETY"}, "usageMetadata": u, "modelVersion": model, "responseId": id}}
		if !stream {
			b, _ := json.Marshal(events[0])
			writeWhole(w, append(b, '\n'), cut)
			return
		}
	case tool != "":
		u.CandidatesTokenCount = len(toolArgPieces)
		u.TotalTokenCount = u.PromptTokenCount + u.CandidatesTokenCount
		parts = []any{map[string]any{"functionCall": map[string]any{"name": tool, "args": json.RawMessage(toolArgs)}}}
		events = []map[string]any{answer(parts, finish, u)}
	default:
		text := "Hello from " + s.opts.Name + "/" + model + ": " + req.prompt()
		if out, ok := req.lastFunctionResponse(); ok {
			text = "Tool said: " + out
		}
		toks := demo.Pieces(text)
		if gc := req.GenerationConfig; gc != nil && gc.MaxOutputTokens > 0 && len(toks) > gc.MaxOutputTokens {
			toks, finish = toks[:gc.MaxOutputTokens], "MAX_TOKENS"
		}
		u.CandidatesTokenCount = len(toks)
		u.TotalTokenCount = u.PromptTokenCount + u.CandidatesTokenCount
		parts = []any{map[string]any{"text": strings.Join(toks, "")}}
		// Streamed, each piece is an event with the prompt count only; the last adds the
		// finish reason and the totals, as Gemini does.
		partial := geminiUsage{PromptTokenCount: u.PromptTokenCount, TotalTokenCount: u.PromptTokenCount}
		for i, t := range toks {
			if i == len(toks)-1 {
				events = append(events, answer([]any{map[string]any{"text": t}}, finish, u))
			} else {
				events = append(events, answer([]any{map[string]any{"text": t}}, "", partial))
			}
		}
		if len(toks) == 0 {
			events = append(events, answer([]any{map[string]any{"text": ""}}, finish, u))
		}
	}
	if !stream {
		b, _ := json.Marshal(answer(parts, finish, u))
		writeWhole(w, append(b, '\n'), cut)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream") // no charset: Gemini's recorded streams have none
	es := s.newEventStream(w, r, cut)
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		// Gemini frames its events with CRLF.
		if !es.send(append(append([]byte("data: "), b...), "\r\n\r\n"...)) {
			return
		}
	}
}
