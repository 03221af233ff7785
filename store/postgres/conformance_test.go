package postgres_test

import (
	"testing"
	"time"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/postgres"
	"github.com/tollway/tollway/store/postgres/pgtest"
	"github.com/tollway/tollway/store/storetest"
)

// TestMain runs the package's tests against one private PostgreSQL server.
func TestMain(m *testing.M) { pgtest.Main(m) }

// open opens the store of the database named after key (made on first use).
func open(t testing.TB, key string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(postgres.Options{DSN: pgtest.Database(t, key), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the store conformance suite against PostgreSQL: each case's directory
// names its database, so a crash case's child process and the check that follows it share it.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Open: func(t testing.TB, dir string) store.Store { return open(t, dir) },
		Recorder: func(s store.Store, hooks store.SettlerHooks) store.Recorder {
			return postgres.NewSettler(s.(*postgres.Store), time.Millisecond, hooks)
		},
	})
}
