// Package fakeupstream fakes the provider APIs the gateway speaks, for tests and benchmarks:
// OpenAI chat completions and embeddings (and OpenAI-compatible servers), Anthropic Messages,
// Gemini generateContent (chat and image models) and batchEmbedContents (embeddings.go), and
// the media task APIs of MiniMax (video), DashScope (video and image) and Kling (video and
// image), with their unhappy paths. It answers
// /v1/chat/completions deterministically (streamed or not, with tool calls), rejects bad keys
// and bad bodies the way OpenAI does, records every request, and can be scripted to fail the
// next requests. Its OpenAI requests and answers go through demo/wire.go, the wire format the
// gateway's offline demo model speaks too.
//
// It listens on 127.0.0.1 and speaks HTTP/1.1 and cleartext HTTP/2 (h2c with
// prior knowledge). It uses only the standard library (and package demo), does no per-request
// logging, and can take benchmark load.
package fakeupstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Name appears in reply texts: "Hello from <Name>/<model>: ...". Default "fake".
	Name string
	// APIKey, if set, is required as "Authorization: Bearer <APIKey>"; otherwise 401.
	APIKey string
	// ChunkDelay is the pause between streamed chunks.
	ChunkDelay time.Duration
	// Models lists the ids served by GET /v1/models. Default: a few OpenAI names.
	Models []string
	// NoRecord turns off request recording, for long benchmark runs.
	NoRecord bool
	// Hold, when set, pauses every OpenAI stream after its first event until it receives from
	// Hold (one send releases one stream, a close releases all): streams that stay open as long
	// as a test needs, however many there are.
	Hold <-chan struct{}
	// HoldAfter is how many events a held stream sends before it pauses (default 1): a stream
	// held mid-answer has passed that many chunks through the gateway.
	HoldAfter int
	// MediaURLTTL is how long a media task's download URL works (default 1 h).
	MediaURLTTL time.Duration
	// KlingAccessKey and KlingSecretKey are the key pair the Kling API checks JWTs against.
	KlingAccessKey, KlingSecretKey string
}

// Recorded is one request as the server received it.
type Recorded struct {
	Method string
	Path   string
	Query  string // the raw query string (a task query's task id)
	Header http.Header
	Body   []byte
}

// Fault scripts the reply to one upcoming chat completion request.
type Fault struct {
	// Delay waits before replying (or failing); useful for timeout tests.
	Delay time.Duration
	// Status > 0 replies with that status and an OpenAI-shaped error body.
	Status int
	// Message is the error message for Status; empty picks one that fits the status.
	Message string
	// Body, if set, is sent verbatim instead of the OpenAI-shaped error.
	Body string
	// Header holds extra reply headers, e.g. Retry-After.
	Header http.Header
	// Cut drops the connection mid-reply: a stream after CutAfter chunks
	// (without [DONE]), a non-streamed reply halfway through its body.
	Cut      bool
	CutAfter int
	// Stall, on a whole answer (embeddings), sends its headers and half its body, then waits
	// for the client to go away (at most 10 s) before the rest: a big answer on a slow link.
	Stall bool
	// CutHeaders, on a whole answer (embeddings, a plain chat completion), sends its headers
	// alone, flushed, waits CutPause and drops the connection before any of its body: 0 is
	// the provider dropping it right behind its headers.
	CutHeaders bool
	CutPause   time.Duration
	// ReportPrompt and ReportCompletion, when > 0, are the token counts the answer's usage
	// reports instead of the true ones: a provider over-reporting (a chat completion).
	ReportPrompt, ReportCompletion int
	// Reasoning makes the answer a reasoning model's: this text, in word pieces, streamed (one
	// chunk a piece) before the answer under ReasoningField, "reasoning_content" (DeepSeek,
	// vLLM; the default) or "reasoning" (OpenRouter, Ollama), and billed in the usage as
	// completion tokens (completion_tokens_details.reasoning_tokens), a token a piece. A cut
	// (CutAfter) counts its chunks too.
	Reasoning, ReasoningField string
	// Reset drops the connection before any reply (after Delay): what a crashing provider or
	// a proxy in between does.
	Reset bool
	// Replay, on the Anthropic, Gemini and OpenAI chat routes, answers with these bytes verbatim
	// (a recorded answer, or an odd one), with Status (0: 200) and ContentType. An event stream goes out one event at a
	// time, flushed, with the server's ChunkDelay between events, line ends as recorded.
	Replay      []byte
	ContentType string
}

// Replay makes the next Anthropic, Gemini or OpenAI chat request get a recorded answer verbatim.
func (s *Server) Replay(status int, contentType string, body []byte) {
	s.Script(Fault{Status: status, ContentType: contentType, Replay: body})
}

// Server is a running fake provider.
type Server struct {
	opts Options
	ln   net.Listener
	srv  *http.Server
	url  string
	wg   sync.WaitGroup // in-flight handlers, so Close waits for them

	seq atomic.Uint64          // ids for completions, tool calls and request ids
	key atomic.Pointer[string] // SetAPIKey's key, replacing Options.APIKey
	mm  minimaxState           // MiniMax video tasks
	ds  dashscopeState         // DashScope video tasks
	kl  klingState             // Kling video tasks

	mu       sync.Mutex
	closed   bool
	requests []Recorded
	faults   []Fault
	count    int
}

// New starts a server on 127.0.0.1 with a free port.
func New(opts Options) (*Server, error) {
	if opts.Name == "" {
		opts.Name = "fake"
	}
	if len(opts.Models) == 0 {
		opts.Models = []string{"gpt-4o-mini", "gpt-4o", "gpt-4.1-mini"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakeupstream: listen: %w", err)
	}
	s := &Server{opts: opts, ln: ln, url: "http://" + ln.Addr().String() + "/v1"}
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		Protocols:         protos,
		ErrorLog:          discardLogger, // aborted streams are intentional, not news
	}
	go s.srv.Serve(ln)
	return s, nil
}

// Start is New for tests: it fails tb on error and closes the server at cleanup.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// SetAPIKey changes the key the server accepts from now on, as a provider does when a key is
// revoked or rotated ("" accepts any).
func (s *Server) SetAPIKey(key string) { s.key.Store(&key) }

// apiKey is the key the server accepts now ("" : any).
func (s *Server) apiKey() string {
	if k := s.key.Load(); k != nil {
		return *k
	}
	return s.opts.APIKey
}

// URL is the OpenAI base URL a provider config uses: http://127.0.0.1:PORT/v1.
func (s *Server) URL() string { return s.url }

// Addr is the listen address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, drops open connections and waits for handlers to
// return. Later calls do nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return nil
	}
	err := s.srv.Close()
	s.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Requests returns a copy of the requests received so far, oldest first.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.requests...)
}

// RequestCount is the number of requests received, recorded or not.
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Reset forgets recorded requests and pending faults.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests, s.faults, s.count = nil, nil, 0
}

// Script queues faults; each applies to one later chat completion request, in order.
func (s *Server) Script(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// FailNext makes the next chat completion request fail with status and an
// OpenAI-shaped error carrying message (empty: a default for the status).
func (s *Server) FailNext(status int, message string) {
	s.Script(Fault{Status: status, Message: message})
}

// OpenHeld starts n calls of open, each a stream the fake will hold, at most 64 at a time
// until each calls its opened (the gateway under test admits each within its message timeout),
// and returns their results, which arrive as the streams end. It reports false when not all
// opened before ctx ended.
func OpenHeld[T any](ctx context.Context, n int, open func(opened func()) T) (<-chan T, bool) {
	results := make(chan T, n)
	gate := make(chan struct{}, 64)
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		go func() {
			select {
			case gate <- struct{}{}:
			case <-ctx.Done():
				return // never started: the caller gave up on them
			}
			results <- open(func() { <-gate; wg.Done() })
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
		return results, true
	case <-ctx.Done():
		return results, false
	}
}

// Release lets n held streams (Options.Hold) go, perTick of them every tick, until ctx ends: at
// a bounded pace, since streams that all end at once would queue their chunks behind one
// another in the gateway under test. It blocks; run it in a goroutine.
func Release(ctx context.Context, hold chan<- struct{}, n, perTick int, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for i := range n {
		if i%perTick == 0 {
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		select {
		case hold <- struct{}{}:
		case <-ctx.Done():
			return
		}
	}
}

// CutStreamAfter makes the next chat completion reply stop after n chunks
// with the connection dropped and no [DONE].
func (s *Server) CutStreamAfter(n int) { s.Script(Fault{Cut: true, CutAfter: n}) }

// PendingFaults is the number of scripted faults not yet used.
func (s *Server) PendingFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults)
}

// enter registers a handler with Close's wait group unless the server is closing.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// peekFault is the next scripted fault, left queued.
func (s *Server) peekFault() (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults) == 0 {
		return Fault{}, false
	}
	return s.faults[0], true
}

func (s *Server) nextFault() (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults) == 0 {
		return Fault{}, false
	}
	f := s.faults[0]
	s.faults = s.faults[1:]
	return f, true
}

func (s *Server) record(r *http.Request, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if !s.opts.NoRecord {
		s.requests = append(s.requests, Recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	}
}

func (s *Server) nextID() string { return strconv.FormatUint(s.seq.Add(1), 10) }

// sleep waits d or until ctx ends; it reports whether the full wait happened.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
