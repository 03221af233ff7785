package core

// What every request of one server shares: its log, its books, the store's health, the keys'
// use, the operator hints, and whether an observer times requests.

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/extproc/spans"
)

// Shared is the server-wide state a request's processor touches.
type Shared struct {
	Log *slog.Logger
	// Books is the money path (nil: admission and metering are off, answers pass untouched).
	Books *billing.Books
	// Observed: an observer hears of every request, so its steps are timed.
	Observed bool
	// Refused and Accepted record that a provider refused the gateway's credential, or
	// accepted it again (extproc's refusals.go).
	Refused, Accepted func(provider string)
	KeyUse            KeyUse // when each key was last used (keyuse.go)
	Hints             Hints  // operators' hints logged for refusals (hints.go)
	// Spans makes ext_proc's spans (tracing:); nil: off.
	Spans *spans.Tracer
	// Rates are the keys', routes' and payers' rate limits (ratelimit.go); nil: none are enforced.
	Rates *ratelimit.Limiter
	// storeCheck reports the store's outage (nil: none): see SetStoreCheck; sharedCheck the
	// shared database's: see SetSharedStoreCheck.
	storeCheck, sharedCheck atomic.Pointer[func() error]
}

// Hint logs e's operator hint unless it was logged within the last minute.
func (s *Shared) Hint(e *APIError) { s.Hints.Hint(s.Log, e) }

// SetStoreCheck makes the server refuse billable requests, task creates and paid requests
// while check reports the store's outage (nil: healthy). It is called on each of them, so it
// must be as cheap as an atomic load (store.Health.Unavailable).
func (s *Shared) SetStoreCheck(check func() error) { s.storeCheck.Store(&check) }

// SetSharedStoreCheck makes the server refuse paid requests and task creates while check
// reports the shared database's outage (store.driver postgres, where billable chat is admitted
// on the spool's health instead): a credential's claim and a task are written to the
// database itself. As cheap as SetStoreCheck's.
func (s *Shared) SetSharedStoreCheck(check func() error) { s.sharedCheck.Store(&check) }

// StoreRefusal is the answer to new billable work while the store cannot record it; nil while
// it can.
func (s *Shared) StoreRefusal() *APIError { return refusal(s.storeCheck.Load()) }

// SharedStoreRefusal is StoreRefusal for work the shared database itself must record (a
// credential's claim, a task): refused while either check reports an outage.
func (s *Shared) SharedStoreRefusal() *APIError {
	if e := refusal(s.sharedCheck.Load()); e != nil {
		return e
	}
	return s.StoreRefusal()
}

// refusal is the 503 store_unavailable of check's outage; nil without one.
func refusal(check *func() error) *APIError {
	if check == nil {
		return nil
	}
	err := (*check)()
	if err == nil {
		return nil
	}
	e := Errorf(http.StatusServiceUnavailable, "store_unavailable",
		"%v, so it refuses requests it would bill, task creates and paid requests until its operator fixes that; nothing was charged; retry later", err)
	e.Headers = map[string]string{"retry-after": "10"}
	return e
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
