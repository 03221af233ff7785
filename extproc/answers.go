package extproc

// The split answer on a split gateway (xds/translator's answers.go): the router-level stream
// reads the request and, once it routes it, parks its exchange here under an id it sets in the
// request's metadata. The answer's filter (the chunk lane's or the fast lane's) opens a stream
// of its own with the answer's headers, finds the exchange by that id and handles the answer on
// it as the router-level stream would have; when it ends, the exchange is done. A fast-lane
// stream is billed when its answer log entry arrives (the stream meter's counts in it), and an
// exchange whose answer never reached an answer filter (the client went away first) is ended by
// that entry too. Each exchange is ended exactly once, by whichever comes last of the two that
// may hold it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// answerBook holds the exchanges parked for their answer's filter, by id.
type answerBook struct {
	mu     sync.Mutex
	parked map[string]*exchange
	seq    atomic.Uint64
	nonce  string    // this process's: an id never names another process's exchange
	swept  time.Time // the last sweep (under mu)
}

// What ends an exchange whose end never came (its Envoy died, or the entry of the answer log
// was lost): a routed request no answer reached after unanswered, a fast-lane stream after
// unlogged, both billed as a cut request would be (the hold released, or an estimate of what
// the stream's latest periodic entry said passed).
const (
	sweepEvery = 30 * time.Second
	unanswered = 15 * time.Minute // beyond every chain's attempts at their idle timeouts
	unlogged   = 2 * time.Hour    // beyond any stream a client keeps open
	// lineWait bounds how long an ended exchange waits for its entry (which Envoy sends within
	// answerFlush) to write its access log line: an entry Envoy dropped must not keep every
	// exchange after it in memory.
	lineWait = time.Minute
)

// sweep ends the exchanges parked too long at now.
func (b *answerBook) sweep(now time.Time) {
	b.end(func(x *exchange) bool {
		age := now.Sub(x.park.at)
		if x.park.answered {
			return now.Sub(x.park.answeredAt) > lineWait
		}
		return (!x.park.adopted && age > unanswered) || (x.park.adopted && age > unlogged)
	}, "no answer log entry came for it")
}

// dropBefore ends every exchange parked before t: their Envoy is gone (it restarted), and with
// it their answers and their log entries.
func (b *answerBook) dropBefore(t time.Time, why string) {
	b.end(func(x *exchange) bool { return x.park.at.Before(t) }, why)
}

// end ends the parked exchanges stale picks (under the book's lock) that no answer filter's
// stream will end.
func (b *answerBook) end(stale func(*exchange) bool, why string) {
	b.mu.Lock()
	var picked []*exchange
	for id, x := range b.parked {
		switch {
		case !stale(x):
		case x.park.answered: // ended, waiting for its entry only to write its line
			delete(b.parked, id)
		default:
			picked = append(picked, x)
		}
	}
	b.mu.Unlock()
	for _, x := range picked {
		b.close(x, nil, why)
	}
}

// EnvoyRestarted ends what Envoy's restart ended: every exchange parked for an answer before
// its replacement started at t.
func (s *Server) EnvoyRestarted(t time.Time) { s.answers.dropBefore(t, "Envoy restarted") }

// parking is what an exchange knows of its place in the book.
type parking struct {
	id      string
	at      time.Time   // when it was parked
	parked  atomic.Bool // handed over: the router-level stream no longer ends it
	fast    bool        // on the fast lane
	adopted bool        // an answer filter's stream took it (under the book's lock)
	// answered: its answer filter's stream ended it before its answer log entry came; entry:
	// that entry, come first (both under the book's lock). The second of the two writes the
	// request's access log line when Envoy's skipped it (needsLine).
	answered   bool
	answeredAt time.Time
	entry      *accesslogdatav3.HTTPAccessLogEntry
}

func newAnswerBook() *answerBook {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &answerBook{parked: map[string]*exchange{}, nonce: hex.EncodeToString(b[:])}
}

// park hands x over to its answer's filter and names it.
func (b *answerBook) park(x *exchange, fast bool) string {
	x.park.id = b.nonce + "-" + strconv.FormatUint(b.seq.Add(1), 36)
	x.park.fast, x.park.at = fast, time.Now()
	b.mu.Lock()
	b.parked[x.park.id] = x
	sweep := x.park.at.Sub(b.swept) > sweepEvery
	if sweep {
		b.swept = x.park.at
	}
	b.mu.Unlock()
	if sweep {
		go b.sweep(x.park.at)
	}
	x.park.parked.Store(true)
	return x.park.id
}

// adopt gives the answer filter's stream the exchange named id (nil: none parked under it).
func (b *answerBook) adopt(id string) *exchange {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := b.parked[id]
	if x != nil {
		x.park.adopted = true
	}
	return x
}

// holds reports whether x is still in the book: its answer filter's stream is the one to end
// it.
func (b *answerBook) holds(x *exchange) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parked[x.park.id] == x
}

// answered ends x's stay in the book once its answer filter's stream ended (billed) it: it
// gives x's answer log entry if it came first; an exchange whose entry is still to come stays,
// answered, for it when its line may be Tollway's to write (wait; else it leaves now).
func (b *answerBook) answered(x *exchange, wait bool) *accesslogdatav3.HTTPAccessLogEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parked[x.park.id] != x {
		return nil
	}
	if x.park.entry == nil && wait {
		x.park.answered, x.park.answeredAt = true, time.Now()
		return nil
	}
	delete(b.parked, x.park.id)
	return x.park.entry
}

// logged is an exchange's answer log entry: the request is over. It ends an exchange no answer
// filter holds, and bills a fast-lane stream from what the stream meter read. An exchange an
// answer filter's stream holds gets its access log line from whichever of the two ends last.
func (b *answerBook) logged(id string, e *accesslogdatav3.HTTPAccessLogEntry, out io.Writer) {
	b.mu.Lock()
	x := b.parked[id]
	held := x != nil && x.park.adopted && !x.byLog()
	answered := held && x.park.answered
	switch {
	case answered:
		delete(b.parked, id)
	case held:
		x.park.entry = e
	}
	b.mu.Unlock()
	switch {
	case x == nil:
		writeLine(out, nil, e) // ended without its entry (swept, Envoy restarted): the line Envoy skipped
	case !held:
		b.close(x, e, "")
	case answered:
		writeLine(out, x, e)
	}
}

// writeLine writes the access log line Envoy skipped for a request not on the fast lane (its
// line lacks a bill, xds/translator's accessLogs): an answer cut after the provider answered
// ends when Envoy is past sending ext_proc anything, so only Tollway's line can carry its bill.
// x is ended (nil: no longer known).
func writeLine(out io.Writer, x *exchange, e *accesslogdatav3.HTTPAccessLogEntry) {
	if out != nil && needsLine(e) {
		_, _ = out.Write(accessLine(x, e))
	}
}

// unbilledLines is where the lines Envoy skips for want of their bill go (writeLine): the
// access log, when billing is on (off, no line has a bill and Envoy writes them all:
// xds/translator's accessLogs).
func (s *Server) unbilledLines() io.Writer {
	if s.sh.Books == nil {
		return nil
	}
	return s.accessOut
}

// needsLine reports whether Envoy skipped e's access log line: a request with an exchange whose
// metadata has no cost.
func needsLine(e *accesslogdatav3.HTTPAccessLogEntry) bool {
	_, billed := e.GetCommonProperties().GetMetadata().GetFilterMetadata()[ir.MetadataNamespace].GetFields()[ir.CostKey]
	return !billed
}

// progress is a periodic entry of a fast-lane stream still open (ir.MeterReportEvery): its
// progress is checkpointed from the stream meter's counts.
func (b *answerBook) progress(id string, e *accesslogdatav3.HTTPAccessLogEntry) {
	b.mu.Lock()
	x := b.parked[id]
	b.mu.Unlock()
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byLog() {
		x.kind.(*chat.Processor).CheckpointFromLog(meterReport(e))
	}
}

// close ends parked x unless its answer filter's stream ends it: the request is over (e, its
// answer log entry), or its end will never come (e nil: why). A fast-lane stream is billed
// from e's meter counts, or without e from its latest periodic entry's as a cut stream (its
// prompt alone when none came); any other ends as its processor ends a cut request.
func (b *answerBook) close(x *exchange, e *accesslogdatav3.HTTPAccessLogEntry, why string) {
	x.mu.Lock() // the answer filter's stream is past the answer's headers
	byLog := x.byLog()
	b.mu.Lock()
	mine := b.parked[x.park.id] == x && (!x.park.adopted || byLog)
	if mine {
		delete(b.parked, x.park.id)
	}
	b.mu.Unlock()
	if mine && !byLog && !x.park.adopted && e != nil {
		x.answerFromLog(e)
	}
	var line []byte
	if mine && byLog {
		c := x.kind.(*chat.Processor)
		m, known := c.Progress() // without e: what its latest periodic entry said passed
		if e != nil {
			m, known = meterReport(e), true
			x.cutIfSilent(e)
		}
		if known && !m.Ended {
			// Cut short: the meter publishes its count every ir.MeterLagBytes bytes, so
			// up to that many more passed than it says. A cut stream is billed at least what
			// was sent.
			m.TextBytes += ir.MeterLagBytes
		}
		if !known {
			x.s.sh.Log.Error("FAST-LANE STREAM BILLED ITS PROMPT ONLY: what its answer sent is unknown", "request_id", x.RequestID, "why", why)
		}
		c.SettleFromLog(m)
		if d := e.GetCommonProperties().GetTimeToFirstDownstreamTxByte(); d != nil && x.Observed {
			x.Out.FirstByte = x.Out.Start.Add(d.AsDuration()) // the stream's first byte, as Envoy saw it
		}
		if e != nil && x.s.accessOut != nil {
			line = accessLine(x, e)
		}
	}
	x.mu.Unlock()
	if line != nil {
		_, _ = x.s.accessOut.Write(line)
	}
	if mine {
		x.Done()
	}
	if mine && !byLog && e != nil {
		writeLine(x.s.unbilledLines(), x, e) // ended here: its answer never reached an answer filter
	}
}

// answerFromLog hands x's processor the answer's headers Envoy copied into its log entry
// (translator.AnswerHeaders) when no answer filter read them: the provider answered and dropped
// its connection right behind its headers, before the answer filter's stream had them. The
// processor then ends the request as it ends any answer cut after its headers. Nothing when no
// provider answered (the client went away first).
func (x *exchange) answerFromLog(e *accesslogdatav3.HTTPAccessLogEntry) {
	f := e.GetCommonProperties().GetMetadata().GetFilterMetadata()[ir.AnswerHeadersMetadata].GetFields()
	status := f[ir.AnswerStatusKey].GetStringValue()
	if status == "" || x.Responded {
		return
	}
	h := []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(status)}}
	for key, name := range map[string]string{ir.AnswerServedKey: ir.ServedHeader, ir.AnswerAttemptsKey: ir.AttemptsHeader} {
		if v := f[key].GetStringValue(); v != "" {
			h = append(h, &corev3.HeaderValue{Key: name, RawValue: []byte(v)})
		}
	}
	x.responseHeaders(&extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: h}})
}

// byLog reports whether x's answer is billed from its log entry (a fast-lane stream).
func (x *exchange) byLog() bool {
	c, ok := x.kind.(*chat.Processor)
	return ok && c.ByLog()
}

// meterReport reads the stream meter's counts (ir.MeterMetadata) from an answer log entry, as
// the meter published them (its text_bytes up to ir.MeterLagBytes behind).
func meterReport(e *accesslogdatav3.HTTPAccessLogEntry) chat.MeterReport {
	c := e.GetCommonProperties()
	f := c.GetMetadata().GetFilterMetadata()[ir.MeterMetadata].GetFields()
	n := func(k string) int64 { return int64(f[k].GetNumberValue()) }
	yes := func(k string) bool { return f[k].GetBoolValue() }
	flags := c.GetResponseFlags()
	return chat.MeterReport{
		Usage: yes("usage"), PromptTokens: n("prompt_tokens"), CompletionTokens: n("completion_tokens"),
		CachedTokens: n("cached_tokens"), ImageTokens: n("image_tokens"), TextBytes: n("text_bytes"),
		Finished: yes("finished"), Done: yes("done"), Error: yes("error"), Ended: yes("ended"),
		ClientReset: flags.GetDownstreamConnectionTermination() || flags.GetDownstreamProtocolError(),
	}
}

// answerEntries takes the answer log's entries.
func (s *Server) answerEntries(entries []*accesslogdatav3.HTTPAccessLogEntry) {
	for _, e := range entries {
		f := e.GetCommonProperties().GetMetadata().GetFilterMetadata()[ir.MetadataNamespace].GetFields()
		id := f[ir.ExchangeKey].GetStringValue()
		switch {
		case id == "":
		case e.GetCommonProperties().GetAccessLogType() == accesslogdatav3.AccessLogType_DownstreamPeriodic:
			s.answers.progress(id, e)
		default:
			s.answers.logged(id, e, s.unbilledLines())
		}
	}
}

// splitRouter is a split gateway's router-level stream: once its exchange is parked, the
// answer's side ends it, not this stream (which Envoy may close as soon as the request is
// read).
type splitRouter struct{ *exchange }

func (r splitRouter) Done() {
	if r.park.parked.Load() {
		return
	}
	r.exchange.Done()
}

// answerStream is an answer filter's stream: it finds its exchange at the answer's headers and
// hands it each of Envoy's messages through the lane's framing.
type answerStream struct {
	s   *Server
	ctx context.Context
	env *core.EnvoyStream
	x   *exchange // nil until the answer's headers named a parked exchange
	f   framing
}

// exchangeID is the exchange id forwarded with an answer filter's message.
func exchangeID(req *extprocv3.ProcessingRequest) string {
	f := req.GetMetadataContext().GetFilterMetadata()[ir.MetadataNamespace].GetFields()
	return f[ir.ExchangeKey].GetStringValue()
}

func (a *answerStream) requestHeaders(*extprocv3.ProcessingRequest, *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}}, nil
}

func (a *answerStream) requestBody(*extprocv3.ProcessingRequest, *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}}, nil
}

func (a *answerStream) requestTrailers(*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}}, nil
}

func (a *answerStream) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	if a.x == nil {
		x := a.s.answers.adopt(exchangeID(req))
		if x == nil {
			// No exchange parked under that id (Envoy's reply to a request ext_proc never
			// routed): the answer goes on as it is.
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}, nil
		}
		x.mu.Lock()
		x.Ctx, x.Envoy = a.ctx, a.env
		a.x = x
		if x.park.fast {
			a.f = oneByOne{p: x, log: x.logMetadata} // its headers, an error's body on request
		} else {
			a.f = x.pipe // the answer half of the pipelined protocol, as before the split
		}
		x.mu.Unlock()
	}
	a.x.mu.Lock()
	defer a.x.mu.Unlock()
	return a.f.responseHeaders(req, h)
}

func (a *answerStream) responseBody(req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	if a.x == nil {
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}}, nil
	}
	a.x.mu.Lock()
	defer a.x.mu.Unlock()
	return a.f.responseBody(req, b)
}

func (a *answerStream) responseTrailers(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	if a.x == nil {
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}}, nil
	}
	a.x.mu.Lock()
	defer a.x.mu.Unlock()
	return a.f.responseTrailers(req)
}

// Done ends the exchange when its answer is over here; a fast-lane stream's answer goes on in
// Envoy, and its log entry ends it.
func (a *answerStream) Done() {
	x := a.x
	if x == nil || x.byLog() {
		return
	}
	if !a.s.answers.holds(x) {
		return
	}
	x.Done()
	out := a.s.unbilledLines()
	if e := a.s.answers.answered(x, out != nil); e != nil {
		writeLine(out, x, e)
	}
}

// splitFraming is a split gateway's router-level framing: the pipelined protocol for the
// request; the answer's headers (which this filter still reads, for a refusal it deferred to
// them) go on untouched once the exchange is parked: its answer filter has them.
type splitFraming struct{ *pipeline }

func (f splitFraming) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) ([]*extprocv3.ProcessingResponse, error) {
	if f.x.park.parked.Load() {
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}, nil
	}
	return f.pipeline.responseHeaders(req, h)
}

// accessLine is a fast-lane stream's access log line: Envoy's fields from its answer log entry,
// Tollway's from the exchange and its bill (Envoy skips these lines: xds/translator's
// accessLogs).
func accessLine(x *exchange, e *accesslogdatav3.HTTPAccessLogEntry) []byte {
	c, req := e.GetCommonProperties(), e.GetRequest()
	ms := func(d *durationpb.Duration) any {
		if d == nil {
			return nil
		}
		return d.AsDuration().Milliseconds()
	}
	path := req.GetOriginalPath()
	if path == "" {
		path = req.GetPath()
	}
	f := map[string]any{
		"time":        c.GetStartTime().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"),
		"request_id":  req.GetRequestId(),
		"method":      req.GetRequestMethod().String(),
		"path":        path,
		"status":      e.GetResponse().GetResponseCode().GetValue(),
		"ttfb_ms":     ms(c.GetTimeToFirstUpstreamRxByte()),
		"duration_ms": ms(c.GetTimeToLastDownstreamTxByte()),
		"attempts":    c.GetUpstreamRequestAttemptCount(),
	}
	for k, v := range c.GetMetadata().GetFilterMetadata()[ir.MetadataNamespace].GetFields() {
		if k != ir.ExchangeKey {
			f[k] = v.AsInterface()
		}
	}
	if x == nil {
		return accessLogLine(f)
	}
	if x.Provider != "" {
		f["provider"], f["model"] = x.Provider, x.Model // an answer cut before Envoy had them
	}
	if x.Out.Code != "" {
		f["code"] = x.Out.Code // known only at the end: a provider silent mid-answer (cutIfSilent)
	}
	if b := x.Bill; b != nil {
		f["prompt_tokens"], f["completion_tokens"] = b.Usage.PromptTokens, b.Usage.CompletionTokens
		f["cost"], f["estimated"] = b.Cost.String(), b.Estimated
	}
	return accessLogLine(f)
}
