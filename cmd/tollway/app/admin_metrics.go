package app

// GET /metrics: Tollway's own metrics in Prometheus text format (cmd/tollway/app/metrics).
// GET /metrics/envoy: Envoy's stats, read from Envoy's admin API through the unix socket only
// Tollway reaches, in Prometheus text format (?usedonly: only the stats ever written). Both sit
// behind the admin guard like every admin path: with admin.token set, scrapers send
// "Authorization: Bearer <token>".

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollway/tollway/cmd/tollway/app/metrics"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
)

// maxEnvoyStats bounds what one scrape of Envoy's stats copies (thousands of clusters take a
// few MiB).
const maxEnvoyStats = 64 << 20

// metricsEndpoint serves both; envoy is set once Envoy runs.
type metricsEndpoint struct {
	tollway http.Handler
}

func newMetricsEndpoint(m *metrics.Metrics) *metricsEndpoint {
	return &metricsEndpoint{tollway: promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})}
}

var errMetricsOff = &adminRefusal{http.StatusNotFound, "not_found", "metrics are off in this gateway's configuration (metrics.enabled: false)"}

func (g *gateway) metricsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if g.metrics == nil {
			writeErr(w, errMetricsOff)
			return
		}
		g.metrics.tollway.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /metrics/envoy", func(w http.ResponseWriter, r *http.Request) {
		if g.metrics == nil {
			writeErr(w, errMetricsOff)
			return
		}
		proc := g.envoy.Load() // the Envoy running now (a restarted one too)
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

// observe makes the metrics and wires every component to them; it runs before anything is
// served (the observers are set once, never swapped).
func observe(ctrl *xds.Server, ext *extproc.Server, ledger *billing.Ledger, bill *extproc.Billing, taskSvc *tasks.Service, settlements *extproc.Settlements, st store.Health, settle store.Recorder) *metrics.Metrics {
	m := metrics.New()
	ctrl.SetObserver(m)
	ext.SetObserver(m)
	if ledger != nil {
		ledger.SetObserver(m)
	}
	if bill != nil {
		record := bill.Record
		bill.Record = func(r store.UsageRecord) { m.Usage(r); record(r) }
	}
	taskSvc.Changed = m.TaskChanged
	if settlements != nil {
		settlements.Outcome = m.Settlement
		m.GaugeFunc("tollway_x402_settlements_pending", "x402 settlements whose outcome is not known yet (their results were served); each is settled again until it is.",
			func() float64 { return float64(settlements.Pending()) })
	}
	m.GaugeFunc("tollway_store_available", "1 while the store can make records durable; 0 during an outage (a full, read-only or failing disk), when billable requests, task creates and paid requests are refused with 503 store_unavailable.", func() float64 {
		if st.Unavailable() != nil {
			return 0
		}
		return 1
	})
	if settle != nil {
		m.GaugeFunc("tollway_usage_records_queued", "Usage records and holds waiting to be written: queued, or held while the store cannot commit.", func() float64 { return float64(settle.Queued()) })
	}
	m.GaugeFunc("tollway_tasks_open", "Media tasks running, followed by the poller.", func() float64 { return float64(taskSvc.Running()) })
	m.GaugeFunc("tollway_xds_version_pushed", "The newest snapshot version pushed to Envoy.", func() float64 { return float64(ctrl.Status().Version) })
	m.GaugeFunc("tollway_xds_version_accepted", "The newest snapshot version Envoy accepted on every resource type.", func() float64 { return float64(ctrl.Status().AcceptedVersion) })
	m.GaugeFunc("tollway_xds_envoy_connected", "1 while Envoy holds an xDS stream.", func() float64 {
		if ctrl.Status().Connected {
			return 1
		}
		return 0
	})
	return m
}
