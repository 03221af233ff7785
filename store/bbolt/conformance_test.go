package bbolt_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/storetest"
)

// TestConformance runs the store conformance suite against bbolt.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Open: func(t testing.TB, dir string) store.Store {
			s, err := bbolt.Open(filepath.Join(dir, "tollway.db"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Recorder: func(s store.Store, hooks store.SettlerHooks) store.Recorder {
			return bbolt.NewSettler(s.(*bbolt.Store), time.Millisecond, hooks)
		},
	})
}
