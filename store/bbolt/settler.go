package bbolt

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// NewSettler starts the group-commit writer (store/settle) over st.
func NewSettler(st *Store, window time.Duration, hooks store.SettlerHooks) *settle.Settler {
	return settle.New(st.target(), settle.Options{Window: window, Hooks: hooks})
}

// target is st as the settler's Target.
func (s *Store) target() settle.Funcs {
	return settle.Funcs{SettleFn: s.settleWith, ProbeFn: s.probe, RecoveryFn: s.recovery}
}

var bucketProbe = []byte("settler_probe")

// probe commits a write at least as demanding as settling one record: a value of four pages,
// rewritten each time. A disk that is full, failing or read-only fails it; one that still has
// room for a record passes, so a record that fails alone then is at fault itself.
func (s *Store) probe() error {
	return s.update(func(tx *bolt.Tx) error { return putProbe(tx, s.db.Info().PageSize) })
}

func putProbe(tx *bolt.Tx, pageSize int) error {
	b, err := tx.CreateBucketIfNotExists(bucketProbe)
	if err != nil {
		return err
	}
	return b.Put([]byte("probe"), make([]byte, 4*pageSize))
}

// Record queues rec to be settled; it ends the hold of the same request id, if any.
