package billing

// Budget slices: several gateways sharing one store (store.Budgets) keep limits and balances
// exact with no store call per request. With a Budget, the Ledger's balance of an account and
// its room under a key's monthly limit are the slices this replica leased: Reserve admits
// against them under the ledger's lock, as on one node; when a slice does not cover a request,
// Reserve leases what is missing (one statement, outside the lock: the request waits only
// then), and when the store has too little left it asks the other replicas to give back what
// they do not hold, tries again for up to GiveBackWait, and refuses only then. Settle takes the
// bill from the slices (the store takes it from this replica's lease when the record ships).
// Unused slices go back after an idle period (ReturnIdle) and when asked (GiveBack). While the
// store cannot be reached, requests the slices cover are admitted; the others are refused
// with an error wrapping store.ErrUnavailable (503 store_unavailable), never served unbilled.
// Once this replica's registration may lapse, its slices are dropped (DropSlices): the store
// may give them to others.

import (
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// Budget leases the slices a Ledger admits against (store.Budgets bound to this replica).
type Budget interface {
	// Lease leases at least need of ref (about a share of what is left): granted is 0 when
	// less than need is left unleased; left is what stays unleased.
	Lease(ref store.BudgetRef, need decimal.Decimal) (granted, left decimal.Decimal, err error)
	// Return gives back amount of this replica's slice of ref.
	Return(ref store.BudgetRef, amount decimal.Decimal) error
	// AskBack asks the other replicas to give back their unheld slices of ref.
	AskBack(ref store.BudgetRef) error
}

// GiveBackWait bounds how long a request the store is short for waits for other replicas to
// give back their slices before it is refused. A replica answers an ask within milliseconds
// when it has the CPU; 300 ms refused one request of 60 too many once, on a machine that ran
// the whole test suite beside three replicas (TestClusterSliceBurst); that refusal was more
// likely a remainder a replica got after the one ask a request then made (asks now repeat:
// reserveSliced), but the wait was left as it is. Only a request at the edge of a budget
// waits.
const GiveBackWait = time.Second

// giveBackPauses are the pauses between leases after an ask, GiveBackWait in all.
var giveBackPauses = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond,
	150 * time.Millisecond, 250 * time.Millisecond, 450 * time.Millisecond}

// maxRefills is how many leases of what a request lacks one Reserve makes before it leases
// its whole hold (concurrent requests on this replica took part of the slice each one
// completed); after as many more it gives up.
const maxRefills = 8

// UseBudget makes b the source of this ledger's balances and key limits: every balance starts
// at 0 (the accounts stay known) and grows by what is leased. Call it before the ledger is
// shared.
func (l *Ledger) UseBudget(b Budget) {
	l.budget = b
	for a := range l.balances {
		l.balances[a] = decimal.Zero
	}
	l.keySlice = map[keyMonth]decimal.Decimal{}
	l.used = map[store.BudgetRef]time.Time{}
}

// accountRef and keyRef name the budgets of a request.
func accountRef(account string) store.BudgetRef { return store.AccountBudget(account) }
func keyRef(km keyMonth) store.BudgetRef        { return store.KeyBudget(km.key, km.month) }

// leased is a slice a lease granted, added to the ledger in the step that tries the hold
// again, so no concurrent request takes it first.
type leased struct {
	ref    store.BudgetRef
	amount decimal.Decimal
}

// reserveSliced is Reserve against slices. At the edge of a budget (the store has less left
// than the request lacks) the budget is in pieces: the store's rest and the unheld remainders
// of the replicas' slices, none of which covers the request alone. The request asks the other
// replicas to give theirs back and leases what it lacks again after each pause, asking again
// each time, for up to GiveBackWait: a remainder another replica got after it heard an ask (a
// lease it made before, granted late; another request's wait at the edge ending) comes back at
// the next one, so no replica keeps a remainder that would complete a refused request.
func (l *Ledger) reserveSliced(account, keyID string, limit *decimal.Decimal, amount decimal.Decimal, now time.Time) (*Reservation, error) {
	km := keyMonth{keyID, monthOf(now)}
	var add *leased
	grants, pauses := 0, giveBackPauses
	for {
		r, needA, needK, err := l.holdSliced(account, km, limit, amount, now, add)
		if r != nil || err != nil {
			return r, err
		}
		ref, need := accountRef(account), needA
		if !needA.IsPositive() {
			ref, need = keyRef(km), needK
		}
		if grants >= 2*maxRefills {
			return nil, l.outrun(ref, amount)
		}
		if grants >= maxRefills {
			need = amount
		}
		got, left, err := l.budget.Lease(ref, need)
		if err != nil {
			return nil, fmt.Errorf("billing: the shared store cannot lease budget and this replica's slice does not cover the request: %w", err)
		}
		add = nil
		if got.IsPositive() {
			add, grants = &leased{ref, got}, grants+1
			continue
		}
		if len(pauses) == 0 {
			return nil, l.short(ref, amount, left, limit)
		}
		if err := l.budget.AskBack(ref); err != nil {
			return nil, fmt.Errorf("billing: the shared store cannot ask the other replicas for budget and this replica's slice does not cover the request: %w", err)
		}
		time.Sleep(pauses[0])
		pauses = pauses[1:]
	}
}

// holdSliced takes the hold when the slices (with add, a slice just leased) cover it; else it
// says what each lacks.
func (l *Ledger) holdSliced(account string, km keyMonth, limit *decimal.Decimal, amount decimal.Decimal, now time.Time, add *leased) (r *Reservation, needA, needK decimal.Decimal, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollover(km.month)
	if add != nil {
		l.addSlice(add.ref, add.amount)
		l.used[add.ref] = now
	}
	slice, ok := l.balances[account]
	if !ok {
		return nil, needA, needK, fmt.Errorf("%w: account %q does not exist", ErrInsufficientCredits, account)
	}
	if !amount.IsZero() {
		if free := slice.Sub(l.accountHeld[account]); free.LessThan(amount) {
			needA = amount.Sub(free)
		}
		if limit != nil {
			if free := l.keySlice[km].Sub(l.keyHeld[km]); free.LessThan(amount) {
				needK = amount.Sub(free)
			}
		}
		if needA.IsPositive() || needK.IsPositive() {
			return nil, needA, needK, nil
		}
		l.accountHeld[account] = l.accountHeld[account].Add(amount)
		l.keyHeld[km] = l.keyHeld[km].Add(amount)
		l.used[accountRef(account)] = now
		if limit != nil {
			l.used[keyRef(km)] = now
		}
	}
	r = &Reservation{account: account, keyID: km.key, month: km.month, amount: amount, sliced: true}
	if limit != nil {
		lim := *limit
		r.limit = &lim
	}
	return r, needA, needK, nil
}

// short is the refusal of a request the store and the other replicas could not cover.
func (l *Ledger) short(ref store.BudgetRef, amount, left decimal.Decimal, limit *decimal.Decimal) error {
	if ref.IsKey() {
		return fmt.Errorf("%w: the request may cost up to $%s; of this key's $%s limit for %s, $%s is neither spent nor held by any replica",
			ErrSpendLimit, amount, *limit, ref.Month, left)
	}
	return fmt.Errorf("%w: the request may cost up to $%s and the account has $%s neither spent nor held by any replica", ErrInsufficientCredits, amount, left)
}

// outrun is the refusal of a request whose leases concurrent requests kept taking.
func (l *Ledger) outrun(ref store.BudgetRef, amount decimal.Decimal) error {
	err := ErrInsufficientCredits
	if ref.IsKey() {
		err = ErrSpendLimit
	}
	return fmt.Errorf("%w: the request may cost up to $%s and concurrent requests took every slice leased for it", err, amount)
}

// addSlice changes ref's slice by amount (under the lock).
func (l *Ledger) addSlice(ref store.BudgetRef, amount decimal.Decimal) {
	if !ref.IsKey() {
		if _, ok := l.balances[ref.Account]; ok {
			l.balances[ref.Account] = l.balances[ref.Account].Add(amount)
		}
		return
	}
	km := keyMonth{ref.KeyID, ref.Month}
	if v := l.keySlice[km].Add(amount); v.IsZero() {
		delete(l.keySlice, km)
	} else {
		l.keySlice[km] = v
	}
}

// settleSliced takes a settled bill from the slices r was held against (under the lock).
func (l *Ledger) settleSliced(r *Reservation, bill decimal.Decimal) {
	if bill.IsZero() {
		return
	}
	km := keyMonth{r.keyID, r.month}
	l.balances[r.account] = decimal.Max(l.balances[r.account].Sub(bill), decimal.Zero)
	if r.limit != nil {
		l.keySlice[km] = decimal.Max(l.keySlice[km].Sub(bill), decimal.Zero)
	}
	l.spent[km] = l.spent[km].Add(bill)
}

// unheld takes ref's slice down to what requests in flight hold and says how much it took
// (under the lock).
func (l *Ledger) unheld(ref store.BudgetRef) decimal.Decimal {
	var free decimal.Decimal
	if ref.IsKey() {
		km := keyMonth{ref.KeyID, ref.Month}
		free = l.keySlice[km].Sub(l.keyHeld[km])
	} else {
		free = l.balances[ref.Account].Sub(l.accountHeld[ref.Account])
	}
	if !free.IsPositive() {
		return decimal.Zero
	}
	l.addSlice(ref, free.Neg())
	return free
}

// GiveBack returns what this replica does not hold of its slice of ref (another replica
// asked for it). Nothing without a Budget.
func (l *Ledger) GiveBack(ref store.BudgetRef) error {
	if l.budget == nil {
		return nil
	}
	l.mu.Lock()
	free := l.unheld(ref)
	l.mu.Unlock()
	return l.giveBack(ref, free)
}

// giveBack returns free of ref's slice; a return the store refuses is put back in the slice
// (the store still counts it leased).
func (l *Ledger) giveBack(ref store.BudgetRef, free decimal.Decimal) error {
	if !free.IsPositive() {
		return nil
	}
	if err := l.budget.Return(ref, free); err != nil {
		l.mu.Lock()
		l.addSlice(ref, free)
		l.mu.Unlock()
		return err
	}
	return nil
}

// ReturnIdle returns the unheld slices not used for idle at now, and says how many it
// returned; the first error stops it. Nothing without a Budget.
func (l *Ledger) ReturnIdle(now time.Time, idle time.Duration) (int, error) {
	if l.budget == nil {
		return 0, nil
	}
	type back struct {
		ref  store.BudgetRef
		free decimal.Decimal
	}
	var todo []back
	l.mu.Lock()
	for ref, at := range l.used {
		if now.Sub(at) < idle {
			continue
		}
		if free := l.unheld(ref); free.IsPositive() {
			todo = append(todo, back{ref, free})
		}
		delete(l.used, ref)
	}
	l.mu.Unlock()
	var errs []error
	for _, b := range todo {
		errs = append(errs, l.giveBack(b.ref, b.free))
	}
	return len(todo), errors.Join(errs...)
}

// DropSlices forgets what this replica does not hold of its slices, without returning it:
// its registration may lapse and the store give them to others (the store keeps what it
// still counts leased until this replica stops or is gone). It says how many it dropped.
func (l *Ledger) DropSlices() int {
	if l.budget == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for a := range l.balances {
		if l.unheld(accountRef(a)).IsPositive() {
			n++
		}
	}
	for km := range l.keySlice {
		if l.unheld(keyRef(km)).IsPositive() {
			n++
		}
	}
	return n
}

// Sliced says whether the ledger admits against budget slices (UseBudget).
func (l *Ledger) Sliced() bool { return l.budget != nil }
