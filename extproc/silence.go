package extproc

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tollway/tollway/extproc/core"

	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/store"
)

// This file owns the silence watchdog: a streamed answer whose provider goes silent mid-answer
// for routing.attempt_timeout ends with one error event in the spec's shape (upstream_timeout,
// with the request id) and no [DONE], billed like a cut stream.
//
// Envoy cannot do it: its per-try idle timeout fires after the answer's headers went out too,
// and then it can only reset the client's stream (a cut connection, no event; ext_proc sees its
// own stream end and nothing else). So on Tollway's own routes, where answers are
// FULL_DUPLEX_STREAMED (xds/translator PipelinedMode) and ext_proc sends the client's body
// itself, ext_proc ends the answer first: a little before Envoy's timer would fire, since
// ext_proc sees each chunk a moment after Envoy's router does.

// watchdog is one streamed answer's silence timer. Its fields are guarded by the exchange's mu.
type watchdog struct {
	timer   *time.Timer
	after   time.Duration
	last    time.Time // when the last chunk (or the headers) arrived
	stopped bool
}

// watchSilence starts the watchdog of a streamed answer whose headers just arrived.
func (x *exchange) watchSilence() {
	after := x.RT.Silence
	if after <= 0 || x.quiet != nil {
		return
	}
	x.quiet = &watchdog{after: after, last: time.Now()}
	x.quiet.timer = time.AfterFunc(after, x.silent)
}

// heard notes that a chunk of the streamed answer arrived; its end stops the watchdog.
func (x *exchange) heard(end bool) {
	if x.quiet == nil {
		return
	}
	if end {
		x.stopSilence()
		return
	}
	x.quiet.last = time.Now()
}

// stopSilence stops the watchdog for good (the answer ended, or the stream did). The caller
// holds the exchange's mu, or the stream's loop has ended.
func (x *exchange) stopSilence() {
	if w := x.quiet; w != nil && !w.stopped {
		w.stopped = true
		w.timer.Stop()
	}
}

// silent runs when the watchdog's timer fires: a chunk that came meanwhile puts it off;
// otherwise the answer ends now with the error event, and the request is billed from what was
// sent.
func (x *exchange) silent() {
	x.mu.Lock()
	defer x.mu.Unlock()
	w := x.quiet
	if w == nil || w.stopped {
		return
	}
	if rest := w.after - time.Since(w.last); rest > 0 {
		w.timer.Reset(rest)
		return
	}
	w.stopped, x.silenced = true, true
	e := core.Errorf(http.StatusGatewayTimeout, "upstream_timeout",
		"the provider sent nothing for %s in the middle of its answer (routing.attempt_timeout); the answer is incomplete", w.after.Round(time.Millisecond))
	x.Answered(x.Status, e.Code)
	x.Log.Warn("a provider went silent mid-answer; the stream was ended with upstream_timeout",
		"provider", x.Provider, "model", x.Model, "request_id", store.ShortID(x.RequestID), "silent_for", w.after.String())
	// What the answer holds of an event still coming is dropped with it. The event goes first:
	// Envoy's reset is close behind. The access log gets the code with it; the bill, like any
	// cut stream's, is on the usage record (an estimate may load the tokenizer first).
	resp := streamedBody(fmt.Appendf(nil, "data: %s\n\n", e.Body(x.RequestID)), true)
	x.logMetadata(resp, answerStarts)
	_ = x.Envoy.Send(resp) // Envoy gone: nothing left to tell
	x.finish()
}

// cutIfSilent reads a fast-lane stream's answer log entry: Envoy cut the stream because its
// provider went silent (the per-try idle timeout at routing.attempt_timeout, or the route's idle
// timeout). Lua has no timer, so no error event reached the client; the access log, the metrics
// and the WARN still name it upstream_timeout, as the watchdog's end does on the chunk lane.
func (x *exchange) cutIfSilent(e *accesslogdatav3.HTTPAccessLogEntry) {
	f := e.GetCommonProperties().GetResponseFlags()
	if !f.GetUpstreamRequestTimeout() && !f.GetStreamIdleTimeout() {
		return
	}
	x.Answered(x.Status, "upstream_timeout")
	x.Log.Warn("a provider went silent mid-answer; Envoy cut the fast-lane stream (no error event: routing.fast_lane: false sends one)",
		"provider", x.Provider, "model", x.Model, "request_id", store.ShortID(x.RequestID), "silent_for", x.RT.Silence.String())
}

// answerStarts stands for an answer's headers, whose access-log metadata (provider, code) the
// watchdog's end sends again, the code now upstream_timeout.
var answerStarts = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}}

// streamedBody is a FULL_DUPLEX_STREAMED reply: body is what the client gets next, end ends the
// answer.
func streamedBody(body []byte, end bool) *extprocv3.ProcessingResponse {
	return responseBodyReply(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: end}},
	}})
}

// streamedReply is the exchange's reply to chunk b, made in the buffered protocol's terms (the
// chunk as it came, replaced, or cleared), as FULL_DUPLEX_STREAMED wants it: the body the
// client gets. Any other reply (an immediate one) goes as it is.
func streamedReply(resp *extprocv3.ProcessingResponse, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	rb := resp.GetResponseBody()
	if rb == nil {
		return resp
	}
	body := b.GetBody()
	if m := rb.GetResponse().GetBodyMutation(); m != nil {
		body = m.GetBody() // nil when cleared
	}
	return streamedBody(body, b.GetEndOfStream())
}
