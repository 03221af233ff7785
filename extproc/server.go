// Package extproc is Tollway's Envoy external processor. It owns the server (server.go: the
// Runtime swapped atomically on each configuration, provider health), the gRPC stream loop and
// the processor seam (stream.go), how Envoy's messages reach a processor (pipeline.go: the
// pipelined protocol of Tollway's own Envoys and the buffered one), the silence watchdog
// (silence.go), the access log's metadata (accesslog.go) and the observer (observe.go). Each
// stream gets one Processor (stream.go), chosen once: the upstream attempt filter's
// (extproc/chat Attempt: rewrite for the chosen provider, translate its answer), or, at the
// router, the one the request's path names: chat (extproc/chat), the catalog (catalog.go),
// GET /v1/key (keyinfo.go), media task create and read (extproc/tasks Media), or a paid x402
// endpoint wrapping chat or media (extproc/x402/paid). What every processor shares is
// extproc/core; the ledger and holds are extproc/billing.
package extproc

import (
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/ratelimit"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Server implements Envoy's ExternalProcessor service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	sh      *core.Shared // what every request shares: the log, the books, the store's health, key use
	runtime atomic.Pointer[core.Runtime]
	health  atomic.Pointer[map[string]bool]
	// refusals are providers whose last answer refused the gateway's credential.
	refusals refusals
	tasks    *tasks.Endpoints       // nil: the media task endpoints are off
	tasksOff atomic.Pointer[string] // why they are off, for their answer
	paid     paid.Endpoints         // the x402 paid endpoints (none until SetPayments)
	obs      Observer               // nil: nothing is measured
	answers  *answerBook            // exchanges parked for their answer's filter (answers.go)
	// accessOut takes the access log lines ext_proc writes itself (a fast-lane stream's);
	// nil: the access log is off.
	accessOut io.Writer
}

// SetAccessLog makes ext_proc write the access log lines Envoy cannot (a fast-lane stream's,
// billed after Envoy's line is due) to w; nil: none.
func (s *Server) SetAccessLog(w io.Writer) { s.accessOut = w }

// SetTracer makes ext_proc's spans with t (nil: tracing off); set before serving.
func (s *Server) SetTracer(t *spans.Tracer) { s.sh.Spans = t }

// Billing is the money path: holds taken before forwarding, and where settled requests go
// (billing.Books). A nil *Billing turns admission and metering off (responses then pass
// untouched).
type Billing = billing.Books

// NewServer makes a server that serves rt until Swap replaces it.
func NewServer(log *slog.Logger, rt *core.Runtime, b *Billing) *Server {
	s := &Server{answers: newAnswerBook()}
	s.sh = &core.Shared{Log: log, Books: b, Refused: s.providerRefused, Accepted: s.providerAnswered, Rates: ratelimit.New(nil)}
	s.runtime.Store(rt)
	return s
}

// SetStoreCheck makes the server refuse billable requests, task creates and paid requests
// while check reports the store's outage (nil: healthy); see core.Shared.SetStoreCheck.
func (s *Server) SetStoreCheck(check func() error) { s.sh.SetStoreCheck(check) }

// ShareRates makes the rate limits shares of the whole among the replicas sharing sharer's
// store (extproc/ratelimit's shared.go); RenewRates must then run every ratelimit.RenewEvery.
// Call it before the server serves.
func (s *Server) ShareRates(sharer ratelimit.Sharer) { s.sh.Rates.Share(sharer, s.sh.Log) }

// RenewRates renews this replica's shares of the rate limits.
func (s *Server) RenewRates() { s.sh.Rates.Renew() }

// SetSharedStoreCheck makes the server refuse paid requests and task creates while check
// reports the shared database's outage; see core.Shared.SetSharedStoreCheck.
func (s *Server) SetSharedStoreCheck(check func() error) { s.sh.SetSharedStoreCheck(check) }

// SetPayments turns the paid endpoints on (nil: off).
func (s *Server) SetPayments(p *paid.Payments) { s.paid.Set(p) }

// Swap installs a new runtime for requests that start from now on.
func (s *Server) Swap(rt *core.Runtime) {
	old := s.runtime.Swap(rt)
	s.refusals.reconfigured(old.Providers, rt.Providers)
}

// SetHealth records which providers Envoy currently sees as healthy (by provider name).
func (s *Server) SetHealth(h map[string]bool) { s.health.Store(&h) }

// ModelReady reports whether catalog model id can take traffic now (for route health).
func (s *Server) ModelReady(id string) bool {
	rt := s.runtime.Load()
	m := rt.Models[id]
	return m != nil && s.modelReady(rt, m)
}

// modelReady: some provider of m has its credential, did not refuse it, and is not known to
// be unhealthy.
func (s *Server) modelReady(rt *core.Runtime, m *core.Model) bool {
	h := s.health.Load()
	for _, t := range m.Targets {
		p := rt.Providers[t.Provider]
		if p == nil || !p.Ready() || s.refusals.has(p.Name) {
			continue
		}
		if h == nil {
			return true // no health reading yet
		}
		if healthy, known := (*h)[p.Name]; !known || healthy {
			return true
		}
	}
	return false
}

// endpoints names every endpoint a client can call, for the answer to a path that is none.
func (s *Server) endpoints() string {
	list := "Tollway serves POST " + core.ChatPath + ", POST " + core.EmbeddingsPath + ", GET " + core.ModelsPath + " and GET " + core.ModelsPath + "/{id}"
	for _, kind := range []string{ir.KindVideo, ir.KindImage} {
		list += ", POST " + core.MediaPaths[kind] + " and GET " + core.MediaPaths[kind] + "/{id}"
	}
	list += ", GET " + core.KeyPath
	if s.paid.Listed() {
		list += ", and POST " + core.PayPrefix + "{slug} for its paid endpoints"
	}
	return list
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// SaveKeysUsed hands save the keys used since the last save that succeeded, with when each was
// last used. When save fails they are kept for the next call, and its error returned.
func (s *Server) SaveKeysUsed(save func(map[string]time.Time) error) error {
	return s.sh.KeyUse.Save(save)
}

// Runtime is the compiled configuration requests run under (core.Runtime).
type Runtime = core.Runtime

// Compile builds a Runtime from the IR and the key records (core.Compile).
func Compile(g *ir.Gateway, keys []store.Key) *Runtime { return core.Compile(g, keys) }

// SetTasks turns the media endpoints on; the service's Price and Bill are the endpoints', it
// reports the providers' refusals of the gateway's credential, and it charges accounts when
// billing is on.
func (s *Server) SetTasks(t *tasks.Endpoints) {
	t.Books, t.Runtime, t.Refusals, t.Log, t.Spans = s.sh.Books, s.runtime.Load, taskRefusals{&s.refusals}, s.sh.Log, s.sh.Spans
	t.Service.Price = t.Price
	t.Service.Bill = t.BillLater
	// Task calls bypass the response path the chat's refusals are read on: the service says.
	t.Service.Refused, t.Service.Answered = s.providerRefused, s.providerAnswered
	t.Service.Charge = s.sh.Books != nil
	s.tasks = t
}

// SetTasksOff says why the media task endpoints are off (their answer's message).
func (s *Server) SetTasksOff(reason string) { s.tasksOff.Store(&reason) }

// media is the processor of a request for kind's media endpoints under x (pay: its payment,
// nil when keyed).
func (s *Server) media(x *core.Exchange, kind string, pay tasks.Payment) *tasks.Media {
	var off string
	if r := s.tasksOff.Load(); r != nil {
		off = *r
	}
	return tasks.NewMedia(x, s.tasks, off, kind, pay)
}

// taskRefusals are the server's refusals as the media endpoints ask them.
type taskRefusals struct{ r *refusals }

func (t taskRefusals) MayTry(provider string, now time.Time) bool { return t.r.mayTry(provider, now) }
func (t taskRefusals) Reason(provider string) string              { return t.r.reason(provider) }

// TaskCatalog is the configuration tasks run under now.
func (s *Server) TaskCatalog() tasks.Catalog { return s.runtime.Load() }

// RestoreTaskHolds holds again, after a start, what running tasks held before
// (tasks.Endpoints.RestoreHolds).
func (s *Server) RestoreTaskHolds(st store.Tasks) (int, error) {
	if s.tasks == nil {
		return 0, nil
	}
	return s.tasks.RestoreHolds(st)
}
