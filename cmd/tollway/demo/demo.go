// Package demo is the offline demo model behind provider type `demo`: a small OpenAI-compatible
// chat completions server that `tollway run` starts in-process on a free loopback port when a
// configuration names a provider of that type (configs/demo.yaml, `tollway run --demo`), so a
// first run shows a whole chat, stream, tool call loop, fallback and spend limit with no provider
// key and no model server. Envoy reaches it like any other upstream; routing, billing and limits
// apply unchanged.
//
// Its answers are canned and say so: "Tollway demo model (offline, no LLM): you said ...". It
// calls a tool when tools are offered (the forced one, else the first) with arguments built from
// the tool's JSON schema, and answers a tool result in text. Token counts are words, not a
// tokenizer's. It speaks the wire format of wire.go, which test/fakeupstream shares. Standard
// library only.
package demo

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

// Fingerprint is the system_fingerprint of every demo answer.
const Fingerprint = "fp_tollway_demo"

// maxBody bounds a request body; the gateway refuses larger ones before they get here.
const maxBody = 40 << 20

// Options configures a Server. The zero value is usable.
type Options struct {
	// ChunkDelay is the pause between streamed chunks, so a stream visibly streams.
	ChunkDelay time.Duration
}

// Server is a running demo model server.
type Server struct {
	opts Options
	ln   net.Listener
	srv  *http.Server
	seq  atomic.Uint64 // ids of answers and tool calls
}

// Start serves on 127.0.0.1 with a free port.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo model server: listen: %w", err)
	}
	s := &Server{opts: opts, ln: ln}
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // clients that leave mid-stream are not news
	}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr is the listen address, 127.0.0.1:PORT; the base URL is http://Addr/v1.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and drops open connections.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// readPost reads a POST's body (at most maxBody), or answers the method's 405 or the body's
// 413 and reports false.
func readPost(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		WriteError(w, http.StatusMethodNotAllowed, "Method "+r.Method+" not allowed; use POST "+r.URL.Path+".", "", "method_not_allowed")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		WriteError(w, http.StatusRequestEntityTooLarge, "Request body too large or unreadable.", "", "request_too_large")
		return nil, false
	}
	return body, true
}

// Handler answers POST /v1/chat/completions and POST /v1/embeddings; other paths are OpenAI-shaped 404s and 405s.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readPost(w, r)
		if !ok {
			return
		}
		req, perr := ParseChat(body)
		if perr != nil {
			perr.Write(w)
			return
		}
		s.answer(w, r, req)
	})
	mux.HandleFunc("/v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readPost(w, r)
		if !ok {
			return
		}
		req, perr := ParseEmbeddings(body)
		if perr != nil {
			perr.Write(w)
			return
		}
		b := req.EmbeddingsAnswer(0, EmbeddingsLabel)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "Invalid URL ("+r.Method+" "+r.URL.Path+"); the demo model serves POST /v1/chat/completions and POST /v1/embeddings.", "", "not_found")
	})
	return mux
}

func (s *Server) nextID() string { return strconv.FormatUint(s.seq.Add(1), 10) }

// answer builds the canned answer to req and writes it whole or streamed.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, req *ChatRequest) {
	a := Answer{ID: "chatcmpl-demo" + s.nextID(), Model: req.Model, Created: time.Now().Unix(), Fingerprint: Fingerprint, Finish: "stop"}
	if name, params := req.ToolToCall(); name != "" {
		a.ToolName, a.ToolID, a.Finish = name, "call_demo"+s.nextID(), "tool_calls"
		a.Pieces = argumentPieces(toolArguments(params, req))
	} else {
		a.Pieces = Pieces(replyText(req))
		if n := req.OutputCap(); n > 0 && len(a.Pieces) > n {
			a.Pieces, a.Finish = a.Pieces[:n], "length"
		}
	}
	a.Usage = openai.Usage{PromptTokens: int64(req.PromptTokens()), CompletionTokens: int64(len(a.Pieces))}
	a.Usage.TotalTokens = a.Usage.PromptTokens + a.Usage.CompletionTokens
	if !req.Stream {
		b := a.Completion()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, ev := range a.Events(req.StreamOptions != nil && req.StreamOptions.IncludeUsage) {
		if i > 0 && s.opts.ChunkDelay > 0 {
			timer.Reset(s.opts.ChunkDelay)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		if _, err := w.Write(ev); err != nil || rc.Flush() != nil {
			return
		}
	}
}
