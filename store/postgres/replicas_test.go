package postgres_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/postgres"
	"github.com/tollway/tollway/store/postgres/pgtest"
)

// TestReplicasMigrateAtOnce: five replicas opening one empty database at once all start, and
// the schema is migrated once (tern's advisory lock makes them take turns).
func TestReplicasMigrateAtOnce(t *testing.T) {
	key := t.Name()
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 5)
	for i := range stores {
		wg.Go(func() {
			s, err := postgres.Open(postgres.Options{DSN: pgtest.Database(t, key), MaxConns: 2})
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			t.Cleanup(func() { _ = s.Close() })
		}
	}
	if t.Failed() {
		return
	}
	if _, err := stores[0].CreateAccount("acme", decimal.NewFromInt(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[4].GetAccount("acme"); err != nil {
		t.Fatalf("an account written through one replica, read through another: %v", err)
	}
	var version int32
	files, _ := filepath.Glob("migrations/*.sql")
	if err := query(t, key, "select version from tollway_schema_version", &version); err != nil || int(version) != len(files) || version < 2 {
		t.Fatalf("schema version %d (%v), want %d (every migration)", version, err, len(files))
	}
}

// TestChangesReachEveryReplica: a change committed through one replica is told to another's
// subscribers, within a second.
func TestChangesReachEveryReplica(t *testing.T) {
	a, b := open(t, t.Name()), open(t, t.Name())
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ch, own := b.Subscribe(t.Context()), a.Subscribe(t.Context())
	if _, err := a.CreateAccount("acme", decimal.NewFromInt(1)); err != nil {
		t.Fatal(err)
	}
	select { // the writer's own subscribers are told it is theirs
	case got := <-own:
		if got != (store.Change{Topic: store.TopicAccounts, ID: "acme", Local: true}) {
			t.Fatalf("the writer was told %+v, want its own change marked Local", got)
		}
	case <-time.After(time.Second):
		t.Fatal("the writer's own change not told within 1 s")
	}
	if err := a.PutRoute(store.Route{ID: "route:r", Name: "r", Rule: "priority_fallback", Status: "active"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []store.Change{{Topic: store.TopicAccounts, ID: "acme"}, {Topic: store.TopicCatalog, ID: "route:r"}} {
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("told %+v, want %+v", got, want)
			}
		case <-time.After(time.Second):
			t.Fatalf("%+v not told to the other replica within 1 s", want)
		}
	}
}

// TestListenerReconnectReloadsEverything: when the listening connection is cut, what was
// committed meanwhile cannot be told one by one, so once it is back every subscriber is told
// to re-read every topic; changes after that are told as before.
func TestListenerReconnectReloadsEverything(t *testing.T) {
	s := open(t, t.Name())
	t.Cleanup(func() { _ = s.Close() })
	ch := s.Subscribe(t.Context())
	var cut int
	if err := query(t, t.Name(), "select count(pg_terminate_backend(pid)) from pg_stat_activity "+
		"where datname = current_database() and query ilike 'listen %'", &cut); err != nil || cut != 1 {
		t.Fatalf("cut %d listeners (%v), want 1", cut, err)
	}
	seen := map[store.Topic]bool{}
	deadline := time.After(5 * time.Second)
	for len(seen) < 3 {
		select {
		case c := <-ch:
			if c.ID != "" {
				t.Fatalf("told %+v, want a reload (no ID) of each topic", c)
			}
			seen[c.Topic] = true
		case <-deadline:
			t.Fatalf("after the listener was cut, reloads told: %v, want all 3 topics within 5 s", seen)
		}
	}
	if _, err := s.CreateAccount("acme", decimal.NewFromInt(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		if c != (store.Change{Topic: store.TopicAccounts, ID: "acme", Local: true}) {
			t.Fatalf("told %+v", c)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a change after the listener came back was not told")
	}
	if err := s.Unavailable(); err != nil {
		t.Fatalf("unavailable after the listener came back: %v", err)
	}
}

// TestCredentialClaimedOnceAcrossReplicas: 50 concurrent claims of one credential spread over
// three replicas: one wins.
func TestCredentialClaimedOnceAcrossReplicas(t *testing.T) {
	var rs []*postgres.Store
	for range 3 {
		s := open(t, t.Name())
		t.Cleanup(func() { _ = s.Close() })
		rs = append(rs, s)
	}
	var mu sync.Mutex
	won, used := 0, 0
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			err := rs[i%3].ClaimCredential("eip155:84532/0xa/0xb/0x01", time.Now().Add(time.Hour))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrExists):
				used++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won != 1 || used != 49 {
		t.Fatalf("%d won, %d found it used; want 1 and 49", won, used)
	}
}

// TestMoneyIsExact: balances wider than a float64 come back digit for digit.
func TestMoneyIsExact(t *testing.T) {
	s := open(t, t.Name())
	t.Cleanup(func() { _ = s.Close() })
	credits := decimal.RequireFromString("12345678901234567890.123456789012345678")
	if _, err := s.CreateAccount("acme", credits); err != nil {
		t.Fatal(err)
	}
	a, err := s.CreditAccount("acme", decimal.RequireFromString("0.000000000000000001"))
	if err != nil || a.Balance.String() != "12345678901234567890.123456789012345679" {
		t.Fatalf("balance %s (%v)", a.Balance, err)
	}
}

// TestOpenErrorNamesTheHostNotThePassword: a database that cannot be reached fails Open with
// its host and port, never the DSN's password.
func TestOpenErrorNamesTheHostNotThePassword(t *testing.T) {
	_, err := postgres.Open(postgres.Options{DSN: "postgres://tollway:s3cret-pw@127.0.0.1:1/tollway?sslmode=disable&connect_timeout=2",
		OpenTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1/tollway") || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("Open of an unreachable database: %v", err)
	}
}

// query reads one row of the test database named after key into dest.
func query(t *testing.T, key, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.Database(t, key))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}
