package main

// The cluster (-scenarios cluster): what the shared Postgres store costs a request. A private
// PostgreSQL server (store/postgres/pgtest: Debian's initdb and pg_ctl, a free loopback port),
// three billing-on replicas on one database, each with its own Envoy, and a billing-on Tollway
// on bbolt; the same fixed-rate load goes round-robin across the replicas, at the bbolt gateway
// and straight to the provider, the paths taking turns in rounds. The replicas admit against
// their leased slices and spool records locally, so the request path never waits on the
// database: their added latency is held to bbolt's (+0.10 ms at p50). Both stores are measured
// in both topologies, in the same rounds: three bbolt gateways (the bbolt path's and two more,
// each its own file and Envoy) taking the whole rate round-robin (bbolt x3) as the replicas do,
// and one replica alone taking it (postgres x1) as the bbolt gateway does. So the store's cost
// is read at the topology, three pairs each side (postgres - bbolt x3: the target), and
// at one pair each side (postgres x1 - bbolt), apart from the cost of spreading the load over
// three Envoy+Tollway pairs on the same cores (bbolt x3 - bbolt), which postgres - bbolt mixes in.
// Every process's CPU is read over each path's turns (clustercpu.go): CPU time holds up where
// latency on a shared host does not, and names the process a gap comes from.
// Then every record served
// must reach the database (shipped), the database's transactions over the load show there is
// no write per request, and the money path alone (ext_proc, no Envoy) of one replica gives its
// settled-and-shipped requests per second (target >= 5,000).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollway/tollway/store/postgres/pgtest"
	"github.com/tollway/tollway/test/fakeupstream"
)

// targetClusterP50 is what the Postgres store may add at p50 over bbolt, in the same run.
const targetClusterP50 = 100 * time.Microsecond

const (
	clusterReplicas = 3
	clusterDB       = "tollway_bench"
	clusterIdle     = 3 * time.Second // the database's idle transactions are counted this long
)

// The cluster's paths: the three replicas round-robin, the first of them alone, and three bbolt
// gateways round-robin (the "bbolt" path's first).
const (
	pathBB    = "bbolt"
	pathBBx3  = "bbolt x3"
	pathPG    = "postgres"
	pathPGOne = "postgres x1"
)

// clusterPaths are the paths the cluster's rounds take turns in, by label (-cluster-paths
// picks some: a longer look at two of them).
var clusterPaths = []string{pathDirect, pathBB, pathBBx3, pathPG, pathPGOne}

// clusterRun is what the cluster scenario measured.
type clusterRun struct {
	res               map[string]*result
	served, failed    int64          // by the replicas, whole run (probes, warm-ups, load)
	shipped           int64          // records in the database once shipped
	shipAfter         time.Duration  // from the load's end until every served record was in the database
	commits, loadReqs int64          // the database's transactions from the first round until all was shipped, and the replicas' requests
	span              time.Duration  // what commits spans
	idleCommits       int64          // its transactions over clusterIdle without load
	money             *settleResult  // one replica's money path alone
	bboltChecks       []*recordCheck // each bbolt gateway's records (its own file)
	cpu               *cpuMeter      // CPU of every process over each path's turns
	err               error
}

// startPostgres starts the private server, binaries from pgBin ("" : Debian's newest).
func startPostgres(pgBin string) (*pgtest.Server, string, error) {
	if pgBin != "" {
		if err := os.Setenv(pgtest.BinEnv, pgBin); err != nil {
			return nil, "", err
		}
	}
	srv, err := pgtest.Start()
	if err != nil {
		return nil, "", err
	}
	if err := srv.Create(clusterDB); err != nil {
		_ = srv.Stop()
		return nil, "", err
	}
	return srv, srv.URL(clusterDB), nil
}

// xactCommits reads the database's committed transactions (pg_stat_database). Backends
// publish their counts within about a second: callers wait that long before reading.
func xactCommits(ctx context.Context, dsn string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, "select xact_commit from pg_stat_database where datname = $1", clusterDB).Scan(&n)
	return n, err
}

func runCluster(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	bbN := 1
	if slices.Contains(o.clusterPaths, pathBBx3) {
		bbN = clusterReplicas
	}
	fmt.Fprintf(stderr, "bench: cluster: starting PostgreSQL, %d replicas and %d bbolt gateway(s) ...\n", clusterReplicas, bbN)
	srv, dsn, err := startPostgres(o.pgBin)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer srv.Stop()
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: o.chunkDelay, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	body := fmt.Sprintf(tollwayBody, fake.URL(), modelID, true)
	var replicas []*target
	for i := range clusterReplicas {
		name := fmt.Sprintf("replica-%c", 'a'+i)
		env := append([]string{"TOLLWAY_STORE_DRIVER=postgres", "TOLLWAY_STORE_DSN=" + dsn, "TOLLWAY_REPLICA_NAME=" + name}, o.tollwayEnv...)
		tw, err := startTollwayConfig(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, "cluster", name), body, true, env)
		if err != nil {
			return fmt.Errorf("cluster: %s: %w", name, err)
		}
		defer tw.stop()
		replicas = append(replicas, &target{name: pathPG, baseURL: tw.baseURL, tw: tw, client: newClient(o.timeout)})
	}
	// One account and key for the gateway, made on the first replica, in force on all.
	key, err := replicas[0].tw.newKey(ctx)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	for _, r := range replicas {
		r.auth, r.client = key, replicas[0].client
		if err := probe(ctx, r, chatBody); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		r.served++
	}
	// The bbolt gateways: the bbolt path's, and for bbolt x3 two more, each its own file, Envoy
	// and funded key, the same config; all sent through the first one's client, as the replicas.
	var bbs []*target
	for i := range bbN {
		name := pathBB
		if i > 0 {
			name = fmt.Sprintf("bbolt-%c", 'a'+i)
		}
		tw, t, err := startTollwayTarget(ctx, o.tollwayBin, o.envoyBin, filepath.Join(dir, "cluster", name), fake.URL(), true, o.tollwayEnv, name)
		if err != nil {
			return fmt.Errorf("cluster: bbolt gateway %s: %w", name, err)
		}
		defer tw.stop()
		bbs = append(bbs, t)
	}
	direct := &target{name: pathDirect, baseURL: fake.URL(), auth: providerKey}
	direct.client, bbs[0].client = newClient(o.timeout), newClient(o.timeout)
	for _, t := range bbs[1:] {
		t.client = bbs[0].client
	}
	for _, t := range append([]*target{direct}, bbs...) {
		if err := probe(ctx, t, chatBody); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		t.served++
	}
	cr := measureCluster(ctx, o, dsn, replicas, bbs, direct, clusterProcs(replicas, bbs, srv.PID()), stderr)
	reportCluster(stdout, o, cr)
	return cr.err
}

// measureCluster runs the rounds, then the shipping check and the money path.
func measureCluster(ctx context.Context, o *options, dsn string, replicas, bbs []*target, direct *target, procs []kindProc, stderr io.Writer) *clusterRun {
	bb := bbs[0]
	cr := &clusterRun{res: map[string]*result{}, cpu: newCPUMeter(procs)}
	pgServed := func() (s, f int64) {
		for _, r := range replicas {
			s, f = s+r.served, f+r.failed
		}
		return
	}
	load := func(path string, d time.Duration) *result {
		switch path {
		case pathDirect:
			r := attackChat(ctx, direct, chatBody, o.clusterRate, d)
			direct.tally(r)
			return r
		case pathBB:
			r := attackChat(ctx, bb, chatBody, o.clusterRate, d)
			bb.tally(r)
			return r
		case pathBBx3: // each gateway's records are its own: each counts its part
			r := attackAcross(ctx, bbs, "/chat/completions", chatBody, `"chat.completion"`, o.clusterRate, d)
			tallyEach(bbs, r)
			return r
		case pathPGOne: // the first replica alone, the other two idle
			r := attackChat(ctx, replicas[0], chatBody, o.clusterRate, d)
			replicas[0].tally(r)
			return r
		}
		r := attackAcross(ctx, replicas, "/chat/completions", chatBody, `"chat.completion"`, o.clusterRate, d)
		replicas[0].tally(r) // the database's records are the gateway's, whichever replica served
		return r
	}
	seg := o.clusterDuration / time.Duration(o.rounds)
	for _, p := range o.clusterPaths {
		if o.warmup > 0 {
			load(p, o.warmup)
		}
	}
	time.Sleep(1500 * time.Millisecond) // the statistics' flush interval: the warm-up's commits are counted before
	c0, err := xactCommits(ctx, dsn)
	t0 := time.Now()
	if err != nil {
		cr.err = fmt.Errorf("cluster: pg_stat_database: %w", err)
		return cr
	}
	for round := range o.rounds {
		for _, p := range o.clusterPaths {
			if ctx.Err() != nil {
				cr.err = ctx.Err()
				return cr
			}
			fmt.Fprintf(stderr, "bench: cluster %s, round %d/%d ...\n", p, round+1, o.rounds)
			cr.cpu.turn(p, func() { cr.res[p] = cr.res[p].merge(load(p, seg)) })
			time.Sleep(300 * time.Millisecond)
		}
	}
	end := time.Now()
	for _, p := range []string{pathPG, pathPGOne} {
		if r := cr.res[p]; r != nil {
			cr.loadReqs += int64(r.requests)
		}
	}
	served, failed := pgServed()
	got, reached, err := waitRecords(ctx, replicas[0].tw, served, o.settleWait)
	cr.served, cr.failed, cr.shipped = served, failed, got
	switch {
	case err != nil:
		cr.err = fmt.Errorf("cluster: %w", err)
	case reached.IsZero():
		cr.err = fmt.Errorf("cluster: %d of %d served records in the database %s after the load", got, served, o.settleWait)
	case got > served+failed:
		cr.err = fmt.Errorf("cluster: %d records in the database for %d served (+%d failed) requests", got, served, failed)
	default:
		cr.shipAfter = max(0, reached.Sub(end))
	}
	// Commits over the whole measured time (all paths' rounds and the shipping: the replicas'
	// background work goes on in the other paths' turns too), then the idle rate to set them against.
	time.Sleep(1500 * time.Millisecond)
	c1, err1 := xactCommits(ctx, dsn)
	cr.span = time.Since(t0)
	time.Sleep(clusterIdle)
	c2, err2 := xactCommits(ctx, dsn)
	if err1 == nil && err2 == nil {
		cr.commits, cr.idleCommits = c1-c0, c2-c1
	}
	for _, t := range bbs {
		c := checkRecords(ctx, t, o.settleWait)
		cr.bboltChecks = append(cr.bboltChecks, c)
		if cr.err == nil && c.err != nil {
			cr.err = c.err
		}
	}

	// The money path of one replica: settled here, spooled, shipped to the database.
	fmt.Fprintf(stderr, "bench: cluster: the money path alone of one postgres replica at %d req/s ...\n", o.moneyRate)
	one := &target{name: pathPG, tw: replicas[0].tw, auth: replicas[0].auth}
	one.served, one.failed = pgServed()
	cr.money = runMoneyPath(ctx, o, one, []proc{{"bench (as Envoy)", os.Getpid()}, {tollwayProc, one.tw.Pid()}})
	cr.money.who = "postgres replica (spool + shipping)"
	switch r := cr.money.res; {
	case cr.err != nil:
	case cr.money.err != nil:
		cr.err = fmt.Errorf("cluster money path: %w", cr.money.err)
	case r != nil && r.sentErrRate() > maxErrRate: // as the settle scenario's: shed load is reported, not failed
		cr.err = fmt.Errorf("cluster money path error rate %.2f%% of the requests sent > %.1f%%", 100*r.sentErrRate(), 100*maxErrRate)
	}
	return cr
}

func reportCluster(w io.Writer, o *options, cr *clusterRun) {
	fmt.Fprintf(w, "\n== cluster: %d billing-on replicas on one PostgreSQL database (round-robin) vs billing-on Tollway on bbolt (one gateway, and %d round-robin), %d req/s, %s per path in %d rounds ==\n",
		clusterReplicas, clusterReplicas, o.clusterRate, o.clusterDuration, o.rounds)
	fmt.Fprintf(w, "%-22s %8s %8s %9s %9s %9s %9s  %s\n", "path", "sent/s", "ok/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors")
	for _, p := range o.clusterPaths {
		if r := cr.res[p]; r != nil {
			fmt.Fprintf(w, "%-22s %8.1f %8.1f %9s %9s %9s %9s  %s\n", p, r.sentRate, r.throughput,
				ms(pct(r.lat, .5)), ms(pct(r.lat, .9)), ms(pct(r.lat, .99)), ms(pct(r.lat, 1)), errCell(r))
		}
	}
	fmt.Fprintf(w, "(%s: the first replica alone taking the whole %d req/s, the other two idle; %s: the bbolt gateway and two more, each its own file and Envoy, taking it round-robin as the replicas do; all in the same rounds)\n",
		pathPGOne, o.clusterRate, pathBBx3)
	reportClusterGaps(w, cr)
	reportClusterCPU(w, o, cr)
	fmt.Fprintf(w, "records shipped to the database: %d for %d requests served by the replicas (%d failed), all shipped %s after the load: %s\n",
		cr.shipped, cr.served, cr.failed, cr.shipAfter.Round(time.Millisecond), verdict(cr.shipped >= cr.served && cr.shipped <= cr.served+cr.failed))
	if cr.loadReqs > 0 && cr.span > 0 {
		idleRate := perSec(cr.idleCommits, clusterIdle)
		extra := float64(cr.commits) - idleRate*cr.span.Seconds()
		fmt.Fprintf(w, "database transactions (pg_stat_database xact_commit): %d over the rounds and the shipping (%s, %.0f/s) for %d requests sent to the replicas; idle %.0f/s; beyond idle %.3f per request\n",
			cr.commits, cr.span.Round(time.Millisecond), perSec(cr.commits, cr.span), cr.loadReqs, idleRate, extra/float64(cr.loadReqs))
	}
	if len(cr.bboltChecks) > 0 {
		reportRecords(w, cr.bboltChecks)
	}
	if cr.money != nil {
		reportSettle(w, o, cr.money)
	}
	if cr.err != nil {
		fmt.Fprintf(w, "ERROR: %v\n", cr.err)
	}
}

// reportClusterGaps prints what each path adds over direct, the differences that tell the
// store's cost from the topology's, the target and where a gap comes from.
func reportClusterGaps(w io.Writer, cr *clusterRun) {
	has := func(p string) bool { r := cr.res[p]; return r != nil && len(r.lat) > 0 }
	if !has(pathDirect) || !has(pathBB) {
		return
	}
	d := cr.res[pathDirect]
	add := func(p string, q float64) time.Duration { return pct(cr.res[p].lat, q) - pct(d.lat, q) }
	fmt.Fprint(w, "added over direct:")
	for _, p := range []string{pathBB, pathBBx3, pathPG, pathPGOne} {
		if has(p) {
			fmt.Fprintf(w, "  %s p50 %s p99 %s ms;", p, plusMS(add(p, .5)), plusMS(add(p, .99)))
		}
	}
	fmt.Fprintln(w)
	diff := func(a, b, what string) {
		if has(a) && has(b) {
			fmt.Fprintf(w, "%s - %s: p50 %s ms (ratio of added %s), p99 %s ms (ratio %s)  [%s]\n", a, b,
				plusMS(add(a, .5)-add(b, .5)), ratio(add(a, .5), add(b, .5)), plusMS(add(a, .99)-add(b, .99)), ratio(add(a, .99), add(b, .99)), what)
		}
	}
	diff(pathPG, pathBB, "three replicas against one gateway: the store and the topology mixed")
	diff(pathPGOne, pathBB, "the store, one Envoy+Tollway pair each side")
	diff(pathBBx3, pathBB, fmt.Sprintf("the spreading: the same store over %d pairs", clusterReplicas))
	diff(pathPG, pathBBx3, fmt.Sprintf("the store at the issue's topology: %d pairs each side", clusterReplicas))
	if !has(pathPG) {
		return
	}
	// The target is set against bbolt x3: the same topology, so the store's cost alone. Without
	// it (-cluster-paths) the one gateway stands in, the topology mixed in.
	base, on := pathBBx3, fmt.Sprintf("%d gateways round-robin each side", clusterReplicas)
	if !has(base) {
		base, on = pathBB, "one bbolt gateway: bbolt x3 not run, the topology mixed in"
	}
	gap := add(pathPG, .5) - add(base, .5)
	fmt.Fprintf(w, "target: postgres p50 within +%s ms of %s (%s): %s\n", ms(targetClusterP50), base, on,
		verdict(gap <= targetClusterP50 && cr.res[pathPG].errRate() <= maxErrRate && cr.res[base].errRate() <= maxErrRate))
	whole := add(pathPG, .5) - add(pathBB, .5)
	switch {
	case has(pathBBx3):
		fmt.Fprintln(w, gapSource(whole, add(pathPG, .5)-add(pathBBx3, .5), "postgres - bbolt x3", "bbolt x3 - bbolt"))
	case has(pathPGOne):
		fmt.Fprintln(w, gapSource(whole, add(pathPGOne, .5)-add(pathBB, .5), "postgres x1 - bbolt", "postgres - postgres x1"))
	}
}

// gapSource splits postgres - bbolt at p50 (gap) into the store's part (storeBy: the same
// topology each side) and the rest (spreadBy: the same store, the load spread over three
// Envoy+Tollway pairs on the same cores), and names the larger.
func gapSource(gap, store time.Duration, storeBy, spreadBy string) string {
	spread := gap - store
	from := "the store"
	switch {
	case gap <= 0:
		from = "neither: postgres is not slower than bbolt"
	case spread > store:
		from = fmt.Sprintf("spreading the load over %d Envoy+Tollway pairs", clusterReplicas)
	}
	return fmt.Sprintf("gap at p50: postgres - bbolt %s ms = store (%s) %s ms + spreading over %d Envoy+Tollway pairs (%s) %s ms: it comes from %s (the store's part within +%s ms: %s)",
		plusMS(gap), storeBy, plusMS(store), clusterReplicas, spreadBy, plusMS(spread), from, ms(targetClusterP50), verdict(store <= targetClusterP50))
}
