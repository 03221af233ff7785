package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
)

// TestChangesGatherBursts: changes arriving close together are one burst (one re-apply); a
// replica's own changes ask for nothing but mark its accounts as held; a change without an ID
// re-reads every account; a quiet gap ends the burst.
func TestChangesGatherBursts(t *testing.T) {
	ch := make(chan store.Change, 16)
	for _, c := range []store.Change{
		{Topic: store.TopicKeys, ID: "k1", Local: true},
		{Topic: store.TopicAccounts, ID: "mine", Local: true},
		{Topic: store.TopicKeys, ID: "k2"},
		{Topic: store.TopicKeys, ID: "k3"},
		{Topic: store.TopicAccounts, ID: "acme"},
	} {
		ch <- c
	}
	b, ok := gather(t.Context(), ch)
	if !ok || b.catalog || !b.keys || b.allAccounts || !b.accounts["acme"] || len(b.accounts) != 1 || len(b.ownAccounts) != 1 || b.ownAccounts[0] != "mine" {
		t.Fatalf("burst %+v (ok %v), want keys and account acme to re-read, account mine held", b, ok)
	}
	go func() {
		time.Sleep(10 * burstQuiet)
		ch <- store.Change{Topic: store.TopicCatalog}
		ch <- store.Change{Topic: store.TopicAccounts}
		close(ch)
	}()
	b, ok = gather(t.Context(), ch)
	if !ok || !b.catalog || !b.allAccounts || b.keys {
		t.Fatalf("second burst %+v (ok %v), want the catalog and every account", b, ok)
	}
	if _, ok := gather(t.Context(), ch); ok {
		t.Fatal("a closed channel still gave a burst")
	}
	own := make(chan store.Change, 1)
	own <- store.Change{Topic: store.TopicCatalog, ID: "p", Local: true}
	if b, _ := gather(t.Context(), own); b.catalog {
		t.Fatal("the replica's own catalog change asked to be applied again")
	}
}

// keysWatcher is an applier that notes whether the ledger held the account when the keys were
// applied.
type keysWatcher struct {
	ledger  *billing.Ledger
	account string
	held    []bool
}

func (k *keysWatcher) Apply(context.Context) error { return k.KeysChanged() }

func (k *keysWatcher) KeysChanged() error {
	avail, _ := k.ledger.Snapshot(k.account, "", time.Now())
	k.held = append(k.held, avail.IsPositive())
	return nil
}

// TestChangesApplyAccountsBeforeKeys: an account and its key created on another replica arrive
// in one burst; the key must not be served before the ledger holds its account, or a request in
// between is refused 402 "account does not exist" though the account has credit.
func TestChangesApplyAccountsBeforeKeys(t *testing.T) {
	for _, catalog := range []bool{false, true} {
		st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if _, err := st.CreateAccount("acme", decimal.NewFromInt(100)); err != nil {
			t.Fatal(err)
		}
		l := billing.NewLedger(nil, nil, time.Now().UTC().Format("2006-01"))
		w := &keysWatcher{ledger: l, account: "acme"}
		p := &process{log: slog.New(slog.DiscardHandler), st: st, ledger: l, ledgerAccounts: map[string]bool{}}
		f := &follower{log: p.log, p: p, gw: w}
		f.apply(t.Context(), burst{catalog: catalog, keys: true, accounts: map[string]bool{"acme": true}})
		if len(w.held) != 1 || !w.held[0] {
			t.Fatalf("catalog %v: keys applied %d times, the ledger holding the account then: %v; want once, after the account", catalog, len(w.held), w.held)
		}
	}
}
