package fakeupstream

import (
	"cmp"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/tollway/tollway/cmd/tollway/demo"
	"github.com/tollway/tollway/extproc/apischema/openai"
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
			demo.WriteError(w, http.StatusRequestEntityTooLarge, "Request body too large or unreadable.", "", "")
			return
		}
		w.Header().Set("X-Request-Id", "req_fake"+s.nextID())
		if s.anthropicRoute(w, r, body) || s.geminiRoute(w, r, body) || s.minimaxRoute(w, r, body) ||
			s.dashscopeImageRoute(w, r, body) || // before the video route: it claims its own task ids
			s.klingImageRoute(w, r, body) ||
			s.dashscopeRoute(w, r, body) || s.klingRoute(w, r, body) {
			return // native APIs check their own credentials
		}
		if s.apiKey() != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || got != s.apiKey() {
				msg := "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
				if ok {
					msg = "Incorrect API key provided: " + redact(got) + "."
				}
				demo.WriteError(w, http.StatusUnauthorized, msg, "", "invalid_api_key")
				return
			}
		}
		path := r.URL.Path
		switch {
		case path == "/v1/chat/completions" && r.Method == http.MethodPost:
			s.chatCompletions(w, r, body)
		case path == "/v1/embeddings" && r.Method == http.MethodPost:
			s.openAIEmbeddings(w, r, body)
		case path == "/v1/models" && r.Method == http.MethodGet:
			s.listModels(w)
		case strings.HasPrefix(path, "/v1/models/") && r.Method == http.MethodGet:
			s.getModel(w, strings.TrimPrefix(path, "/v1/models/"))
		default:
			demo.WriteError(w, http.StatusNotFound, "Invalid URL ("+r.Method+" "+path+")", "", "")
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
	demo.WriteError(w, http.StatusNotFound, "The model '"+id+"' does not exist", "model", "model_not_found")
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// replyText is the deterministic answer to a text turn.
func (s *Server) replyText(req *demo.ChatRequest) string {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "tool" {
		return "Tool said: " + demo.Text(last.Content)
	}
	var prompt string
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			prompt = demo.Text(req.Messages[i].Content)
			break
		}
	}
	return "Hello from " + s.opts.Name + "/" + req.Model + ": " + prompt
}

// The arguments of every tool call, and the pieces they are streamed in.
const toolArgs = `{"city":"Paris"}`

var toolArgPieces = []string{`{"`, `city`, `":"`, `Paris`, `"}`}

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
		if fault.Replay != nil {
			s.replay(w, r, fault) // a provider's odd answer, verbatim
			return
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
			demo.WriteError(w, fault.Status, msg, "", code)
			return
		}
	}
	req, perr := demo.ParseChat(body)
	if perr != nil {
		perr.Write(w)
		return
	}
	a := demo.Answer{ID: "chatcmpl-fake" + s.nextID(), Model: req.Model, Created: time.Now().Unix(), Fingerprint: "fp_fake", Finish: "stop"}
	if toolName, _ := req.ToolToCall(); toolName != "" {
		a.ToolName, a.ToolID, a.Pieces, a.Finish = toolName, "call_"+s.nextID(), toolArgPieces, "tool_calls"
	} else {
		a.Pieces = demo.Pieces(s.replyText(req))
		if max := req.OutputCap(); max > 0 && len(a.Pieces) > max {
			a.Pieces, a.Finish = a.Pieces[:max], "length"
		}
	}
	if faulted && fault.Reasoning != "" {
		a.Reasoning, a.ReasoningField = demo.Pieces(fault.Reasoning), fault.ReasoningField
	}
	a.Usage = openai.Usage{PromptTokens: int64(req.PromptTokens()), CompletionTokens: int64(len(a.Reasoning) + len(a.Pieces))}
	if len(a.Reasoning) > 0 {
		a.Usage.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: int64(len(a.Reasoning))}
	}
	if faulted {
		a.Usage.PromptTokens = cmp.Or(int64(fault.ReportPrompt), a.Usage.PromptTokens)
		a.Usage.CompletionTokens = cmp.Or(int64(fault.ReportCompletion), a.Usage.CompletionTokens)
	}
	a.Usage.TotalTokens = a.Usage.PromptTokens + a.Usage.CompletionTokens
	cut := -1
	if faulted && fault.Cut {
		cut = fault.CutAfter
	}
	if !req.Stream {
		writeWhole(w, a.Completion(), cut)
		return
	}
	es := s.newEventStream(w, r, cut)
	es.hold, es.holdAfter = s.opts.Hold, s.opts.HoldAfter
	for _, ev := range a.Events(req.StreamOptions != nil && req.StreamOptions.IncludeUsage) {
		if !es.send(ev) {
			return
		}
	}
}
