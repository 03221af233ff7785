package admin

import (
	"context"
	"errors"
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
	durable := s.store.Outage()
	if sp, ok := s.settler.(spooler); ok { // driver postgres: records are made durable in the spool
		durable = nil
		st.Spool, durable = spoolView(sp.Status())
		st.Database = s.databaseView()
	}
	if o := durable; o != nil {
		since := o.Since.UTC()
		st.State, st.Cause, st.Error, st.Since = "unavailable", o.Cause, o.Err.Error(), &since
	}
	if s.settler != nil {
		st.Queued = s.settler.Queued()
	}
	return st
}

// spooler is the Recorder of driver postgres (store/spool).
type spooler interface{ Status() store.SpoolStatus }

func spoolView(sp store.SpoolStatus) (*adminapi.SpoolStatus, *store.Outage) {
	v := &adminapi.SpoolStatus{Path: sp.Path, Records: sp.Records, LagSeconds: sp.Lag(time.Now()).Seconds(), Holds: sp.Holds, Shipped: sp.Shipped, Rejected: sp.Rejected}
	if sp.Records > 0 && !sp.Oldest.IsZero() {
		oldest := sp.Oldest.UTC()
		v.Oldest = &oldest
	}
	return v, sp.Outage
}

// databaseView is the shared database's state as this replica last found it.
func (s *api) databaseView() *adminapi.DatabaseStatus {
	db := &adminapi.DatabaseStatus{State: "reachable"}
	if w, ok := s.store.(interface{ Where() string }); ok {
		db.At = w.Where()
	}
	if o := s.store.Outage(); o != nil {
		since := o.Since.UTC()
		db.State, db.Since, db.Error = "unreachable", &since, o.Err.Error()
	}
	return db
}

// shared reports err unless it is the shared database being unreachable: status still answers
// then, without what only the database knows.
func shared(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return nil
	}
	return err
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
	if st.Replicas, err = s.replicas(); shared(err) != nil {
		return st, err
	}
	providers, models, err := s.healthReport()
	if shared(err) != nil {
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
	if shared(err) != nil {
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
