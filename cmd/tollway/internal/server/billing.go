package server

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/postgres"
	"github.com/tollway/tollway/store/settle"
	"github.com/tollway/tollway/store/spool"
)

// newSettler moves settled requests from the request path to the store. The in-memory ledger is
// already debited when a record is queued, so limits hold at once; the store's settler makes the
// record durable with group commit within about settle.Window, off the response's path.
// Ids in its logs are cut short: a client chooses its request id.
func newSettler(log *slog.Logger, st store.Store) store.Recorder {
	return bbolt.NewSettler(st.(*bbolt.Store), settle.Window, settlerHooks(log))
}

// openSpool opens the replica's spool of usage records (driver postgres), bills the holds its
// last stop left and ships everything it holds, so the balances read next include them.
func openSpool(log *slog.Logger, path string, pg *postgres.Store) (*spool.Spool, error) {
	sp, err := spool.Open(spool.Options{Path: path, Hooks: settlerHooks(log), Log: log}, pg)
	if err != nil {
		return nil, err
	}
	if n, err := sp.SettleHolds(store.EstimateGatewayRestart); err != nil {
		log.Error("the requests cut by the last stop could not be billed now (their holds stay in the spool for the next start)", "spool", path, "error", err)
	} else if n > 0 {
		log.Warn("requests cut by the last stop billed as estimates", "requests", n, "estimate_reason", store.EstimateGatewayRestart)
	}
	if err := sp.Drain(spoolDrainAtStart); err != nil {
		sp.CloseWithin(0)
		return nil, fmt.Errorf("the spool %s holds usage records the database did not take (they stay there; start again once it does): %w", path, err)
	}
	log.Info("store: usage records spool", "path", path)
	return sp, nil
}

// spoolDrainAtStart bounds shipping what the last run left before the ledger is read.
const spoolDrainAtStart = 30 * time.Second

// settlerHooks log what the books must not hide.
func settlerHooks(log *slog.Logger) store.SettlerHooks {
	return store.SettlerHooks{
		NotStored: func(rec store.UsageRecord, err error) {
			// The ledger in memory was debited; the durable record failed. Loud, since the books
			// would disagree after a restart.
			log.Error("USAGE RECORD NOT STORED", "request_id", store.ShortID(rec.RequestID), "account", store.ShortID(rec.Account),
				"key_id", store.ShortID(rec.KeyID), "cost", store.ShortID(rec.Cost.String()), "error", err)
		},
		Stalled: func(err error, queued int, retryIn time.Duration) {
			log.Error("STORE CANNOT COMMIT: usage records are held until it can (check the disk or the database)", "error", err, "queued", queued, "retry_in", retryIn)
		},
	}
}

// storeChanged logs the store's outages: loud when one starts (billable work is refused from
// then on), and when it ends.
func storeChanged(log *slog.Logger) func(now, was *store.Outage) {
	return func(now, was *store.Outage) {
		if now != nil {
			log.Error("STORE UNAVAILABLE: billable requests, task creates and paid requests are refused with 503 store_unavailable until it recovers; what was answered is kept and written then",
				"cause", now.Cause, "error", now.Err)
			return
		}
		log.Warn("store available again: billable requests are served", "was", was.Cause, "outage", time.Since(was.Since).Round(time.Millisecond).String())
	}
}

// settleCut bills the requests a stop cut before they settled (a crash, kill -9): each left a
// durable hold, settled now as an estimate, before the ledger reads the balances.
func settleCut(log *slog.Logger, st store.Ledger) {
	n, failed, err := st.SettleHolds(store.EstimateGatewayRestart)
	if err != nil {
		// Their holds stay on disk and are billed at the next start.
		log.Error("the requests cut by the last stop could not be billed now (their holds are kept for the next start)", "error", err)
	}
	if n > 0 {
		log.Warn("requests cut by the last stop billed as estimates", "requests", n, "estimate_reason", store.EstimateGatewayRestart)
	}
	for _, err := range failed {
		log.Error("USAGE RECORD NOT STORED: a request cut by the last stop", "error", err)
	}
}

// loadLedger builds the in-memory ledger from the store: balances and this month's spend per key;
// known is the accounts it holds (changes.go adds those other replicas create).
func loadLedger(st store.Store, now time.Time) (l *billing.Ledger, known map[string]bool, err error) {
	accounts, err := st.Accounts()
	if err != nil {
		return nil, nil, fmt.Errorf("load accounts: %w", err)
	}
	month := now.UTC().Format("2006-01")
	spend, err := st.MonthSpend(month)
	if err != nil {
		return nil, nil, fmt.Errorf("load month spend: %w", err)
	}
	balances := make(map[string]decimal.Decimal, len(accounts))
	known = make(map[string]bool, len(accounts))
	for _, a := range accounts {
		balances[a.ID], known[a.ID] = a.Balance, true
	}
	return billing.NewLedger(balances, spend, month), known, nil
}

func newBilling(l *billing.Ledger, s store.Recorder) *extproc.Billing {
	return &extproc.Billing{Ledger: l, Record: s.Record, Hold: s.Hold, End: s.End, Now: time.Now}
}
