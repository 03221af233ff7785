package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/store"
)

// keysUsedEvery is how often the keys used since the last save are written to the store (one
// transaction for all of them): a key's last_used_at costs no store write per request, and a
// crash loses at most this much of it.
const keysUsedEvery = time.Minute

// saveKeysUsed writes when keys were last used to the store every keysUsedEvery, and once more
// when ctx ends (after ext_proc stopped serving, so every use is in). What a store that cannot
// write refuses is kept in memory for the next try.
func saveKeysUsed(ctx context.Context, log *slog.Logger, st store.Store, ext *extproc.Server, every time.Duration) {
	save := func() {
		if st.Unavailable() != nil {
			return // the store's outage is logged already; kept for when it recovers
		}
		if err := ext.SaveKeysUsed(st.SetKeysUsed); err != nil {
			log.Warn("when keys were last used could not be saved; kept for the next try", "error", err)
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case <-t.C:
			save()
		}
	}
}
