package server

import (
	"testing"
	"time"

	"github.com/tollway/tollway/store"
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
