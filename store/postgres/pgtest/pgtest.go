// Package pgtest starts a private PostgreSQL server for a test binary: Debian's server binaries
// (initdb, pg_ctl from /usr/lib/postgresql/N/bin, installed by `make deps-postgres`), run as the
// postgres user when the tests run as root (the server refuses root), in a temporary directory,
// listening on a free loopback port only, with fsync off (a test server's data need not
// survive the machine). One server serves the whole test binary (Main, from TestMain); each
// test gets a database of its own (Database). It never skips: a machine without the binaries
// fails with what to run.
//
// A child process of the test binary (the store suite's crash cases) finds the server in
// TOLLWAY_PGTEST_URL, which Main sets, and uses it rather than starting its own; setting it
// by hand points the tests at a server of your own.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// URLEnv names a running server (postgres://user@host:port) to use instead of starting one.
const URLEnv = "TOLLWAY_PGTEST_URL"

// BinEnv names the directory of initdb and pg_ctl, when not Debian's.
const BinEnv = "TOLLWAY_PG_BIN"

// Server is a PostgreSQL server the tests use.
type Server struct {
	base  *url.URL // postgres://user@host:port/
	dir   string   // the server's directory ("" when not ours)
	bin   string
	owner string // the user the server runs as ("" the current one)
	opts  string // the server's options (port, socket directory, settings), for Up
	mu    sync.Mutex
	made  map[string]bool
}

// current is the server Main started, for Database.
var current *Server

// Main starts the server (or finds the one URLEnv names), runs the tests, stops it and exits
// with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	current = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// Start starts a private server, or returns the one URLEnv names.
func Start() (*Server, error) {
	if u := os.Getenv(URLEnv); u != "" {
		base, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %s=%q: %w", URLEnv, u, err)
		}
		return &Server{base: base, made: map[string]bool{}}, nil
	}
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, made: map[string]bool{}}
	if os.Geteuid() == 0 {
		s.owner = "postgres" // Debian's package makes it; the server refuses to run as root
		if _, err := user.Lookup(s.owner); err != nil {
			return nil, fmt.Errorf("pgtest: the tests run as root and there is no %q user to run the server as: run `make deps-postgres` (Debian's postgresql creates it): %w", s.owner, err)
		}
	}
	if err := s.start(); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if err := os.Setenv(URLEnv, s.base.String()); err != nil { // for child processes
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// binDir finds initdb and pg_ctl: BinEnv, else the newest /usr/lib/postgresql/N/bin.
func binDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		return "", errors.New("pgtest: no PostgreSQL server found (/usr/lib/postgresql/*/bin/initdb): run `make deps-postgres` " +
			"(installs Debian's postgresql), or set " + BinEnv + " to the directory of initdb and pg_ctl")
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) < version(found[j]) })
	return filepath.Dir(found[len(found)-1]), nil
}

func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// start makes the cluster and starts the server on a free loopback port (a few tries: the
// port is free when picked, not necessarily when the server binds it).
func (s *Server) start() error {
	dir, err := os.MkdirTemp("", "tollway-pg-")
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	s.dir = dir
	if err := s.own(dir); err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	if out, err := s.run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return fmt.Errorf("pgtest: initdb in %s: %w\n%s", dir, err, out)
	}
	var last error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return err
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "+
			"-c full_page_writes=off -c max_connections=300", port, dir)
		out, err := s.run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "30", "-o", opts, "start")
		if err == nil {
			s.opts = opts
			s.base = &url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
			return nil
		}
		logs, _ := os.ReadFile(filepath.Join(dir, "log"))
		last = fmt.Errorf("pgtest: pg_ctl start: %w\n%s\n%s", err, out, logs)
	}
	return last
}

// own gives dir to the server's user.
func (s *Server) own(dir string) error {
	if s.owner == "" {
		return nil
	}
	u, err := user.Lookup(s.owner)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pgtest: give %s to %s: %w", dir, s.owner, err)
	}
	return nil
}

// run runs one of the server's programs as its user, for at most a minute.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(s.bin, prog)
	var cmd *exec.Cmd
	if s.owner != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", s.owner, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Stop stops a server Start started (immediately: its data is thrown away) and removes its
// directory; a server found through URLEnv is left running.
func (s *Server) Stop() error {
	if s.dir == "" {
		return nil
	}
	var err error
	if s.base != nil {
		if out, e := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop"); e != nil {
			err = fmt.Errorf("pgtest: pg_ctl stop: %w\n%s", e, out)
		}
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// URL is the DSN of database name on the server.
func (s *Server) URL(name string) string {
	u := *s.base
	u.Path = "/" + name
	u.RawQuery = "sslmode=disable"
	return u.String()
}

// Create makes database name unless it exists.
func (s *Server) Create(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.made[name] {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: connect to %s: %w", s.base.Host, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P04" { // duplicate_database: made by another process
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	s.made[name] = true
	return nil
}

// Database is the DSN of a database of its own for the test, named after key (the same key,
// in this process or a child, is the same database), made on first use on the server Main
// started.
func Database(t testing.TB, key string) string {
	t.Helper()
	if current == nil {
		t.Fatal("pgtest: no server: call pgtest.Main(m) from the package's TestMain")
	}
	name := Name(key)
	if err := current.Create(name); err != nil {
		t.Fatal(err)
	}
	return current.URL(name)
}

// Name is the database name for key: short, and safe unquoted.
func Name(key string) string {
	h := sha256.Sum256([]byte(key))
	return "t_" + strings.ToLower(hex.EncodeToString(h[:8]))
}

// Current is the server Main started (nil before).
func Current() *Server { return current }

// Down stops a server Start started (a fast shutdown: sessions are ended, what was committed is
// kept), keeping its data and port, as a database that went away (tests of what the gateway
// does without it); Up starts it again.
func (s *Server) Down() error {
	if s.dir == "" {
		return errors.New("pgtest: Down: the server is not this process's (" + URLEnv + " names it)")
	}
	if out, err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// PID is the server's postmaster, whose children are its backends (each in a session of its
// own); 0 when the server is not this process's or not running.
func (s *Server) PID() int {
	if s.dir == "" {
		return 0
	}
	raw, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// Up starts again a server Down stopped, on the same port.
func (s *Server) Up() error {
	if s.dir == "" {
		return errors.New("pgtest: Up: the server is not this process's (" + URLEnv + " names it)")
	}
	if out, err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "30", "-o", s.opts, "start"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %w\n%s", err, out)
	}
	return nil
}
