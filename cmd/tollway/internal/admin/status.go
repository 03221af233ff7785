package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
)

// storeStatus is whether the store can make records durable, and what waits to be written.
func (s *api) storeStatus() adminapi.StoreStatus {
	st := adminapi.StoreStatus{State: "ok", Reserve: s.store.ReserveState()}
	if cfg := s.runtime.Config(); cfg != nil {
		st.Driver = cfg.Store.Driver
	}
	if o := s.store.Outage(); o != nil {
		since := o.Since.UTC()
		st.State, st.Cause, st.Error, st.Since = "unavailable", o.Cause, o.Err.Error(), &since
	}
	if s.settler != nil {
		st.Queued = s.settler.Queued()
	}
	return st
}

// replicas are the gateways the store's registry lists, those silent past their lease marked
// gone.
func (s *api) replicas() ([]adminapi.ReplicaStatus, error) {
	list, err := s.store.Replicas()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]adminapi.ReplicaStatus, 0, len(list))
	for _, r := range list {
		out = append(out, adminapi.ReplicaStatus{Name: r.Name, Version: r.Version, StartedAt: r.StartedAt.UTC(), LastSeen: r.LastSeen.UTC(),
			Gone: r.Gone(now), Self: r.Name == s.replica})
	}
	return out, nil
}

// envoyInfoTimeout bounds the status call's question to Envoy: a stuck Envoy is reported, not
// waited for.
const envoyInfoTimeout = 2 * time.Second

// status is GET /admin/v1/status.
func (s *api) status(ctx context.Context) (adminapi.Status, error) {
	var st adminapi.Status
	var err error
	st.Status = s.xds.Status()
	if cfg := s.runtime.Config(); cfg != nil {
		st.Listeners.Public, st.Listeners.Admin = cfg.Listen.Public, cfg.Listen.Admin
		if cfg.Envoy.Mode == config.EnvoyExternal {
			st.Listeners.XDS, st.Listeners.ExtProc = cfg.Listen.XDS, cfg.Listen.ExtProc
		}
	}
	st.Envoy = s.envoyStatus(ctx)
	for _, n := range s.xds.Nodes() {
		if n.ID == xds.NodeID && !n.Connected && n.AcceptedVersion == 0 && s.external() {
			continue // an external gateway's own node, which no Envoy uses
		}
		st.Nodes = append(st.Nodes, n)
	}
	st.Store = s.storeStatus()
	if st.Replicas, err = s.replicas(); err != nil {
		return st, err
	}
	providers, models, err := s.healthReport()
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
	sum, err := s.store.Usage(store.UsageFilter{Since: now, Until: now})
	if err != nil {
		return st, err
	}
	st.Today.UsageTotals = sum.UsageTotals
	return st, nil
}

// envoyStatus is the Envoy this gateway runs.
func (s *api) envoyStatus(ctx context.Context) adminapi.EnvoyStatus {
	if s.external() {
		return adminapi.EnvoyStatus{State: "external"} // Envoys started elsewhere: see nodes
	}
	p, sup := s.runtime.Envoy()
	if p == nil {
		return adminapi.EnvoyStatus{State: "starting"}
	}
	es := adminapi.EnvoyStatus{PID: p.Pid()}
	if sup != nil {
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
func (s *api) statusRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.status(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
}

// external reports whether this gateway serves Envoys it does not start (envoy.mode external).
func (s *api) external() bool {
	cfg := s.runtime.Config()
	return cfg != nil && cfg.Envoy.Mode == config.EnvoyExternal
}
