package app

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// The admin API listens on loopback only, behind adminGuard (admin_guard.go). It is how the CLI
// and operators change a running gateway, since the bbolt file belongs to the gateway process.
// This file assembles it and maps errors to HTTP; each resource has its own file (admin_*.go);
// request bodies are decoded by admin_decode.go.

// maxPathID bounds ids taken from a path: they become store keys and appear in messages.
const maxPathID = ir.MaxModelIDLength

// adminHandler is the whole admin API for the listener at listenAdmin; token ("" for none) is
// the admin token every request must carry.
func (g *gateway) adminHandler(listenAdmin, token string, reload func() error) http.Handler {
	mux := http.NewServeMux()
	g.statusRoutes(mux)
	mux.HandleFunc("POST /admin/v1/reload", func(w http.ResponseWriter, r *http.Request) {
		if err := reload(); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, g.xds.Status())
	})
	g.keyRoutes(mux)
	g.accountRoutes(mux)
	g.routeRoutes(mux)
	g.catalogRoutes(mux)
	g.consoleAPIRoutes(mux)
	g.metricsRoutes(mux)
	pprofRoutes(mux) // only with TOLLWAY_PPROF=1
	guard := newAdminGuard(listenAdmin, token, g.log, jsonFallbacks(mux))
	consoleRoutes(mux, guard) // the web console: its pages and sign-in
	return guard
}

// change writes to the store and applies; if the result is invalid or Envoy rejects it, the
// write is undone so the store keeps matching what runs.
func (g *gateway) change(w http.ResponseWriter, r *http.Request, write func() error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	before, err := g.store.Catalog()
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := write(); err != nil {
		writeErr(w, err)
		return
	}
	if err := g.applyLocked(r.Context()); err != nil {
		if rerr := g.store.RestoreCatalog(before); rerr != nil {
			g.log.Error("could not undo a rejected change", "error", rerr)
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, g.xds.Status())
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

func badRequest(msg string) error { return badRequestError{msg} }

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
	}
	writeJSON(w, status, map[string]any{"error": map[string]string{
		"message": err.Error(), "code": code, "request_id": w.Header().Get("x-request-id"),
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client hung up; nothing to do
}
