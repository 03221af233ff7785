package extproc

import (
	"testing"
	"time"

	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tollway/tollway/extproc/core"
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
	s.answers.logged(x.park.id, entry)
	s.answers.logged(x.park.id, entry)
	if d.n != 1 {
		t.Fatalf("unanswered exchange ended %d times by two log entries, want 1", d.n)
	}

	x, d = parkedExchange(s) // the answer filter holds it: its stream's end ends it
	a := &answerStream{s: s}
	a.x = s.answers.adopt(x.park.id)
	s.answers.logged(x.park.id, entry)
	if d.n != 0 {
		t.Fatal("the log entry ended an exchange its answer filter holds")
	}
	a.Done()
	a.Done()
	s.answers.logged(x.park.id, entry)
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
	s.answers.logged(young.park.id, entry)
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
