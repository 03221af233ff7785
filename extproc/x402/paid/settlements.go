package paid

// Settlements finishes the x402 settlements whose outcome was unknown when their result went
// out: the facilitator got /settle and its answer was lost (no answer within
// x402.facilitator_timeout, the connection dropped, a 5xx, an answer that is no verdict, its own
// settlement_pending) or /settle could not even be sent. The payer may have been charged, so the
// result was served (a payer is never charged without it) and the usage record says
// payment.status pending. Here the same authorization is settled again, with backoff, until
// the answer says: it settled (success, or a spent nonce: the first attempt went through), or
// the credential can no longer settle (its validBefore or deadline less than settleMargin
// away), which makes the record unpaid. Each pending settlement is kept in the store from the
// moment it is deferred, so a restart resumes it (Resume).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
)

// Settlement outcomes, as Settlements.Outcome hears them (one per paid request, and once more
// for each pending one when it ends).
const (
	SettleSettled = "settled" // the facilitator settled it (at the request, or later)
	SettleRefused = "refused" // the facilitator refused it: the result was withheld
	SettlePending = "pending" // unknown at the request: the result was served, resolved later
	SettleUnpaid  = "unpaid"  // a pending one that never settled
)

// SettlementStore is what Settlements keeps pending settlements in, and settles the records of
// requests whose own record never reached the store (Resume).
type SettlementStore interface {
	store.Payments
	SettleBatch([]store.UsageRecord) []error
}

const (
	// settleMargin: a facilitator refuses a credential with less than 6 s left (x402's EVM
	// schemes), so past Until minus this nothing can be learned any more.
	settleMargin = 6 * time.Second
	// resettleFirst is the pause before the first new attempt (the first one's transaction
	// may still be mining); it doubles up to resettleMax.
	resettleFirst = time.Second
	resettleMax   = 10 * time.Second
	// recordGrace: once the request is over, its own usage record reaches the store through
	// the settler within this (its retries last about 25 s); past it the deferred draft is
	// written instead.
	recordGrace = time.Minute
	// resettleWorkers bounds the facilitator calls made at once.
	resettleWorkers = 8
)

// Settlements resolves pending settlements; see the file comment. Run it once; Defer and
// Release are safe for concurrent use.
type Settlements struct {
	Store SettlementStore
	Log   *slog.Logger
	Now   func() time.Time
	// Outcome, when set, hears each outcome (metrics); it must be quick.
	Outcome func(outcome string)

	fac  atomic.Pointer[x402.Facilitator]
	mu   sync.Mutex
	open map[string]*pendingSettlement // by usage record request id
	wake chan struct{}
}

// pendingSettlement is one settlement being resolved; its fields are under Settlements.mu.
type pendingSettlement struct {
	store.PendingPayment
	payload *x402.PaymentPayload
	req     x402.Requirements
	// released: the request's own record was handed over (or the request is gone); only then
	// may the resolution be written.
	released   bool
	releasedAt time.Time
	attempts   int
	next       time.Time
	busy       bool
	last       string                   // the last attempt's outcome, for the unpaid reason
	tx         string                   // a transaction the facilitator named
	result     *store.PaymentResolution // known, not written yet
	// storeFailed: writing the outcome failed once (logged once).
	storeFailed bool
}

// NewSettlements makes a resolver over st.
func NewSettlements(st SettlementStore, log *slog.Logger) *Settlements {
	return &Settlements{Store: st, Log: log, Now: time.Now, open: map[string]*pendingSettlement{}, wake: make(chan struct{}, 1)}
}

// SetFacilitator is the facilitator settlements are asked of from now on (nil: none is
// configured; they wait, then end unpaid).
func (s *Settlements) SetFacilitator(f *x402.Facilitator) { s.fac.Store(f) }

// Pending is how many settlements are being resolved.
func (s *Settlements) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

func (s *Settlements) observe(outcome string) {
	if s != nil && s.Outcome != nil {
		s.Outcome(outcome)
	}
}

func (s *Settlements) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Defer starts resolving p (its record's payment pending): it is stored, fsynced, before the
// result goes out. A store that cannot keep it is logged loudly; it is then resolved in memory
// only (a restart would lose it).
func (s *Settlements) Defer(p store.PendingPayment) {
	e, err := newPending(p)
	if err == nil {
		err = s.Store.AddPendingPayment(p)
	}
	if err != nil {
		s.Log.Error("x402: PENDING SETTLEMENT NOT STORED: it is resolved in memory only, a restart would lose it", "request_id", store.ShortID(p.Record.RequestID), "error", err)
	}
	if e == nil {
		return
	}
	e.next = s.Now().Add(resettleFirst)
	s.mu.Lock()
	s.open[p.Record.RequestID] = e
	s.mu.Unlock()
	s.observe(SettlePending)
	s.poke()
}

// newPending reads back what p keeps.
func newPending(p store.PendingPayment) (*pendingSettlement, error) {
	e := &pendingSettlement{PendingPayment: p, payload: &x402.PaymentPayload{Raw: []byte(p.Payload)}}
	if err := json.Unmarshal(p.Requirements, &e.req); err != nil {
		return nil, fmt.Errorf("x402: a pending settlement's requirements do not read back: %w", err)
	}
	return e, nil
}

// Release says the request of record requestID is over: its own record was handed to the
// settler, so the resolution may be written.
func (s *Settlements) Release(requestID string) {
	s.mu.Lock()
	if e := s.open[requestID]; e != nil && !e.released {
		e.released, e.releasedAt = true, s.Now()
	}
	s.mu.Unlock()
	s.poke()
}

// Resume takes up the pending settlements of an earlier run: the records of requests that
// never got theirs stored (a crash) are written from the deferred draft first. It returns how
// many it took up and what it could not read (those are logged and left in the store).
func (s *Settlements) Resume() (int, error) {
	ps, err := s.Store.PendingPayments()
	recs := make([]store.UsageRecord, len(ps))
	for i, p := range ps {
		recs[i] = p.Record
	}
	errs := s.Store.SettleBatch(recs) // idempotent: only a missing record is written
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range ps {
		if errs[i] != nil { // written again from the draft once resolved (write)
			s.Log.Error("x402: a resumed pending settlement's record could not be written now", "request_id", store.ShortID(p.Record.RequestID), "error", errs[i])
		}
		e, perr := newPending(p)
		if perr != nil {
			err = errors.Join(err, perr)
			continue
		}
		e.released, e.releasedAt, e.next = true, now, now
		s.open[p.Record.RequestID] = e
	}
	return len(s.open), err
}

// Run resolves pending settlements until ctx ends; the calls in flight are cut short then and
// waited for (what is left resumes at the next start).
func (s *Settlements) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var inflight atomic.Int64 // each step pokes the loop when it is done
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, wait := s.due(resettleWorkers - int(inflight.Load()))
		for _, e := range due {
			inflight.Add(1)
			wg.Go(func() {
				defer inflight.Add(-1)
				s.step(ctx, e)
			})
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
	}
}

// due marks busy and returns up to limit settlements whose turn it is, and how long until the
// next one's.
func (s *Settlements) due(limit int) ([]*pendingSettlement, time.Duration) {
	now := s.Now()
	wait := time.Minute
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pendingSettlement
	for _, e := range s.open {
		switch {
		case e.busy || (e.result != nil && !e.released):
		case !e.next.After(now):
			if len(out) < limit { // else a worker's poke, when it is done, brings it
				e.busy = true
				out = append(out, e)
			}
		default:
			wait = min(wait, e.next.Sub(now))
		}
	}
	return out, wait
}

// step asks the facilitator again unless the outcome is known, then writes a known outcome
// once the request is over. e is busy meanwhile: no other step touches it.
func (s *Settlements) step(ctx context.Context, e *pendingSettlement) {
	s.mu.Lock()
	known := e.result != nil
	s.mu.Unlock()
	if !known {
		if res := s.ask(ctx, e); res != nil {
			s.mu.Lock()
			e.result = res
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	ready, res, releasedAt := e.result != nil && e.released, e.result, e.releasedAt
	s.mu.Unlock()
	done := ready && s.write(e, *res, releasedAt)
	s.mu.Lock()
	e.busy = false
	switch {
	case done:
		delete(s.open, e.Record.RequestID)
	case ready:
		e.next = s.Now().Add(time.Second)
	}
	s.mu.Unlock()
	s.poke()
}

// ask settles e again (without Settlements.mu) and returns its outcome when that is known;
// otherwise it schedules the next attempt.
func (s *Settlements) ask(ctx context.Context, e *pendingSettlement) *store.PaymentResolution {
	now := s.Now()
	last := e.Until.Add(-settleMargin)
	s.mu.Lock()
	why, tx := e.last, e.tx
	s.mu.Unlock()
	if !now.Before(last) {
		if why == "" {
			why = "the gateway was not running"
		}
		return &store.PaymentResolution{Status: store.PaymentUnpaid, Transaction: tx,
			Reason: "the credential expired before the settlement's outcome was known (" + why + ")"}
	}
	fac := s.fac.Load()
	var sr x402.SettlementResponse
	err := errors.New("no facilitator is configured (x402.facilitator_url)")
	if fac != nil {
		sr, err = fac.Settle(ctx, e.payload, e.req)
	}
	switch {
	case err == nil:
		return &store.PaymentResolution{Status: store.PaymentSettled, Transaction: sr.Transaction, Reason: "settled when asked again"}
	case errors.Is(err, x402.ErrSettleFailed) && x402.SpentNonce(e.req.Scheme, sr.ErrorReason):
		return &store.PaymentResolution{Status: store.PaymentSettled, Transaction: tx,
			Reason: "asked again, the facilitator answered " + sr.ErrorReason + ": the authorization's nonce is spent, the first settlement went through"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.last = err.Error() // the facilitator's words quoted and shortened
	if sr.Transaction != "" {
		e.tx = sr.Transaction
	}
	e.attempts++
	e.next = now.Add(min(resettleFirst<<min(e.attempts, 8), resettleMax))
	if final := last.Add(-time.Second); e.next.After(final) {
		e.next = final // one last try before the credential can no longer settle
		if !final.After(now) {
			e.next = last // then unpaid
		}
	}
	return nil
}

// write stores the outcome res of e (busy: only this step touches its storeFailed) and reports
// whether it is done with: the record's payment and its aggregates changed and the entry went,
// or the record cannot be stored at all. A record not in the store yet is waited for (false);
// past recordGrace after the request ended the deferred draft is written instead.
func (s *Settlements) write(e *pendingSettlement, res store.PaymentResolution, releasedAt time.Time) bool {
	rec := e.Record
	id := rec.RequestID
	err := s.Store.ResolvePayment(id, res)
	if errors.Is(err, store.ErrNotFound) && s.Now().Sub(releasedAt) > recordGrace {
		if err = s.Store.SettleBatch([]store.UsageRecord{rec})[0]; err == nil {
			err = s.Store.ResolvePayment(id, res)
		} else if errors.Is(err, store.ErrInvalid) {
			s.Log.Error("x402: a resolved settlement's record cannot be stored; dropped", "request_id", store.ShortID(id), "status", res.Status, "error", err)
			return true
		}
	}
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && !e.storeFailed { // once, not every second
			e.storeFailed = true
			s.Log.Error("x402: a settlement's outcome could not be stored; retrying every second", "request_id", store.ShortID(id), "status", res.Status, "error", err)
		}
		return false
	}
	p := rec.Payment
	args := []any{"request_id", store.ShortID(id), "endpoint", p.Endpoint, "payer", p.Payer, "scheme", p.Scheme, "amount", p.Amount, "reason", res.Reason}
	if res.Status == store.PaymentUnpaid {
		s.Log.Error("x402: UNPAID: a paid request's settlement never completed; its result was served unpaid", args...)
	} else {
		s.Log.Info("x402: a pending settlement is settled", args...)
	}
	s.observe(res.Status)
	return true
}
