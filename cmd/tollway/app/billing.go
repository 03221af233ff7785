package app

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
)

// settler moves settled requests from the request path to the store. The in-memory ledger is
// already debited when a record is queued, so limits hold at once; the store's group commit
// (bbolt Batch) makes the record durable within a few milliseconds, off the response's path.
type settler struct {
	log   *slog.Logger
	store *store.Store
	ch    chan store.UsageRecord
	wg    sync.WaitGroup
}

// settleWorkers is how many records wait on one group commit at most per batch round; bbolt
// coalesces their writes into one transaction and one fsync.
const settleWorkers = 256

func newSettler(log *slog.Logger, st *store.Store) *settler {
	s := &settler{log: log, store: st, ch: make(chan store.UsageRecord, 65536)}
	for range settleWorkers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for rec := range s.ch {
				if err := s.store.Settle(rec); err != nil {
					// The ledger in memory was debited; the durable record failed. Loud, since
					// the books would disagree after a restart.
					s.log.Error("USAGE RECORD NOT STORED", "request_id", rec.RequestID, "account", rec.Account, "cost", rec.Cost.String(), "error", err)
				}
			}
		}()
	}
	return s
}

// Record queues rec; when the queue is full it waits (backpressure, never loss).
func (s *settler) Record(rec store.UsageRecord) { s.ch <- rec }

// Close writes everything queued and stops.
func (s *settler) Close() {
	close(s.ch)
	s.wg.Wait()
}

// loadLedger builds the in-memory ledger from the store: balances and this month's spend per key.
func loadLedger(st *store.Store, now time.Time) (*billing.Ledger, error) {
	accounts, err := st.Accounts()
	if err != nil {
		return nil, fmt.Errorf("load accounts: %w", err)
	}
	month := now.UTC().Format("2006-01")
	spend, err := st.MonthSpend(month)
	if err != nil {
		return nil, fmt.Errorf("load month spend: %w", err)
	}
	balances := make(map[string]decimal.Decimal, len(accounts))
	for _, a := range accounts {
		balances[a.ID] = a.Balance
	}
	return billing.NewLedger(balances, spend, month), nil
}

func newBilling(l *billing.Ledger, s *settler) *extproc.Billing {
	return &extproc.Billing{Ledger: l, Record: s.Record, Now: time.Now}
}
