package server

import (
	"github.com/tollway/tollway/cmd/tollway/internal/metrics"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
)

// observe makes the metrics and wires every component to them; it runs before anything is
// served (the observers are set once, never swapped).
func observe(ctrl *xds.Server, ext *extproc.Server, ledger *billing.Ledger, bill *extproc.Billing, taskSvc *tasks.Service, settlements *paid.Settlements, st store.Health, settle store.Recorder) *metrics.Metrics {
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
