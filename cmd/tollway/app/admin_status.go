package app

import (
	"context"
	"net/http"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
)

// statusReport is GET /admin/v1/status: the configuration's delivery (xds.Status, as before)
// and, for `tollway status`, the rest of a one-screen summary.
type statusReport struct {
	xds.Status
	Listeners struct {
		Public  string `json:"public"`
		Admin   string `json:"admin"`
		XDS     string `json:"xds,omitempty"`     // envoy.mode external: where Envoys reach ADS
		ExtProc string `json:"extproc,omitempty"` // and ext_proc
	} `json:"listeners"`
	Envoy envoyStatus `json:"envoy"`
	// Nodes are the Envoys the control plane serves (Tollway's own is node "tollway"), each
	// with its configuration version and its last rejection.
	Nodes     []xds.NodeStatus `json:"nodes"`
	Providers []providerHealth `json:"providers"`
	Models    struct {
		Total int `json:"total"`
		Ready int `json:"ready"`
	} `json:"models"`
	Store storeStatus `json:"store"`
	// Today is the usage settled since midnight UTC (the daily aggregates' day).
	Today struct {
		Day string `json:"day"`
		store.UsageTotals
	} `json:"today"`
}

// storeStatus is whether the store can make records durable (state "ok" or "unavailable": a
// full, read-only or failing disk, when billable work is refused with 503 store_unavailable).
type storeStatus struct {
	State string     `json:"state"`
	Cause string     `json:"cause,omitempty"` // disk full, read-only filesystem, I/O error, write failed
	Error string     `json:"error,omitempty"` // what the filesystem said
	Since *time.Time `json:"since,omitempty"`
	// Reserve says whether the reserve file beside the store is in place ("held"), was spent
	// writing what was answered when the disk filled ("released"), or is not kept ("none").
	Reserve string `json:"reserve"`
	// Queued are usage records and holds waiting to be written.
	Queued int `json:"queued"`
}

func (g *gateway) storeStatus() storeStatus {
	st := storeStatus{State: "ok", Reserve: g.store.ReserveState()}
	if o := g.store.Outage(); o != nil {
		since := o.Since.UTC()
		st.State, st.Cause, st.Error, st.Since = "unavailable", o.Cause, o.Err.Error(), &since
	}
	if g.settler != nil {
		st.Queued = g.settler.Queued()
	}
	return st
}

// envoyStatus is the Envoy this gateway runs.
type envoyStatus struct {
	PID     int    `json:"pid,omitempty"`
	Version string `json:"version,omitempty"`
	// State is Envoy's own (LIVE, DRAINING...), "exited" once the process is gone, or
	// "unknown" when its admin endpoint does not answer.
	State  string `json:"state"`
	Uptime int64  `json:"uptime_seconds,omitempty"`
	Error  string `json:"error,omitempty"`
	// Restarts is how many times the supervisor restarted the child Envoy, LastExit why the
	// last one exited.
	Restarts int    `json:"restarts"`
	LastExit string `json:"last_exit,omitempty"`
}

// envoyInfoTimeout bounds the status call's question to Envoy: a stuck Envoy is reported, not
// waited for.
const envoyInfoTimeout = 2 * time.Second

func (g *gateway) status(ctx context.Context) (statusReport, error) {
	var st statusReport
	st.Status = g.xds.Status()
	g.mu.Lock()
	if g.cfg != nil {
		st.Listeners.Public, st.Listeners.Admin = g.cfg.Listen.Public, g.cfg.Listen.Admin
		if g.cfg.Envoy.Mode == envoyExternal {
			st.Listeners.XDS, st.Listeners.ExtProc = g.cfg.Listen.XDS, g.cfg.Listen.ExtProc
		}
	}
	g.mu.Unlock()
	st.Envoy = g.envoyStatus(ctx)
	for _, n := range g.xds.Nodes() {
		if n.ID == xds.NodeID && !n.Connected && n.AcceptedVersion == 0 && g.external() {
			continue // an external gateway's own node, which no Envoy uses
		}
		st.Nodes = append(st.Nodes, n)
	}
	st.Store = g.storeStatus()
	providers, models, err := g.healthReport()
	if err != nil {
		return st, err
	}
	st.Providers = providers
	st.Models.Total = len(models)
	for _, m := range models {
		if m.Ready {
			st.Models.Ready++
		}
	}
	now := time.Now().UTC()
	st.Today.Day = now.Format(time.DateOnly)
	sum, err := g.store.Usage(store.UsageFilter{Since: now, Until: now})
	if err != nil {
		return st, err
	}
	st.Today.UsageTotals = sum.UsageTotals
	return st, nil
}

func (g *gateway) envoyStatus(ctx context.Context) envoyStatus {
	if g.external() {
		return envoyStatus{State: "external"} // Envoys started elsewhere: see nodes
	}
	p := g.envoy.Load()
	if p == nil {
		return envoyStatus{State: "starting"}
	}
	es := envoyStatus{PID: p.Pid()}
	if sup := g.supervisor.Load(); sup != nil {
		es.Restarts, es.LastExit = sup.Restarts()
	}
	select {
	case <-p.Done():
		es.State = "exited"
		return es
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, envoyInfoTimeout)
	defer cancel()
	si, err := p.Info(ctx)
	if err != nil {
		es.State, es.Error = "unknown", err.Error()
		return es
	}
	es.Version, es.State, es.Uptime = si.Version, si.State, si.Uptime
	return es
}

// statusRoutes: GET /admin/v1/status.
func (g *gateway) statusRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := g.status(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
}

// external reports whether this gateway serves Envoys it does not start (envoy.mode external).
func (g *gateway) external() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg != nil && g.cfg.Envoy.Mode == envoyExternal
}

// setEnvoy records the Envoy process the gateway runs (status reads it).
func (g *gateway) setEnvoy(p *envoy.Process) { g.envoy.Store(p) }
