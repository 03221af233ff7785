// Package admin is the admin API: the HTTP endpoints under /admin/v1 through which the CLI, the
// web console and operators read and change a running gateway (the bbolt file belongs to the
// gateway process), with the guard in front of every request (guard.go), the strict request
// decoding (decode.go), the console's routes, API and sign-in (console_*.go; its pages, assets
// and sessions are package console), GET /metrics and, with TOLLWAY_PPROF=1, Go's profiles.
// It takes the store, the gateway's components and two small interfaces of the running
// gateway: an Applier for changes and a Runtime for what it reports. Errors meet HTTP in one
// place, writeErr. Each resource has its own file.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/metrics"
	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// Applier applies store changes to what runs (Envoy through xDS, ext_proc's runtime).
type Applier interface {
	// Change runs write (a store change) and applies the result; if the result is invalid or
	// Envoy rejects it, the write is undone so the store keeps matching what runs. It returns
	// the configuration's delivery as it is once applied.
	Change(ctx context.Context, write func() error) (xds.Status, error)
	// KeysChanged makes ext_proc admit by the store's keys now.
	KeysChanged() error
}

// Runtime is what the admin API reports of the running gateway beyond the store.
type Runtime interface {
	// Config is the configuration applied last; nil before the first.
	Config() *config.Config
	// Credentials says, by provider name, whether its credential resolved when the catalog was
	// last applied.
	Credentials() map[string]bool
	// Health is Envoy's health check of each provider, as last read; nil before the first reading.
	Health() map[string]bool
	// Envoy is the Envoy process serving the gateway and its supervisor; nil until they run.
	Envoy() (*envoy.Process, *envoy.Supervisor)
}

// Options is what the admin API serves.
type Options struct {
	Listen  string // listen.admin: the Host names the guard accepts
	Token   string // the admin token every request must carry; "" for none
	Log     *slog.Logger
	Store   store.Store
	Apply   Applier
	Runtime Runtime
	XDS     *xds.Server
	Ext     *extproc.Server
	// Ledger and Settler are nil when billing is off; Metrics is nil when metrics are off.
	Ledger  *billing.Ledger
	Settler store.Recorder
	Metrics *metrics.Metrics
	// Reload reads the configuration file again and applies it (POST /admin/v1/reload).
	Reload func() error
	// Replica is this gateway's name among the replicas sharing the store (status marks it).
	Replica string
}

// api serves the endpoints from its options.
type api struct {
	log     *slog.Logger
	store   store.Store
	apply   Applier
	runtime Runtime
	xds     *xds.Server
	ext     *extproc.Server
	ledger  *billing.Ledger
	settler store.Recorder
	metrics http.Handler // GET /metrics; nil: metrics are off
	replica string
}

// maxPathID bounds ids taken from a path: they become store keys and appear in messages.
const maxPathID = ir.MaxModelIDLength

// Handler is the whole admin API behind its guard.
func Handler(o Options) http.Handler {
	s := &api{log: o.Log, store: o.Store, apply: o.Apply, runtime: o.Runtime, xds: o.XDS, ext: o.Ext, ledger: o.Ledger, settler: o.Settler, replica: o.Replica}
	if o.Metrics != nil {
		s.metrics = promhttp.HandlerFor(o.Metrics.Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	mux := http.NewServeMux()
	s.statusRoutes(mux)
	mux.HandleFunc("POST /admin/v1/reload", func(w http.ResponseWriter, r *http.Request) {
		if err := o.Reload(); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, s.xds.Status())
	})
	s.keyRoutes(mux)
	s.accountRoutes(mux)
	s.routeRoutes(mux)
	s.routeLimitRoutes(mux)
	s.catalogRoutes(mux)
	s.consoleAPIRoutes(mux)
	s.metricsRoutes(mux)
	pprofRoutes(mux) // only with TOLLWAY_PPROF=1
	guard := newAdminGuard(o.Listen, o.Token, s.log, jsonFallbacks(mux))
	consoleRoutes(mux, guard) // the web console: its pages and sign-in
	return guard
}

// change writes to the store and applies (Applier.Change), answering with the delivery status.
func (s *api) change(w http.ResponseWriter, r *http.Request, write func() error) {
	st, err := s.apply.Change(r.Context(), write)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// jsonFallbacks answers what the mux itself refuses (an unknown path, a wrong method) in the
// API's error shape instead of the mux's plain text.
func jsonFallbacks(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &headerProbe{header: http.Header{}}
		mux.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusMethodNotAllowed:
			allow := probe.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeErr(w, &adminRefusal{http.StatusMethodNotAllowed, "method_not_allowed", r.Method + " is not allowed here; this path takes " + allow})
		case http.StatusNotFound:
			writeErr(w, &adminRefusal{http.StatusNotFound, "not_found", "no admin endpoint at " + ir.QuoteShort(r.URL.Path) + "; the endpoints are under /admin/v1 (tollway help lists what the CLI calls)"})
		default: // a redirect to the canonical path
			for k, v := range probe.header {
				w.Header()[k] = v
			}
			w.WriteHeader(probe.status)
		}
	})
}

// headerProbe records what the mux would answer, without a body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(status int)      { p.status = status }

type badRequestError struct{ msg string }

func (e badRequestError) Error() string { return e.msg }

// BadRequest is an error the admin API answers with 400 invalid_request and msg.
func BadRequest(msg string) error { return badRequestError{msg} }

// writeErr maps errors to HTTP status: the one place admin errors meet HTTP. The answer has the
// API's error shape, with the request id adminGuard set.
func writeErr(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, "internal_error"
	var (
		br      badRequestError
		fault   *fieldError
		refusal *adminRefusal
	)
	switch {
	case errors.As(err, &refusal):
		status, code = refusal.status, refusal.code
	case errors.As(err, &fault):
		status, code = http.StatusBadRequest, "invalid_request"
		if fault.code != "" {
			code = fault.code
		}
	case errors.As(err, &br), errors.Is(err, ir.ErrInvalid), errors.Is(err, store.ErrInvalid):
		status, code = http.StatusBadRequest, "invalid_request"
	case errors.Is(err, store.ErrNotFound):
		status, code = http.StatusNotFound, "not_found"
	case errors.Is(err, store.ErrExists):
		status, code = http.StatusConflict, "already_exists"
	case errors.Is(err, xds.ErrRejected):
		status, code = http.StatusConflict, "envoy_rejected"
	case errors.Is(err, store.ErrUnavailable):
		status, code = http.StatusServiceUnavailable, "store_unavailable" // the message names the store and the fix
	}
	writeJSON(w, status, adminapi.Error{Error: adminapi.ErrorBody{Code: code, Message: err.Error(), RequestID: w.Header().Get("x-request-id")}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client hung up; nothing to do
}
