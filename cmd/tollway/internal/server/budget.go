package server

// Budget slices on a store several replicas share (store.Budgets; docs/money.md#slices): the
// ledger admits against slices this replica leases (billing.Budget), gives back what it does
// not hold when another replica asks or when a slice sits idle, reclaims the slices of
// replicas gone past their lease, and returns everything on a clean stop.

import (
	"context"
	"log/slog"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
)

const (
	// sliceShare is how much of what is left unleased a lease takes (at least the request's
	// hold): large enough that a busy replica leases rarely, small enough that others find
	// budget without asking while much is left.
	sliceShare = "0.25"
	// sliceIdle is how long an unused slice stays before it goes back.
	sliceIdle = 2 * time.Second
)

// slicer is billing.Budget over the store's budgets, as this replica.
type slicer struct {
	st    store.Budgets
	name  string
	share decimal.Decimal
	log   *slog.Logger
}

var _ billing.Budget = (*slicer)(nil)

func (s *slicer) Lease(ref store.BudgetRef, need decimal.Decimal) (granted, left decimal.Decimal, err error) {
	return s.st.LeaseBudget(s.name, ref, need, s.share)
}

func (s *slicer) Return(ref store.BudgetRef, amount decimal.Decimal) error {
	return s.st.ReturnBudget(s.name, ref, amount)
}

// AskBack reclaims the slices of replicas gone, then asks the live ones for theirs.
func (s *slicer) AskBack(ref store.BudgetRef) error {
	if n, err := s.st.ReclaimBudget(time.Now()); err != nil {
		return err
	} else if n > 0 {
		s.log.Info("budget slices of replicas gone past their lease reclaimed", "slices", n)
	}
	return s.st.AskBudgetBack(ref)
}

// useSlices makes the ledger lease slices when the store shares budgets among replicas; it
// reports whether it does. What this replica's name held before (a restart under the same
// name) is returned first: its memory of it is gone.
func (p *process) useSlices(l *billing.Ledger) (bool, error) {
	bs, ok := p.st.(store.Budgets)
	if !ok {
		return false, nil
	}
	name := p.replica.me.Name
	if err := bs.ReturnAllBudget(name); err != nil {
		return false, err
	}
	bs.SettleAs(name)
	p.replica.lapsing = func() {
		if n := l.DropSlices(); n > 0 {
			p.log.Warn("this replica's registration is not renewed and its budget slices may soon be reclaimed by others: requests they covered lease anew (503 store_unavailable while the store is unreachable)", "slices", n)
		}
	}
	l.UseBudget(&slicer{st: bs, name: name, share: decimal.RequireFromString(sliceShare), log: p.log.With("component", "budget")})
	return true, nil
}

// runSlices gives back slices when asked or idle, and reclaims those of replicas gone, until
// ctx ends.
func (p *process) runSlices(ctx context.Context) {
	bs, ok := p.st.(store.Budgets)
	if !ok || p.ledger == nil || !p.ledger.Sliced() {
		return
	}
	log := p.log.With("component", "budget")
	asks := bs.BudgetAsks(ctx)
	idle := time.NewTicker(sliceIdle / 4)
	defer idle.Stop()
	reclaim := time.NewTicker(p.replica.me.Lease)
	defer reclaim.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ref := <-asks:
			if err := p.ledger.GiveBack(ref); err != nil {
				log.Warn("a budget slice another replica asked for could not be given back; it is kept and tried again when idle", "error", err)
			}
		case now := <-idle.C:
			if _, err := p.ledger.ReturnIdle(now, sliceIdle); err != nil {
				log.Warn("idle budget slices could not be given back; they are kept and tried again", "error", err)
			}
		case now := <-reclaim.C:
			if n, err := bs.ReclaimBudget(now); err == nil && n > 0 {
				log.Info("budget slices of replicas gone past their lease reclaimed", "slices", n)
			}
		}
	}
}

// returnSlices gives back every slice on a clean stop, once every settled request is stored.
func (p *process) returnSlices() {
	if bs, ok := p.st.(store.Budgets); ok && p.ledger != nil && p.ledger.Sliced() {
		if err := bs.ReturnAllBudget(p.replica.me.Name); err != nil {
			p.log.Warn("budget slices not returned on stop; they come back when this replica's lease ends", "error", err)
		}
	}
}
