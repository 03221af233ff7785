package postgres

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/tollway/tollway/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable is where tern keeps the schema's version.
const versionTable = "tollway_schema_version"

// Options configure a Store.
type Options struct {
	// DSN is the database: postgres://user:pass@host:5432/tollway?sslmode=disable (TLS when
	// its sslmode asks for it).
	DSN string
	// MaxConns bounds the pool (default 10); the listener has one connection more.
	MaxConns int32
	// StatementTimeout bounds each statement and each lock wait on the server (default 5 s).
	StatementTimeout time.Duration
	// CallTimeout bounds each call, retries included (default 15 s).
	CallTimeout time.Duration
	// OpenTimeout bounds Open: connecting, waiting for another replica's migration, migrating
	// (default 60 s).
	OpenTimeout time.Duration
	Log         *slog.Logger
}

func (o *Options) defaults() {
	if o.MaxConns <= 0 {
		o.MaxConns = 10
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = 5 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 15 * time.Second
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Store is the store.Store of several gateways sharing one PostgreSQL database.
type Store struct {
	opts   Options
	where  string // host:port/database, for errors (never the password)
	pool   *pgxpool.Pool
	health health
	hub    store.Hub
	origin string             // this Store's mark on the changes it announces (changes.go)
	stop   context.CancelFunc // the listener's
	done   chan struct{}
	// settleAs is the replica whose budget slices settlements take from; asks are the
	// give-back asks heard from other replicas (budget.go).
	settleAs atomic.Pointer[string]
	asks     asks
}

var _ store.Store = (*Store)(nil)

// Open connects to the database, creates or migrates its schema (under tern's advisory lock,
// so replicas starting at once against an empty database take turns) and starts listening
// for changes.
func Open(o Options) (*Store, error) {
	o.defaults()
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		return nil, fmt.Errorf("store: the postgres DSN does not parse (want postgres://user:pass@host:5432/db?sslmode=...): %w", err)
	}
	cc := cfg.ConnConfig
	where := cc.Host + ":" + strconv.Itoa(int(cc.Port)) + "/" + cc.Database
	ms := strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
	cc.RuntimeParams["statement_timeout"] = ms
	cc.RuntimeParams["lock_timeout"] = ms
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(o.CallTimeout, time.Minute).Milliseconds(), 10)
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "tollway"
	}
	cfg.MaxConns = o.MaxConns
	ctx, cancel := context.WithTimeout(context.Background(), o.OpenTimeout)
	defer cancel()
	s := &Store{opts: o, where: where, done: make(chan struct{}), origin: newOrigin()}
	if err := migrateSchema(ctx, cc); err != nil {
		return nil, fmt.Errorf("store: postgres at %s: schema: %w", where, err)
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("store: postgres at %s: %w", where, err)
	}
	if err := s.listen(ctx, cc); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("store: postgres at %s: listen for changes: %w", where, err)
	}
	return s, nil
}

// newOrigin is a random mark, unique among the processes sharing a database.
func newOrigin() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand never fails
	return hex.EncodeToString(b)
}

// migrateSchema brings the schema to the newest embedded migration on a connection of its
// own, with no statement timeout: waiting for another replica's migration is bounded by ctx.
func migrateSchema(ctx context.Context, cc *pgx.ConnConfig) error {
	mc := cc.Copy()
	mc.RuntimeParams["statement_timeout"] = "0"
	mc.RuntimeParams["lock_timeout"] = "0"
	conn, err := pgx.ConnectConfig(ctx, mc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return err
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return err
	}
	return m.Migrate(ctx)
}

// Close stops the listener and closes the pool.
func (s *Store) Close() error {
	s.stop()
	<-s.done
	s.pool.Close()
	return nil
}

// call is a context bounded by the call timeout.
func (s *Store) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.CallTimeout)
}

// tx runs fn in a transaction, again (a few times) when the server aborted it for a deadlock
// or a serialization failure, so fn must only change what it returns. fn's own errors come
// back as they are; the database's are classified (classify).
func (s *Store) tx(fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, cancel := s.call()
	defer cancel()
	var own error
	for try := 0; ; try++ {
		own = nil
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			own = fn(ctx, tx)
			return own
		})
		if own != nil && !isDB(own) {
			return own
		}
		if retryable(err) && try < 8 && ctx.Err() == nil {
			time.Sleep(time.Duration(try+1) * time.Millisecond)
			continue
		}
		return s.classify(err)
	}
}

// read runs fn outside a transaction (one statement, or several that need not agree).
func (s *Store) read(fn func(ctx context.Context, q *pgxpool.Pool) error) error {
	ctx, cancel := s.call()
	defer cancel()
	err := fn(ctx, s.pool)
	if err != nil && !isDB(err) {
		return err
	}
	return s.classify(err)
}

// isDB reports whether err came from the database or the connection rather than from the
// store's own rules (which wrap a store sentinel).
func isDB(err error) bool {
	for _, kind := range []error{store.ErrNotFound, store.ErrExists, store.ErrInvalid, store.ErrTaskNotFound, store.ErrUsageNotSettled} {
		if errors.Is(err, kind) {
			return false
		}
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isConnErr(err)
}

func isConnErr(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgx.ErrTxClosed)
}

// retryable: the server aborted the transaction for a deadlock or a serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// classify turns the database's error into the store's: a failure the data is not at fault
// for (the server unreachable, restarting, out of room or connections, a timeout) wraps
// ErrUnavailable and starts an outage; success ends one.
func (s *Store) classify(err error) error {
	if err == nil {
		s.health.ok()
		return nil
	}
	if unavailable(err) {
		s.health.fail(err)
		return fmt.Errorf("store: postgres at %s is unreachable or refuses work (%w: %w): check that the database is running and that this gateway reaches it (store.dsn); served requests are spooled meanwhile and shipped when it is back",
			s.where, store.ErrUnavailable, err)
	}
	return fmt.Errorf("store: postgres at %s: %w", s.where, err)
}

// unavailable: err is not the statement's fault.
func unavailable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // the connection: refused, reset, timed out
	}
	switch pe.Code[:2] {
	case "08", "53", "57", "58", "40": // connection, resources, operator intervention, system, aborted
		return true
	}
	return pe.Code == "25006" // read-only transaction (a standby)
}

// exists reports whether err is a unique violation.
func uniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
