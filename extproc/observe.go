package extproc

// What ext_proc tells an Observer (metrics) about the requests it sees. The server only
// measures and reports; the observer decides what to keep. With no observer nothing is timed.

import (
	"net/http"
	"strconv"
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
)

// Endpoints a request is counted under: a bounded set, whatever path the client sent.
const (
	EndpointChat   = "chat"
	EndpointModels = "models"
	EndpointVideos = "videos"
	EndpointImages = "images"
	EndpointPaid   = "x402"
	EndpointKey    = "key"
	EndpointOther  = "other"
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

// Outcome is one request as ext_proc saw it. Every string is bounded: catalog ids, a fixed set
// of endpoints and error codes; never a key, an account or anything the client wrote.
type Outcome struct {
	Endpoint string
	Model    string // the catalog model that answered (or was asked for); "" before one was chosen
	Provider string // the provider that answered; "" when none did
	Route    string // route:<slug>, or "" for a model asked for directly
	Stream   bool
	// Status is the HTTP status the client got (0: the stream ended before any answer, e.g.
	// the client went away); Code the error code, "" for a success.
	Status int
	Code   string
	// Attempts is how many upstream attempts Envoy made (0: none reached an upstream, or
	// Envoy did not say); Fallback is true when an attempt after the first answered.
	Attempts int
	Fallback bool

	// Start is when the request's headers reached ext_proc; Routed when ext_proc let it go
	// upstream; Answered when the answer's headers came back; FirstByte when a streamed
	// answer's first body chunk did; End when the stream closed. Zero: it did not happen.
	Start, Routed, Answered, FirstByte, End time.Time
}

// SetObserver makes o hear of every stream and request from now on; call it before serving.
func (s *Server) SetObserver(o Observer) { s.obs = o }

// endpointLabel names the endpoint a path is counted under.
func endpointLabel(path string) string {
	switch {
	case path == core.ChatPath:
		return EndpointChat
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

// gatewayCodes are the codes of errors that Envoy answers for the gateway (its local-reply
// mappers): such an answer, from no provider, keeps its code; a provider's own codes are
// unbounded and count as upstream_error.
var gatewayCodes = map[string]bool{
	"gateway_unavailable": true, "gateway_overloaded": true, "upstream_unavailable": true,
	"upstream_timeout": true, "unrouted": true,
}

// outcome is what the exchange reports when its stream ends.
func (x *exchange) outcome() *Outcome {
	o := &x.out
	o.End = time.Now()
	if x.plan != nil {
		o.Model, o.Route, o.Stream = x.plan.model.ID, x.plan.routeID(), x.plan.stream
	}
	o.Provider = x.provider
	if o.Status == 0 && x.responded {
		o.Status = x.status
	}
	o.Fallback = o.Attempts > 1 && x.provider != "" && o.Status < http.StatusBadRequest
	return o
}

// answered records the status and error code the client gets.
func (x *exchange) answered(status int, code string) {
	x.out.Status, x.out.Code = status, code
}

// readAttempts reads Envoy's attempt count from the answer's header.
func (x *exchange) readAttempts(v string) {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		x.out.Attempts = n
	}
}
