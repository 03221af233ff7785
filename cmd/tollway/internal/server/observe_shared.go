package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollway/tollway/cmd/tollway/internal/metrics"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/spool"
)

// observeShared adds the shared store's state and the spool's lag to the metrics (driver
// postgres; nothing otherwise): whether the database is reachable and since when not, and the
// records spooled on this replica not yet shipped.
func observeShared(m *metrics.Metrics, db store.Health, sp *spool.Spool) {
	if sp == nil {
		return
	}
	m.GaugeFunc("tollway_store_database_reachable", "1 while the shared database (store.driver postgres) takes writes; 0 while it is unreachable or refuses work (usage records keep spooling on each replica, admin writes fail).", func() float64 {
		if db.Outage() != nil {
			return 0
		}
		return 1
	})
	m.GaugeFunc("tollway_store_database_unreachable_seconds", "How long the shared database has been unreachable; 0 while it is reachable.", func() float64 {
		if o := db.Outage(); o != nil {
			return time.Since(o.Since).Seconds()
		}
		return 0
	})
	m.GaugeFunc("tollway_spool_records", "Usage records in this replica's spool (store.spool) not yet shipped to the database: the lag.", func() float64 {
		return float64(sp.Status().Records)
	})
	m.GaugeFunc("tollway_spool_oldest_seconds", "Age of the oldest usage record in this replica's spool not yet shipped; 0 when none waits.", func() float64 {
		return sp.Status().Lag(time.Now()).Seconds()
	})
	m.GaugeFunc("tollway_spool_holds", "Holds of requests being served, kept in this replica's spool (billed at its next start if it stops first).", func() float64 {
		return float64(sp.Status().Holds)
	})
	m.GaugeFunc("tollway_spool_rejected", "Usage records the database refused on their own (kept in the spool's rejected records, each logged as USAGE RECORD NOT STORED).", func() float64 {
		return float64(sp.Status().Rejected)
	})
	m.Registry().MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollway_spool_shipped_records_total",
		Help: "Usage records shipped from this replica's spool to the database (a record shipped again after a crash counts again; the database keeps it once)."},
		func() float64 { return float64(sp.Status().Shipped) }))
}
