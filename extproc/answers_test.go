package extproc

import (
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// doneCounter is a processor that counts its ends.
type doneCounter struct {
	core.AnsweredEarly
	n int
}

func (d *doneCounter) Done() { d.n++ }

func (d *doneCounter) RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return nil, nil
}

// parkedExchange is an exchange of s parked for its answer, its processor counting ends.
func parkedExchange(s *Server) (*exchange, *doneCounter) {
	x := s.newExchange(testRuntime())
	d := &doneCounter{}
	x.kind = d
	s.answers.park(x, false)
	return x, d
}

// TestParkedExchangesEndOnce: whichever of the answer filter's stream, the answer log entry, a
// sweep or Envoy's restart comes to an exchange, it is ended exactly once, and the router-level
// stream never ends one it parked.
func TestParkedExchangesEndOnce(t *testing.T) {
	s := NewServer(nil, testRuntime(), nil)
	s.answers.swept = time.Now().Add(time.Hour) // no sweep of its own while the test runs
	entry := &accesslogdatav3.HTTPAccessLogEntry{}

	x, d := parkedExchange(s) // the client went away before any answer: the log entry ends it
	splitRouter{x}.Done()
	if d.n != 0 {
		t.Fatalf("the router-level stream ended a parked exchange")
	}
	s.answers.logged(x.park.id, entry, nil)
	s.answers.logged(x.park.id, entry, nil)
	if d.n != 1 {
		t.Fatalf("unanswered exchange ended %d times by two log entries, want 1", d.n)
	}

	x, d = parkedExchange(s) // the answer filter holds it: its stream's end ends it
	a := &answerStream{s: s}
	a.x = s.answers.adopt(x.park.id)
	s.answers.logged(x.park.id, entry, nil)
	if d.n != 0 {
		t.Fatal("the log entry ended an exchange its answer filter holds")
	}
	a.Done()
	a.Done()
	s.answers.logged(x.park.id, entry, nil)
	if d.n != 1 {
		t.Fatalf("adopted exchange ended %d times, want 1", d.n)
	}

	young, dy := parkedExchange(s) // a sweep ends only what waited too long
	old, do := parkedExchange(s)
	old.park.at = time.Now().Add(-unanswered - time.Minute)
	s.answers.sweep(time.Now())
	if do.n != 1 || dy.n != 0 {
		t.Fatalf("sweep ended old %d and young %d times, want 1 and 0", do.n, dy.n)
	}
	s.EnvoyRestarted(young.park.at.Add(time.Nanosecond)) // Envoy restarted after it was parked
	s.answers.logged(young.park.id, entry, nil)
	if dy.n != 1 {
		t.Fatalf("an exchange of the Envoy that died ended %d times, want 1", dy.n)
	}
	later, dl := parkedExchange(s)
	s.EnvoyRestarted(later.park.at.Add(-time.Second)) // parked on the new Envoy: kept
	if dl.n != 0 {
		t.Fatal("Envoy's restart ended an exchange parked after it")
	}
	if len(s.answers.parked) != 1 {
		t.Fatalf("%d exchanges left parked, want 1", len(s.answers.parked))
	}
}

// TestAnsweredExchangesWaitBriefly: an exchange its answer filter's stream ended waits in the
// book for its log entry (to write the access line Envoy skipped) for lineWait at most, counted
// from its end, not from when it was parked: an entry Envoy never sent keeps nothing for long,
// and a long stream's just-ended exchange is not dropped before its entry.
func TestAnsweredExchangesWaitBriefly(t *testing.T) {
	s := NewServer(nil, testRuntime(), nil)
	s.answers.swept = time.Now().Add(time.Hour)
	long, _ := parkedExchange(s) // a stream of an hour, just ended
	long.park.at = time.Now().Add(-time.Hour)
	s.answers.adopt(long.park.id)
	s.answers.answered(long, true)
	s.answers.sweep(time.Now())
	if !s.answers.holds(long) {
		t.Fatal("a just-ended exchange was swept before its entry could come")
	}
	s.answers.sweep(time.Now().Add(lineWait + time.Second))
	if s.answers.holds(long) {
		t.Fatalf("an ended exchange still waits for its entry after %s", lineWait)
	}
}

// openSplit starts a split gateway's router-level stream (translator.SplitExtProc): the
// router's phase and ir.SplitMetadata in its initial metadata.
func (e *envoy) openSplit() *stream {
	e.t.Helper()
	return e.openWith(ir.PhaseMetadata, ir.PhaseRouter, ir.SplitMetadata, "1")
}

// parkedAs is the exchange id a split router-level stream's replies to the request set in the
// dynamic metadata (its exchange parked for the answer's filter; in the pipelined protocol it
// rides on the held headers' reply).
func parkedAs(t *testing.T, replies ...*extprocv3.ProcessingResponse) string {
	t.Helper()
	for _, resp := range replies {
		ns := resp.GetDynamicMetadata().GetFields()[ir.MetadataNamespace].GetStructValue()
		if id := ns.GetFields()[ir.ExchangeKey].GetStringValue(); id != "" {
			return id
		}
	}
	t.Fatalf("the router-level replies parked no exchange: %v", replies)
	return ""
}

// answerFilter is an answer filter's stream (translator.AnswerExtProc): Envoy forwards the
// request's MetadataNamespace, the exchange id in it, with each of its messages.
type answerFilter struct {
	stream
	md *corev3.Metadata
}

// openAnswer starts the answer filter's stream of the request whose exchange was parked as id.
func (e *envoy) openAnswer(id string) *answerFilter {
	e.t.Helper()
	s := e.openWith(ir.PhaseMetadata, ir.PhaseAnswer)
	ns, err := structpb.NewStruct(map[string]any{ir.ExchangeKey: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return &answerFilter{stream: *s, md: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ir.MetadataNamespace: ns}}}
}

// pipelined is stream.pipelined with the forwarded metadata on each message.
func (a *answerFilter) pipelined(want int, msgs ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	a.t.Helper()
	for _, m := range msgs {
		m.MetadataContext = a.md
	}
	return a.stream.pipelined(want, msgs...)
}

// TestUnbilledLinesOnlyWithBilling: the lines Envoy skips for want of their bill are Tollway's
// to write only when billing is on (xds/translator's accessLogs skips them only then); with
// billing off Envoy writes every one, and Tollway writing them too would double them.
func TestUnbilledLinesOnlyWithBilling(t *testing.T) {
	var out strings.Builder
	off := NewServer(nil, testRuntime(), nil)
	off.SetAccessLog(&out)
	if off.unbilledLines() != nil {
		t.Fatal("billing off: Tollway writes the lines Envoy writes")
	}
	ledger := billing.NewLedger(map[string]decimal.Decimal{}, nil, "2026-11")
	on := NewServer(nil, testRuntime(), &Billing{Ledger: ledger, Record: func(store.UsageRecord) {}, Now: time.Now})
	on.SetAccessLog(&out)
	if on.unbilledLines() == nil {
		t.Fatal("billing on: nobody writes the lines Envoy skips")
	}
}

// TestBillingOffLinesAreEnvoys: with billing off Envoy writes every line (none has a bill), so
// an answer filter's stream that ends after its answer log entry came writes none, and its
// exchange leaves the book at once (nothing waits for an entry only Tollway would use).
func TestBillingOffLinesAreEnvoys(t *testing.T) {
	var out strings.Builder
	s := NewServer(nil, testRuntime(), nil)
	s.SetAccessLog(&out)
	s.answers.swept = time.Now().Add(time.Hour)
	for _, entryFirst := range []bool{true, false} {
		x, d := parkedExchange(s)
		a := &answerStream{s: s}
		a.x = s.answers.adopt(x.park.id)
		if entryFirst {
			s.answers.logged(x.park.id, &accesslogdatav3.HTTPAccessLogEntry{}, s.unbilledLines())
		}
		a.Done()
		if d.n != 1 || out.Len() != 0 || len(s.answers.parked) != 0 {
			t.Fatalf("entry first %v: ended %d times, Tollway wrote %q, %d left in the book; want 1, nothing, 0",
				entryFirst, d.n, out.String(), len(s.answers.parked))
		}
	}
}
