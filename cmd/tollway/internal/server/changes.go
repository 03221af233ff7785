package server

// Following what other replicas commit: the store tells of each committed change to the
// catalog, keys and accounts (store.Changes; on PostgreSQL a NOTIFY from whichever replica
// wrote it). What this process wrote itself (Change.Local) was applied by the admin call that
// wrote it, so it is not applied again. The rest is gathered into bursts (burstQuiet after the
// last, at most burstMax long) and each burst is applied once: the catalog rebuilds Envoy's
// configuration and ext_proc's runtime (keys included), keys alone swap ext_proc's runtime,
// and accounts the ledger does not hold yet are added to it with their stored balance. The
// balances of accounts the ledger holds are left to it: on a shared store the ledger leases
// slices of the stored balances (budget.go), so a credit anywhere is leasable at once.

import (
	"context"
	"log/slog"
	"time"

	"github.com/tollway/tollway/store"
)

const (
	burstQuiet = 20 * time.Millisecond
	burstMax   = 200 * time.Millisecond
)

// burst is what a run of changes asks to re-read.
type burst struct {
	catalog, keys bool
	allAccounts   bool            // a change of many accounts (a reload): re-read them all
	accounts      map[string]bool // remote accounts changed, by id
	ownAccounts   []string        // accounts this process created: the ledger has them
}

func (b *burst) add(c store.Change) {
	if c.Local {
		if c.Topic == store.TopicAccounts && c.ID != "" {
			b.ownAccounts = append(b.ownAccounts, c.ID)
		}
		return
	}
	switch c.Topic {
	case store.TopicCatalog:
		b.catalog = true
	case store.TopicKeys:
		b.keys = true
	case store.TopicAccounts:
		if c.ID == "" {
			b.allAccounts = true
			return
		}
		if b.accounts == nil {
			b.accounts = map[string]bool{}
		}
		b.accounts[c.ID] = true
	}
}

// followChanges applies the changes other replicas commit until ctx ends.
func (p *process) followChanges(ctx context.Context) {
	f := &follower{log: p.log.With("component", "changes"), p: p, gw: p.gw}
	for {
		b, ok := gather(ctx, p.changes)
		if !ok {
			return
		}
		f.apply(ctx, b)
	}
}

// gather waits for a change, then takes what follows within burstQuiet of the last (at most
// burstMax in all); ok is false once the changes end.
func gather(ctx context.Context, ch <-chan store.Change) (b burst, ok bool) {
	select {
	case <-ctx.Done():
		return b, false
	case c, open := <-ch:
		if !open {
			return b, false
		}
		b.add(c)
	}
	end := time.After(burstMax)
	for {
		select {
		case c, open := <-ch:
			if !open {
				return b, true
			}
			b.add(c)
		case <-time.After(burstQuiet):
			return b, true
		case <-end:
			return b, true
		}
	}
}

type follower struct {
	log *slog.Logger
	p   *process
	gw  applier // p.gw; a seam for tests
}

// applier is what the follower asks of the gateway: re-read the catalog (keys with it), or the
// keys alone.
type applier interface {
	Apply(context.Context) error
	KeysChanged() error
}

// apply re-reads what b names and applies it.
func (f *follower) apply(ctx context.Context, b burst) {
	start := time.Now()
	var what []string
	// Accounts first: a key another replica created with its account must not be served here
	// before the ledger holds that account (a request in between would be refused 402).
	if f.accounts(b) {
		what = append(what, "accounts")
	}
	switch {
	case b.catalog:
		if err := f.gw.Apply(ctx); err != nil {
			f.log.Error("another replica's catalog change could not be applied here; this replica keeps its configuration", "error", err)
		}
		what = append(what, "catalog", "keys")
	case b.keys:
		if err := f.gw.KeysChanged(); err != nil {
			f.log.Error("another replica's key change could not be applied here", "error", err)
		}
		what = append(what, "keys")
	}
	if len(what) > 0 {
		f.log.Debug("changes from other replicas applied", "what", what, "took", time.Since(start).String())
	}
}

// accounts adds the accounts other replicas created to the ledger; it reports whether it read
// any.
func (f *follower) accounts(b burst) bool {
	l, known := f.p.ledger, f.p.ledgerAccounts
	if l == nil {
		return false
	}
	for _, id := range b.ownAccounts {
		known[id] = true
	}
	var fresh []store.Account
	switch {
	case b.allAccounts:
		all, err := f.p.st.Accounts()
		if err != nil {
			f.log.Error("accounts other replicas created could not be read; they are refused here until the next change", "error", err)
			return true
		}
		fresh = all
	case len(b.accounts) > 0:
		for id := range b.accounts {
			if known[id] {
				continue
			}
			a, err := f.p.st.GetAccount(id)
			if err != nil {
				f.log.Error("an account another replica created could not be read", "account", store.ShortID(id), "error", err)
				continue
			}
			fresh = append(fresh, a)
		}
	default:
		return false
	}
	for _, a := range fresh {
		if !known[a.ID] {
			l.SetAccount(a.ID, a.Balance)
			known[a.ID] = true
		}
	}
	return true
}
