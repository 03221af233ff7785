package main

// The cluster's CPU per request, by process kind: every process of the run (the bbolt gateway's
// Tollway and Envoy, the first replica's, the other two replicas', the PostgreSQL server with
// its backends, the bench with the fake provider) is read over each path's turns, so a path's
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
	kindATollway   = "replica-a tollway"
	kindAEnvoy     = "replica-a envoy"
	kindBCTollway  = "replicas b+c tollway"
	kindBCEnvoy    = "replicas b+c envoy"
	kindPostgres   = "postgres server"
	kindBenchProcs = "bench + provider"
)

var clusterKinds = []string{kindBBTollway, kindBBEnvoy, kindATollway, kindAEnvoy, kindBCTollway, kindBCEnvoy, kindPostgres, kindBenchProcs}

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

// clusterProcs lists the processes of the run by kind; pgPID is the postmaster (0: a server
// not started here, left out), whose children are its backends.
func clusterProcs(replicas []*target, bb *target, pgPID int) []kindProc {
	ps := []kindProc{
		{kind: kindBBTollway, p: proc{tollwayProc, bb.tw.Pid()}}, {kind: kindBBEnvoy, p: proc{"envoy", bb.tw.EnvoyPID}},
		{kind: kindBenchProcs, p: proc{selfProc, os.Getpid()}},
	}
	for i, r := range replicas {
		tk, ek := kindATollway, kindAEnvoy
		if i > 0 {
			tk, ek = kindBCTollway, kindBCEnvoy
		}
		ps = append(ps, kindProc{kind: tk, p: proc{tollwayProc, r.tw.Pid()}}, kindProc{kind: ek, p: proc{"envoy", r.tw.EnvoyPID}})
	}
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
// the run) and splits postgres x1 - bbolt (the store's part) by process kind.
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
	bb := perReq["bbolt"]
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
	bg := bb[kindATollway] + bb[kindAEnvoy] + bb[kindBCTollway] + bb[kindBCEnvoy] + bb[kindPostgres]
	fmt.Fprintf(w, "background while bbolt serves: the %d replicas and the server burn %.1f us per bbolt request (%.1f ms of CPU a second)\n",
		clusterReplicas, bg, bg*float64(cr.res["bbolt"].requests)/m.took["bbolt"].Seconds()/1e3)
}

func shortKind(k string) string {
	switch k {
	case kindBBTollway:
		return "bb-tw"
	case kindBBEnvoy:
		return "bb-envoy"
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
