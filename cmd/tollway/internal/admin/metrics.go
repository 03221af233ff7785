package admin

// GET /metrics: Tollway's own metrics in Prometheus text format (package metrics).
// GET /metrics/envoy: Envoy's stats, read from Envoy's admin API through the unix socket only
// Tollway reaches, in Prometheus text format (?usedonly: only the stats ever written). Both sit
// behind the admin guard like every admin path: with admin.token set, scrapers send
// "Authorization: Bearer <token>".

import (
	"context"
	"io"
	"net/http"
	"time"
)

// maxEnvoyStats bounds what one scrape of Envoy's stats copies (thousands of clusters take a
// few MiB).
const maxEnvoyStats = 64 << 20

var errMetricsOff = &adminRefusal{http.StatusNotFound, "not_found", "metrics are off in this gateway's configuration (metrics.enabled: false)"}

func (s *api) metricsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if s.metrics == nil {
			writeErr(w, errMetricsOff)
			return
		}
		s.metrics.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /metrics/envoy", func(w http.ResponseWriter, r *http.Request) {
		if s.metrics == nil {
			writeErr(w, errMetricsOff)
			return
		}
		proc, _ := s.runtime.Envoy() // the Envoy running now (a restarted one too)
		if proc == nil {
			writeErr(w, &adminRefusal{http.StatusServiceUnavailable, "envoy_unavailable", "Envoy is not running yet; retry"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		_, usedOnly := r.URL.Query()["usedonly"]
		resp, err := proc.PrometheusStats(ctx, usedOnly)
		if err != nil {
			writeErr(w, &adminRefusal{http.StatusBadGateway, "envoy_unavailable", "Envoy's stats could not be read: " + err.Error()})
			return
		}
		defer resp.Body.Close()
		w.Header().Set("content-type", resp.Header.Get("content-type"))
		_, _ = io.Copy(w, io.LimitReader(resp.Body, maxEnvoyStats)) // a scraper that left: nothing to do
	})
}
