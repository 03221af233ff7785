package extproc

// What ext_proc tells an Observer (metrics) about the requests it sees. The server only
// measures and reports; the observer decides what to keep. With no observer nothing is timed.

import (
	"net/http"
	"strings"
	"time"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// Stream phases: the router-level filter sees a request once; the upstream filter sees each
// attempt Envoy makes.
const (
	PhaseRouter  = "router"
	PhaseAttempt = "attempt"
	// PhaseAnswer: a split gateway's answer filters see each answer once (answers.go).
	PhaseAnswer = "answer"
)

// Endpoints a request is counted under: a bounded set, whatever path the client sent.
const (
	EndpointChat       = "chat"
	EndpointModels     = "models"
	EndpointVideos     = "videos"
	EndpointImages     = "images"
	EndpointPaid       = "x402"
	EndpointKey        = "key"
	EndpointEmbeddings = "embeddings"
	EndpointOther      = "other"
)

// Observer hears of every ext_proc stream and of every request's outcome. Its methods are
// called on the request path and must be quick and safe for concurrent use.
type Observer interface {
	// StreamStarted and StreamEnded bracket one ext_proc stream; busy is the time ext_proc
	// spent handling its messages (not waiting for Envoy, the client or the provider).
	StreamStarted(phase string)
	StreamEnded(phase string, busy time.Duration)
	// RequestDone reports a request the router-level filter saw, once, when its stream ends.
	RequestDone(o *Outcome)
}

// Outcome is one request as ext_proc saw it (core.Outcome).
type Outcome = core.Outcome

// SetObserver makes o hear of every stream and request from now on; call it before serving.
func (s *Server) SetObserver(o Observer) { s.obs, s.sh.Observed = o, o != nil }

// endpointLabel names the endpoint a path is counted under.
func endpointLabel(path string) string {
	switch {
	case path == core.ChatPath:
		return EndpointChat
	case path == core.EmbeddingsPath:
		return EndpointEmbeddings
	case path == core.ModelsPath || strings.HasPrefix(path, core.ModelsPath+"/"):
		return EndpointModels
	case strings.HasPrefix(path, core.PayPrefix):
		return EndpointPaid
	case path == core.KeyPath:
		return EndpointKey
	}
	switch core.MediaKind(path) {
	case ir.KindVideo:
		return EndpointVideos
	case ir.KindImage:
		return EndpointImages
	}
	return EndpointOther
}

// outcome is what the exchange reports when its stream ends.
func (x *exchange) outcome() *Outcome {
	o := &x.Out
	o.End = time.Now()
	o.Model, o.Route, o.Stream = x.Model, x.Route, x.Stream // a chat's plan
	o.Provider = x.Provider
	if o.Status == 0 && x.Responded {
		o.Status = x.Status
	}
	o.Fallback = o.Attempts > 1 && x.Provider != "" && o.Status < http.StatusBadRequest
	return o
}
