package postgres_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
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
		errs, err := s.SettleWith(recs, bbolt.HoldChanges{})
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
