// Package storetest is the conformance suite of store.Store: one set of table-driven cases that
// every implementation runs from its own tests (storetest.Run) and must pass unchanged. It
// proves the contract the gateway relies on, concern by concern (the catalog, keys, accounts,
// the ledger, usage, tasks and their callbacks, payments, credentials, pruning, health,
// change notification, the Recorder), under concurrency (settles that never overspend,
// credentials claimed once among 50 concurrent claims) and across a crash: a child process
// writes and is killed with SIGKILL, and what it was told was durable must be there when the
// store is opened again (holds billed as gateway_restart estimates, pending x402 settlements
// resumed, claims still claimed).
//
// Modelled on gocloud.dev's docstore/drivertest (a harness parameterized by a constructor) and
// Vault's physical backend tests.
package storetest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// Backend is what the suite needs of an implementation.
type Backend struct {
	// Open opens the store whose data lives at dir (a directory the suite made, empty at first;
	// an implementation may keep its data elsewhere and use dir as its name). Opened again, by
	// the test or by a child process of the same test binary, it holds everything committed.
	// The suite closes what it opens, except in a child process it kills.
	Open func(t testing.TB, dir string) store.Store
	// Recorder starts the implementation's Recorder over a store Open returned.
	Recorder func(s store.Store, hooks store.SettlerHooks) store.Recorder
}

// conformance is one case: run gets a fresh, empty store.
type conformance struct {
	name string
	run  func(t *testing.T, e *env)
}

// Run runs every case against b, each on a fresh store, as subtests of t.
func Run(t *testing.T, b Backend) {
	if child := os.Getenv(childEnv); child != "" {
		runChild(t, b, child)
		return
	}
	groups := [][]conformance{catalogCases, keyCases, accountCases, ledgerCases, usageCases,
		taskCases, leaseCases, paymentCases, pruneCases, healthCases, changeCases, replicaCases, recorderCases}
	probe := b.Open(t, t.TempDir())
	if _, ok := probe.(store.Budgets); ok {
		groups = append(groups, budgetCases)
	}
	if _, ok := probe.(store.RateShares); ok {
		groups = append(groups, rateCases)
	}
	_ = probe.Close()
	for _, g := range groups {
		for _, c := range g {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, newEnv(t, b))
			})
		}
	}
	for _, c := range crashCases {
		t.Run("crash/"+c.name, func(t *testing.T) {
			t.Parallel()
			runCrash(t, b, c)
		})
	}
}

// env is one case's store and what it needs to make more.
type env struct {
	b   Backend
	dir string
	s   store.Store
}

func newEnv(t *testing.T, b Backend) *env {
	e := &env{b: b, dir: t.TempDir()}
	e.s = e.open(t)
	return e
}

// open opens e's store (again), closed when the test ends.
func (e *env) open(t *testing.T) store.Store {
	t.Helper()
	s := e.b.Open(t, e.dir)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// recorder starts a Recorder over e's store, closed when the test ends; records it reports
// as not stored fail the test.
func (e *env) recorder(t *testing.T) store.Recorder {
	r := e.b.Recorder(e.s, store.SettlerHooks{NotStored: func(rec store.UsageRecord, err error) {
		t.Errorf("record %s not stored: %v", rec.RequestID, err)
	}})
	t.Cleanup(r.Close)
	return r
}

// day0 is when the suite's records happen, unless a case says otherwise.
var day0 = time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func decp(s string) *decimal.Decimal { d := dec(s); return &d }

// wantDec fails unless got equals want as a number.
func wantDec(t testing.TB, what string, got decimal.Decimal, want string) {
	t.Helper()
	if !got.Equal(dec(want)) {
		t.Fatalf("%s: %s, want %s", what, got, want)
	}
}

func account(t testing.TB, s store.Store, id, credits string) {
	t.Helper()
	if _, err := s.CreateAccount(id, dec(credits)); err != nil {
		t.Fatal(err)
	}
}

func key(t testing.TB, s store.Store, acct string, limit *decimal.Decimal) store.Key {
	t.Helper()
	k, _, err := s.CreateKey(acct, store.KeyOptions{Name: "k", MonthlyLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// usage is a record of request id for k costing cost, at day0 plus at.
func usage(id string, k store.Key, cost string, at time.Duration) store.UsageRecord {
	return store.UsageRecord{RequestID: id, KeyID: k.ID, Account: k.Account, Model: "m", Provider: "p",
		PromptTokens: 10, CompletionTokens: 5, Cost: dec(cost), Time: day0.Add(at)}
}

func settle(t testing.TB, s store.Store, recs ...store.UsageRecord) {
	t.Helper()
	for i, err := range s.SettleBatch(recs) {
		if err != nil {
			t.Fatalf("settle %s: %v", recs[i].RequestID, err)
		}
	}
}

func balance(t testing.TB, s store.Store, id string) decimal.Decimal {
	t.Helper()
	a, err := s.GetAccount(id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Balance
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Crash cases: the child part runs in a child process of the same test binary, started with
// the subtest's path and childEnv set; it writes, prints a line for each write the store
// acknowledged, and waits to be killed.
const (
	childEnv = "TOLLWAY_STORETEST_CHILD" // the crash case to play the child of
	dirEnv   = "TOLLWAY_STORETEST_DIR"   // the store's dir
)

type crashCase struct {
	name string
	// child writes to s (its Recorder from rec) and says what was acknowledged; it never
	// returns on its own.
	child func(t *testing.T, s store.Store, rec func() store.Recorder, say func(string))
	// enough reports, for each line the child said, whether to kill it now.
	enough func(line string) bool
	// check opens the store again and checks what the child was told.
	check func(t *testing.T, s store.Store, said []string)
}

func runChild(t *testing.T, b Backend, name string) {
	for _, c := range crashCases {
		if c.name != name {
			continue
		}
		t.Run("crash/"+c.name, func(t *testing.T) {
			s := b.Open(t, os.Getenv(dirEnv))
			rec := func() store.Recorder { return b.Recorder(s, store.SettlerHooks{}) }
			c.child(t, s, rec, func(line string) { _, _ = os.Stdout.WriteString(line + "\n") })
			select {} // killed by the parent
		})
	}
}

// runCrash plays c: the child writes until enough, is killed (SIGKILL), and the store is opened
// again for check.
func runCrash(t *testing.T, b Backend, c crashCase) {
	dir := t.TempDir()
	var run []string
	for _, p := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(p)+"$")
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childEnv+"="+c.name, dirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said []string
	done := false
	sc := bufio.NewScanner(out)
	for !done && sc.Scan() {
		said = append(said, sc.Text())
		done = c.enough(sc.Text())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // killed: its error is expected
	if !done {
		t.Fatalf("the child ended before it was killed; it said %q; stderr:\n%s", said, stderr.String())
	}
	e := &env{b: b, dir: dir}
	c.check(t, e.open(t), said)
}
