package postgres_test

import (
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
	"github.com/tollway/tollway/store/spool"
)

// shipBatch is a spool's shipment (spool.Options.MaxBatch's default).
const shipBatch = 2048

// BenchmarkShip is the spool's shipping: batches of shipBatch new records, each batch one
// SettleWith (one transaction), as store/spool ships them; records/s is what a replica ships.
// The records spread over 16 keys of one account, as a busy replica's do.
func BenchmarkShip(b *testing.B) {
	s := open(b, "bench-ship-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	defer s.Close()
	if _, err := s.CreateAccount("acct", decimal.RequireFromString("1000000")); err != nil {
		b.Fatal(err)
	}
	cost := decimal.RequireFromString("0.00000015")
	recs := make([]store.UsageRecord, shipBatch)
	seq := 0
	b.ResetTimer()
	for b.Loop() {
		for i := range recs {
			seq++
			recs[i] = store.UsageRecord{RequestID: "ship-" + strconv.Itoa(seq), KeyID: "key_" + strconv.Itoa(seq%16), Account: "acct",
				Model: "gpt-4o-mini", Provider: "fake", PromptTokens: 100, CompletionTokens: 50, Cost: cost}
		}
		errs, err := s.SettleWith(recs, settle.HoldChanges{})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				b.Fatal(e)
			}
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkSpoolBacklog is a replica's spool shipping a backlog to the database, as after a
// burst of the money path: records (each after its hold, as the gateway writes them) settled
// against this replica's budget slice, from the journal to Postgres; records/s is how fast a
// backlog drains once the load ends.
func BenchmarkSpoolBacklog(b *testing.B) { spoolBacklog(b, 0) }

// BenchmarkSpoolBacklogBusy is BenchmarkSpoolBacklog in a busy process: goroutines keep every
// P running, as a replica's requests do under load, so the shipper waits its turn after each
// round trip to the database.
func BenchmarkSpoolBacklogBusy(b *testing.B) { spoolBacklog(b, 64) }

func spoolBacklog(b *testing.B, busy int) {
	s := open(b, "bench-spool-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	defer s.Close()
	if _, err := s.CreateAccount("acct", decimal.RequireFromString("1000000")); err != nil {
		b.Fatal(err)
	}
	s.SettleAs("r1")
	if g, _, err := s.LeaseBudget("r1", store.AccountBudget("acct"), decimal.RequireFromString("1"), decimal.RequireFromString("0.25")); err != nil || g.IsZero() {
		b.Fatal(g, err)
	}
	const backlog = 20000
	cost := decimal.RequireFromString("0.00000015")
	seq := 0
	for b.Loop() {
		b.StopTimer()
		sp, err := spool.Open(spool.Options{Path: filepath.Join(b.TempDir(), "spool.db"), ShipEvery: time.Hour}, s)
		if err != nil {
			b.Fatal(err)
		}
		// Fill the journal while the shipper waits out its first gather.
		time.Sleep(50 * time.Millisecond)
		var recs []store.UsageRecord
		for range backlog {
			seq++
			recs = append(recs, store.UsageRecord{RequestID: "spool-" + strconv.Itoa(seq), KeyID: "key_1", Account: "acct", Route: "chat",
				Model: "gpt-4o-mini", Provider: "fake", PromptTokens: 100, CompletionTokens: 50, Cost: cost})
		}
		if _, err := sp.SettleWith(recs, settle.HoldChanges{}); err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		for range busy {
			go spin(stop)
		}
		b.StartTimer()
		start := time.Now()
		sp.CloseWithin(time.Minute)
		close(stop)
		b.ReportMetric(float64(backlog)/time.Since(start).Seconds(), "records/s")
	}
}

// spin keeps a P busy in slices of about 50 us until stop.
func spin(stop chan struct{}) {
	for x := 0; ; x++ {
		select {
		case <-stop:
			return
		default:
		}
		for t := time.Now(); time.Since(t) < 50*time.Microsecond; {
			x++
		}
		runtime.Gosched()
	}
}
