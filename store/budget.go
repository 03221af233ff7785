package store

// Budget slices: how several gateways sharing one store keep spend limits and balances exact
// without a store call per request. Each replica leases slices of an account's balance and of
// a key's monthly limit, admits against them in memory, and gives back what it did not use.
// The store keeps, per budget, the sum of every replica's outstanding slices, and a lease is
// granted only while that sum plus what was spent stays within the balance or the limit.
// Settling a record takes its cost from both the spend (balance) and the settling replica's
// slice at once, so the bound holds across settlement too.

import (
	"context"
	"time"

	"github.com/shopspring/decimal"
)

// BudgetRef names a budget: an account's balance (KeyID ""), or a key's monthly limit in
// Month ("2006-01", UTC).
type BudgetRef struct {
	Account string
	KeyID   string
	Month   string
}

// IsKey says the budget is a key's monthly limit.
func (r BudgetRef) IsKey() bool { return r.KeyID != "" }

// AccountBudget is the budget of account's balance.
func AccountBudget(account string) BudgetRef { return BudgetRef{Account: account} }

// KeyBudget is the budget of key's monthly limit in month.
func KeyBudget(keyID, month string) BudgetRef { return BudgetRef{KeyID: keyID, Month: month} }

// BudgetLease is one replica's outstanding slice of one budget.
type BudgetLease struct {
	Replica string
	Ref     BudgetRef
	Amount  decimal.Decimal
}

// Budgets leases budget slices to replicas (a store several gateways share; a store of one
// gateway has none: its ledger in memory is the truth). Leases are named by the replica's
// registered name (Replicas) and live as long as its registration: once it is gone for longer
// than its lease, any replica may reclaim them (ReclaimBudget).
type Budgets interface {
	// LeaseBudget leases replica a slice of ref of at least need and about share (0 to 1) of
	// what is left unleased, at most all of it, in one atomic step. granted is 0 (and err nil)
	// when less than need is left; left is what stays unleased after it. An unknown account
	// leases nothing; a key without a limit (or unknown) grants need.
	LeaseBudget(replica string, ref BudgetRef, need, share decimal.Decimal) (granted, left decimal.Decimal, err error)
	// ReturnBudget gives back up to amount of replica's slice of ref.
	ReturnBudget(replica string, ref BudgetRef, amount decimal.Decimal) error
	// ReturnAllBudget gives back every slice replica holds (a clean stop, or a restart under
	// the same name: what it held before is gone with its memory).
	ReturnAllBudget(replica string) error
	// ReclaimBudget gives back the slices of replicas not registered, or gone at now (their
	// lease ended), and says how many slices it ended.
	ReclaimBudget(now time.Time) (int, error)
	// BudgetLeases lists the outstanding slices, by replica and budget.
	BudgetLeases() ([]BudgetLease, error)
	// SettleAs makes the records this store settles from now on take their cost from
	// replica's slices (as well as from the balance and the month spend).
	SettleAs(replica string)
	// AskBudgetBack asks every other replica to give back its unheld slice of ref.
	AskBudgetBack(ref BudgetRef) error
	// BudgetAsks delivers the asks of other replicas until ctx ends.
	BudgetAsks(ctx context.Context) <-chan BudgetRef
}
