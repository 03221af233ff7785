package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/store"
)

// dropAfter: a replica silent for this many leases is dropped from the registry (until then
// status shows it as gone).
const dropAfter = 20

// replica is this process in the store's registry of replicas (store.Replicas): registered when
// the store opens, renewed every third of its lease, removed on a clean stop. On bbolt the
// registry is this process alone.
type replica struct {
	log *slog.Logger
	st  store.Replicas
	me  store.Replica
	// lapsing, when set, is called while the registration is not renewed for two thirds of
	// its lease: before other replicas may take it for gone (budget.go).
	lapsing func()
}

func newReplica(cfg *config.Config, log *slog.Logger, st store.Replicas) *replica {
	now := time.Now()
	return &replica{log: log, st: st, me: store.Replica{Name: cfg.ReplicaName(), Version: buildVersion(),
		StartedAt: now, LastSeen: now, Lease: cfg.Replica.Lease}}
}

// register registers this replica and says how many others are live. A live one of the same
// name is warned about, not refused: a restarted pod keeps its name while its old registration
// is still within its lease.
func (r *replica) register() (others int, err error) {
	list, err := r.st.Replicas()
	if err != nil {
		return 0, err
	}
	now := time.Now()
	for _, o := range list {
		switch {
		case o.Gone(now):
		case o.Name == r.me.Name:
			r.log.Warn("a live replica already has this name (replica.name); two processes sharing it show as one in status",
				"name", o.Name, "started_at", o.StartedAt, "last_seen", o.LastSeen)
		default:
			others++
		}
	}
	return others, r.st.Heartbeat(r.me)
}

// run renews the registration every third of the lease and drops replicas silent for
// dropAfter leases, until ctx ends.
func (r *replica) run(ctx context.Context) {
	t := time.NewTicker(r.me.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			last := r.me.LastSeen
			r.me.LastSeen = now
			if err := r.st.Heartbeat(r.me); err != nil {
				r.log.Warn("replica registration not renewed; other replicas show this one as gone once its lease ends", "name", r.me.Name, "error", err)
				if r.me.LastSeen = last; r.lapsing != nil && now.Sub(last) >= r.me.Lease*2/3 {
					r.lapsing()
				}
				continue
			}
			if n, err := r.st.DropReplicas(now.Add(-dropAfter * r.me.Lease)); err == nil && n > 0 {
				r.log.Info("replicas gone for long dropped from the registry", "replicas", n)
			}
		}
	}
}

// leave removes the registration (a clean stop: the replica is not shown as gone).
func (r *replica) leave() {
	if err := r.st.LeaveReplica(r.me.Name); err != nil {
		r.log.Warn("replica registration not removed; it shows as gone once its lease ends", "name", r.me.Name, "error", err)
	}
}

// buildVersion is the binary's module version, else its VCS revision ("dev" when neither is
// known).
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
