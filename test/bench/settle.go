package main

// Settlement: every billed request is settled in memory on the request path and written to the
// store (one usage record, one debit) by the gateway's settler through bbolt's group commit, off
// the response's path. These scenarios check that the durable side keeps up and loses nothing.

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/settle"
)

// waitRecords polls the gateway's durable record count until it reaches want or maxWait passes.
// It returns the last count read and when it first reached want (zero time if it did not).
func waitRecords(ctx context.Context, tw *tollway, want int64, maxWait time.Duration) (got int64, reached time.Time, err error) {
	deadline := time.Now().Add(maxWait)
	for {
		got, err = tw.usageRecords(ctx)
		if err != nil {
			return got, time.Time{}, err
		}
		if got >= want {
			return got, time.Now(), nil
		}
		if time.Now().After(deadline) {
			return got, time.Time{}, nil
		}
		select {
		case <-ctx.Done():
			return got, time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// recordCheck compares a gateway's durable usage records with the requests it served.
type recordCheck struct {
	path           string
	billing        bool
	served, failed int64
	records        int64
	err            error
}

// checkRecords waits for the settler to drain, then checks one record per successful billed
// request: no fewer (a served request went unbilled or its record was lost) and no more than
// the failed requests can explain (a request the client gave up on may still have been served).
// With billing off there must be none.
func checkRecords(ctx context.Context, t *target, maxWait time.Duration) *recordCheck {
	c := &recordCheck{path: t.name, billing: t.tw.billing, served: t.served, failed: t.failed}
	want := c.served
	if !c.billing {
		want, maxWait = 0, 0
	}
	got, _, err := waitRecords(ctx, t.tw, want, maxWait)
	if err == nil && got >= want {
		// Reached: look once more a little later, so a late surplus is seen too.
		time.Sleep(250 * time.Millisecond)
		got, err = t.tw.usageRecords(ctx)
	}
	c.records = got
	switch {
	case err != nil:
		c.err = fmt.Errorf("%s: %w", label(t.name), err)
	case !c.billing && got != 0:
		c.err = fmt.Errorf("%s: %d usage records with billing off, want 0", label(t.name), got)
	case c.billing && got < c.served:
		c.err = fmt.Errorf("%s: %d durable usage records after %s, want %d (one per successful request): %d missing",
			label(t.name), got, maxWait, c.served, c.served-got)
	case c.billing && got > c.served+c.failed:
		c.err = fmt.Errorf("%s: %d durable usage records, want %d (%d successful + at most %d failed requests): %d extra",
			label(t.name), got, c.served, c.served, c.failed, got-c.served-c.failed)
	}
	return c
}

func reportRecords(w io.Writer, checks []*recordCheck) {
	fmt.Fprintf(w, "\n== durable usage records (GET /admin/v1/usage) vs successful requests sent, whole run ==\n")
	fmt.Fprintf(w, "%-22s %10s %10s %10s  %s\n", "gateway", "ok sent", "failed", "records", "check")
	for _, c := range checks {
		verdict := "OK: one record per successful request"
		switch {
		case c.err != nil:
			verdict = "ERROR: " + c.err.Error()
		case !c.billing:
			verdict = "OK: none with billing off"
		case c.records > c.served:
			verdict = fmt.Sprintf("OK: %d failed requests were served and billed all the same", c.records-c.served)
		}
		fmt.Fprintf(w, "%-22s %10d %10d %10d  %s\n", label(c.path), c.served, c.failed, c.records, verdict)
	}
}

// settleResult is Tollway with billing on driven hard, and the durable records it wrote.
type settleResult struct {
	rate     int    // offered requests per second
	direct   bool   // ext_proc driven by the bench, no Envoy or provider
	who      string // the gateway, as the report names it ("": billing-on Tollway)
	res      *result
	window   time.Duration // from the first request sent to the last response
	before   int64         // records when the load began
	atEnd    int64         // records when the last response arrived
	final    int64         // records once caught up (or when the wait gave up)
	catchUp  time.Duration // from the last response until every served request was durable
	caughtUp bool
	cpu      map[string]time.Duration
	counters []counterDelta
	err      error
}

// runSettle drives billing-on Tollway at the settle rate (non-streaming) and counts the durable
// records written over the window.
func runSettle(ctx context.Context, o *options, t *target, ps []proc, envoyAdmin string) *settleResult {
	sr := &settleResult{cpu: map[string]time.Duration{}, rate: o.settleRate}
	if w := min(o.warmup, time.Second); w > 0 {
		t.tally(attackChat(ctx, t, chatBody, o.settleRate, w))
	}
	return measureSettle(ctx, o, t, ps, envoyAdmin, sr, func() *result {
		r := attackChat(ctx, t, chatBody, o.settleRate, o.settleDuration)
		t.tally(r)
		return r
	})
}

// measureSettle runs load from a drained settler and counts the durable records written during
// it and until every served request is durable, with the processes' CPU over the load.
func measureSettle(ctx context.Context, o *options, t *target, ps []proc, envoyAdmin string, sr *settleResult, load func() *result) *settleResult {
	// Start from a drained settler, so the window's records are the window's requests.
	before, _, err := waitRecords(ctx, t.tw, t.served, o.settleWait)
	if err != nil {
		sr.err = err
		return sr
	}
	sr.before = before
	var counters map[string]int64
	if o.envoyStats && envoyAdmin != "" {
		counters = envoyCounters(envoyAdmin)
	}
	c0 := cpuSnapshot(ps)
	start := time.Now()
	sr.res = load()
	end := time.Now()
	sr.window = end.Sub(start)
	if sr.atEnd, err = t.tw.usageRecords(ctx); err != nil {
		sr.err = err
		return sr
	}
	for i, c := range cpuSnapshot(ps) {
		sr.cpu[ps[i].name] = c - c0[i]
	}
	if counters != nil {
		sr.counters = counterDeltas(counters, envoyCounters(envoyAdmin))
	}
	want := before + int64(len(sr.res.lat))
	final, reached, err := waitRecords(ctx, t.tw, want, o.settleWait)
	sr.final = final
	switch {
	case err != nil:
		sr.err = err
	case reached.IsZero():
		sr.err = fmt.Errorf("%d of %d records durable %s after the load", final-before, want-before, o.settleWait)
	default:
		sr.caughtUp, sr.catchUp = true, max(0, reached.Sub(end))
	}
	return sr
}

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func reportSettle(w io.Writer, o *options, s *settleResult) {
	who := cmpStr(s.who, label(pathTollway))
	if s.direct {
		fmt.Fprintf(w, "\n== settlement throughput, the money path alone: %s's ext_proc driven over its gRPC socket as Envoy would (auth, hold, meter, settle, durable record; no Envoy, no provider), %d req/s for %s ==\n",
			who, s.rate, o.settleDuration)
	} else {
		fmt.Fprintf(w, "\n== settlement throughput, end to end: %s, non-streaming, %d req/s for %s (durability on: bbolt group commit, fsync) ==\n",
			who, s.rate, o.settleDuration)
	}
	r := s.res
	if r == nil {
		fmt.Fprintf(w, "not run: %v\n", s.err)
		return
	}
	fmt.Fprintf(w, "%8s %8s %9s %9s %9s %9s  %s\n", "sent/s", "ok/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors")
	fmt.Fprintf(w, "%8.1f %8.1f %9s %9s %9s %9s  %s\n", r.sentRate, r.throughput,
		ms(pct(r.lat, .5)), ms(pct(r.lat, .9)), ms(pct(r.lat, .99)), ms(pct(r.lat, 1)), errCell(r))
	for msg, n := range r.errSamples {
		fmt.Fprintf(w, "  error x%d: %s\n", n, msg)
	}
	if n := shedNote(r); n != "" {
		fmt.Fprintf(w, "  %s: offered above what the path takes, not an error of the gateway\n", n)
	}
	ok := int64(len(r.lat))
	during := s.atEnd - s.before
	fmt.Fprintf(w, "durable records during the load:  %d in %s = %.0f settled/s (%d requests succeeded)\n",
		during, s.window.Round(time.Millisecond), perSec(during, s.window), ok)
	if s.caughtUp {
		total := s.final - s.before
		fmt.Fprintf(w, "all %d durable %s after the last response: %.0f settled/s over first request .. last record\n",
			total, s.catchUp.Round(time.Millisecond), perSec(total, s.window+s.catchUp))
		fmt.Fprintf(w, "  (settled/s follows the offered rate while the settler keeps up; raise -settle-rate to look for the ceiling)\n")
	} else {
		fmt.Fprintf(w, "NOT caught up: %v\n", s.err)
	}
	if s.direct {
		rate := perSec(s.final-s.before, s.window+s.catchUp)
		fmt.Fprintf(w, "target >= %d settled requests/s on %d cores: %.0f settled/s, %s\n", targetSettled, runtime.NumCPU(), rate,
			verdict(s.err == nil && s.caughtUp && r.sentErrRate() <= maxErrRate && rate >= targetSettled))
	}
	var total time.Duration
	var parts []string
	for _, n := range []string{tollwayProc, "tollway's envoy", selfProc, "bench (as Envoy)"} {
		if c, has := s.cpu[n]; has {
			total += c
			parts = append(parts, fmt.Sprintf("%s %.0f", n, float64(c.Microseconds())/float64(max(1, ok))))
		}
	}
	fmt.Fprintf(w, "CPU us per successful request: %s; total %.0f (budget %d cores = %.0f us/req at %d req/s)\n", strings.Join(parts, ", "),
		float64(total.Microseconds())/float64(max(1, ok)), runtime.NumCPU(), float64(runtime.NumCPU())*1e6/float64(s.rate), s.rate)
	for _, c := range s.counters {
		if c.name == "http.public.ext_proc.stream_msgs_sent" || c.name == "cluster.tollway_extproc.upstream_cx_total" {
			fmt.Fprintf(w, "envoy %s: %d (%.3f/req)\n", c.name, c.delta, float64(c.delta)/float64(max(1, r.requests)))
		}
	}
}

// storeResult is the gateway's settler alone: records queued by many goroutines, made durable
// in grouped transactions.
type storeResult struct {
	producers int
	n         int64
	elapsed   time.Duration // from the first record queued to the last one durable
	stats     store.SettlerStats
	records   int
	err       error
}

// storeSettle queues unique records into a bbolt.Settler on a fresh store from producers
// goroutines for d, closes it (everything queued becomes durable) and checks the books: one
// record per request and the balance debited by exactly their cost.
func storeSettle(ctx context.Context, dir string, producers int, d time.Duration) *storeResult {
	sr := &storeResult{producers: producers}
	st, err := bbolt.Open(dir + "/bench.db")
	if err != nil {
		sr.err = err
		return sr
	}
	defer st.Close()
	credits, cost := decimal.RequireFromString(benchCredits), decimal.RequireFromString("0.00000015")
	if _, err := st.CreateAccount("acct", credits); err != nil {
		sr.err = err
		return sr
	}
	var (
		mu      sync.Mutex
		firstEr error
		queued  atomic.Int64
		wg      sync.WaitGroup
	)
	q := bbolt.NewSettler(st, settle.Window, store.SettlerHooks{NotStored: func(r store.UsageRecord, err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstEr == nil {
			firstEr = fmt.Errorf("record %s: %w", r.RequestID, err)
		}
	}})
	start := time.Now()
	deadline := start.Add(d)
	for w := range producers {
		wg.Go(func() {
			keyID := "key_" + strconv.Itoa(w%16)
			prefix := "bench-" + strconv.Itoa(w) + "-"
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				q.Record(store.UsageRecord{
					RequestID: prefix + strconv.Itoa(i), KeyID: keyID, Account: "acct",
					Model: modelID, Provider: "fake", PromptTokens: 100, CompletionTokens: 50, Cost: cost,
				})
				queued.Add(1)
			}
		})
	}
	wg.Wait()
	q.Close()
	sr.elapsed = time.Since(start)
	sr.n, sr.stats = queued.Load(), q.Stats()
	if firstEr != nil {
		sr.err = firstEr
		return sr
	}
	if sr.records, err = st.UsageRecordCount(); err != nil {
		sr.err = err
		return sr
	}
	a, err := st.GetAccount("acct")
	switch {
	case err != nil:
		sr.err = err
	case int64(sr.records) != sr.n:
		sr.err = fmt.Errorf("%d records after %d settles", sr.records, sr.n)
	case !a.Balance.Equal(credits.Sub(cost.Mul(decimal.NewFromInt(sr.n)))):
		sr.err = fmt.Errorf("balance %s after %d settles of %s from %s", a.Balance, sr.n, cost, credits)
	}
	return sr
}

func reportStore(w io.Writer, s *storeResult) {
	fmt.Fprintf(w, "\n== store alone: the gateway's settler (one record + debit each, durable: group commit + fsync), %d producers, in process ==\n", s.producers)
	rate := perSec(s.n, s.elapsed)
	fmt.Fprintf(w, "%d records durable in %s = %.0f settles/s   %d commits (%.0f records each)   records on disk %d\n",
		s.n, s.elapsed.Round(time.Millisecond), rate, s.stats.Commits, float64(s.stats.Records)/float64(max(1, s.stats.Commits)), s.records)
	fmt.Fprintf(w, "target >= %d settles/s on %d cores: %s\n", targetStoreSettles, runtime.NumCPU(), verdict(s.err == nil && rate >= targetStoreSettles))
	if s.err != nil {
		fmt.Fprintf(w, "ERROR: %v\n", s.err)
	}
}
