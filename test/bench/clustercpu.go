package main

// The cluster's CPU per request, by process kind: every process of the run (the bbolt gateway's
// Tollway and Envoy, bbolt x3's other two gateways', the first replica's, the other two
// replicas', the PostgreSQL server with its backends, the bench with the fake provider) is read
// over each path's turns, so a path's
// row shows what serving it costs the processes that serve it and what the idle ones burn
// meanwhile (background work: shipping, leases, renewals, LISTEN). CPU time, unlike latency,
// holds up on a busy host: it is what tells the store's cost apart from the machine's noise.

import (
	"fmt"
	"io"
	"os"
	"time"
)

// A process kind of the cluster, a column of its CPU table.
const (
	kindBBTollway  = "bbolt tollway"
	kindBBEnvoy    = "bbolt envoy"
	kindBBxTollway = "bbolt b+c tollway" // bbolt x3's other two gateways
	kindBBxEnvoy   = "bbolt b+c envoy"
	kindATollway   = "replica-a tollway"
	kindAEnvoy     = "replica-a envoy"
	kindBCTollway  = "replicas b+c tollway"
	kindBCEnvoy    = "replicas b+c envoy"
	kindPostgres   = "postgres server"
	kindBenchProcs = "bench + provider"
)

var clusterKinds = []string{kindBBTollway, kindBBEnvoy, kindBBxTollway, kindBBxEnvoy, kindATollway, kindAEnvoy, kindBCTollway, kindBCEnvoy, kindPostgres, kindBenchProcs}

// kindProc is one process read for a kind (several add up: replicas b and c); tree: with its
// children (treeCPU).
type kindProc struct {
	kind string
	p    proc
	tree bool
}

func (k kindProc) cpu() time.Duration {
	if k.tree {
		return treeCPU(k.p.pid)
	}
	return procCPU(k.p)
}

// clusterProcs lists the processes of the run by kind: the bbolt gateways (bbs, the first the
// bbolt path's), the replicas; pgPID is the postmaster (0: a server not started here, left
// out), whose children are its backends.
func clusterProcs(replicas, bbs []*target, pgPID int) []kindProc {
	ps := []kindProc{{kind: kindBenchProcs, p: proc{selfProc, os.Getpid()}}}
	pairs := func(ts []*target, first, firstEnvoy, rest, restEnvoy string) {
		for i, t := range ts {
			tk, ek := first, firstEnvoy
			if i > 0 {
				tk, ek = rest, restEnvoy
			}
			ps = append(ps, kindProc{kind: tk, p: proc{tollwayProc, t.tw.Pid()}}, kindProc{kind: ek, p: proc{"envoy", t.tw.EnvoyPID}})
		}
	}
	pairs(bbs, kindBBTollway, kindBBEnvoy, kindBBxTollway, kindBBxEnvoy)
	pairs(replicas, kindATollway, kindAEnvoy, kindBCTollway, kindBCEnvoy)
	if pgPID > 0 {
		ps = append(ps, kindProc{kind: kindPostgres, p: proc{"postgres", pgPID}, tree: true})
	}
	return ps
}

// cpuByKind is the CPU each kind used over some time.
type cpuByKind map[string]time.Duration

// cpuMeter reads the run's processes around each turn and adds what each kind used to its path.
type cpuMeter struct {
	procs  []kindProc
	byPath map[string]cpuByKind
	took   map[string]time.Duration // the paths' measured time
}

func newCPUMeter(procs []kindProc) *cpuMeter {
	return &cpuMeter{procs: procs, byPath: map[string]cpuByKind{}, took: map[string]time.Duration{}}
}

// turn runs fn (one path's turn) and charges the CPU used meanwhile to path.
func (m *cpuMeter) turn(path string, fn func()) {
	c0, t0 := m.snapshot(), time.Now()
	fn()
	c1 := m.snapshot()
	m.took[path] += time.Since(t0)
	if m.byPath[path] == nil {
		m.byPath[path] = cpuByKind{}
	}
	for i, kp := range m.procs {
		m.byPath[path][kp.kind] += c1[i] - c0[i]
	}
}

func (m *cpuMeter) snapshot() []time.Duration {
	out := make([]time.Duration, len(m.procs))
	for i, kp := range m.procs {
		out[i] = kp.cpu()
	}
	return out
}

// reportClusterCPU prints the table (us of CPU per request sent on the path, every process of
// the run) and splits the paths' differences (the store's part, the spreading) by process kind.
func reportClusterCPU(w io.Writer, o *options, cr *clusterRun) {
	m := cr.cpu
	if m == nil || len(m.byPath) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== cluster: CPU per request by process kind, us (user+sys over each path's turns / requests sent on it; every process of the run, the idle ones too) ==")
	fmt.Fprintf(w, "%-12s", "path")
	for _, k := range clusterKinds {
		fmt.Fprintf(w, " %11s", shortKind(k))
	}
	fmt.Fprintf(w, " %8s %8s\n", "gateway", "all")
	perReq := map[string]map[string]float64{}
	for _, p := range o.clusterPaths {
		c, r := m.byPath[p], cr.res[p]
		if c == nil || r == nil || r.requests == 0 {
			continue
		}
		perReq[p] = map[string]float64{}
		fmt.Fprintf(w, "%-12s", p)
		var gw, all float64
		for _, k := range clusterKinds {
			v := float64(c[k].Microseconds()) / float64(r.requests)
			perReq[p][k] = v
			all += v
			if k != kindBenchProcs {
				gw += v
			}
			fmt.Fprintf(w, " %11.1f", v)
		}
		fmt.Fprintf(w, " %8.1f %8.1f\n", gw, all)
	}
	fmt.Fprintln(w, "(gateway: every column but the bench's: what the gateways and the database cost a request; columns: "+kindLegend()+")")
	bb := perReq[pathBB]
	if bb == nil {
		return
	}
	// What the serving processes cost on a path, less what they burn while bbolt serves (their
	// background), against the bbolt gateway's pair.
	over := func(p map[string]float64, k string) float64 { return p[k] - bb[k] }
	if one := perReq[pathPGOne]; one != nil {
		tw, env := over(one, kindATollway), over(one, kindAEnvoy)
		fmt.Fprintf(w, "postgres x1 vs bbolt, serving the same load: Tollway %.1f vs %.1f us/req (%+.1f), Envoy %.1f vs %.1f (%+.1f), postgres server %+.1f us/req over its idle rate\n",
			tw, bb[kindBBTollway], tw-bb[kindBBTollway], env, bb[kindBBEnvoy], env-bb[kindBBEnvoy], over(one, kindPostgres))
	}
	if pg := perReq[pathPG]; pg != nil {
		tw := over(pg, kindATollway) + over(pg, kindBCTollway)
		env := over(pg, kindAEnvoy) + over(pg, kindBCEnvoy)
		fmt.Fprintf(w, "postgres (%d replicas) vs bbolt: their Tollways %.1f vs %.1f us/req (%+.1f), their Envoys %.1f vs %.1f (%+.1f), postgres server %+.1f us/req over its idle rate\n",
			clusterReplicas, tw, bb[kindBBTollway], tw-bb[kindBBTollway], env, bb[kindBBEnvoy], env-bb[kindBBEnvoy], over(pg, kindPostgres))
	}
	perSecond := func(us float64) float64 {
		return us * float64(cr.res[pathBB].requests) / m.took[pathBB].Seconds() / 1e3
	}
	bg := bb[kindATollway] + bb[kindAEnvoy] + bb[kindBCTollway] + bb[kindBCEnvoy] + bb[kindPostgres]
	bgx := bb[kindBBxTollway] + bb[kindBBxEnvoy]
	fmt.Fprintf(w, "background while bbolt serves: the %d replicas and the server burn %.1f us per bbolt request (%.1f ms of CPU a second), bbolt x3's other two gateways %.1f (%.1f ms a second)\n",
		clusterReplicas, bg, perSecond(bg), bgx, perSecond(bgx))
	reportSameTopologyCPU(w, perReq)
}

// reportSameTopologyCPU sets bbolt x3's serving processes against the bbolt pair's (the
// spreading) and the replicas' against bbolt x3's (the store, three pairs each side). A
// process's serving cost is its CPU on a path less what it burns in the direct path's turns,
// when every gateway idles.
func reportSameTopologyCPU(w io.Writer, perReq map[string]map[string]float64) {
	idle, bb, x3, pg := perReq[pathDirect], perReq[pathBB], perReq[pathBBx3], perReq[pathPG]
	if idle == nil || bb == nil || x3 == nil {
		return
	}
	serving := func(p map[string]float64, kinds ...string) (v float64) {
		for _, k := range kinds {
			v += p[k] - idle[k]
		}
		return v
	}
	x3Tw, x3Env := serving(x3, kindBBTollway, kindBBxTollway), serving(x3, kindBBEnvoy, kindBBxEnvoy)
	tw, env := serving(bb, kindBBTollway), serving(bb, kindBBEnvoy)
	fmt.Fprintf(w, "bbolt x3 vs bbolt (the spreading, the same store; over the direct turns' idle): their Tollways %.1f vs %.1f us/req (%+.1f), their Envoys %.1f vs %.1f (%+.1f)\n",
		x3Tw, tw, x3Tw-tw, x3Env, env, x3Env-env)
	if pg == nil {
		return
	}
	pgTw, pgEnv := serving(pg, kindATollway, kindBCTollway), serving(pg, kindAEnvoy, kindBCEnvoy)
	srv, srvX3 := serving(pg, kindPostgres), serving(x3, kindPostgres)
	fmt.Fprintf(w, "postgres vs bbolt x3 (the store, %d pairs each side; over the direct turns' idle): their Tollways %.1f vs %.1f us/req (%+.1f), their Envoys %.1f vs %.1f (%+.1f), postgres server %.1f vs %.1f (%+.1f); in all %+.1f us/req\n",
		clusterReplicas, pgTw, x3Tw, pgTw-x3Tw, pgEnv, x3Env, pgEnv-x3Env, srv, srvX3, srv-srvX3, (pgTw+pgEnv+srv)-(x3Tw+x3Env+srvX3))
}

func shortKind(k string) string {
	switch k {
	case kindBBTollway:
		return "bb-tw"
	case kindBBEnvoy:
		return "bb-envoy"
	case kindBBxTollway:
		return "bb-bc-tw"
	case kindBBxEnvoy:
		return "bb-bc-envoy"
	case kindATollway:
		return "a-tw"
	case kindAEnvoy:
		return "a-envoy"
	case kindBCTollway:
		return "bc-tw"
	case kindBCEnvoy:
		return "bc-envoy"
	case kindPostgres:
		return "pg"
	}
	return "bench"
}

func kindLegend() string {
	s := ""
	for i, k := range clusterKinds {
		if i > 0 {
			s += ", "
		}
		s += shortKind(k) + " = " + k
	}
	return s
}
