package spool

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/postgres"
	"github.com/tollway/tollway/store/postgres/pgtest"
)

// TestMain runs the package's tests against one private PostgreSQL server.
func TestMain(m *testing.M) { pgtest.Main(m) }

// books opens the database named after key with account acme holding credits and its key.
func books(t *testing.T, key, credits string, create bool) *postgres.Store {
	t.Helper()
	pg, err := postgres.Open(postgres.Options{DSN: pgtest.Database(t, key), MaxConns: 4, CallTimeout: 3 * time.Second, StatementTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	if create {
		if _, err := pg.CreateAccount("acme", decimal.RequireFromString(credits)); err != nil {
			t.Fatal(err)
		}
		if err := pg.PutKey(store.Key{ID: "key_spool", Hash: "00", Prefix: "ale-000000", Account: "acme", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return pg
}

func rec(id, cost string) store.UsageRecord {
	return store.UsageRecord{RequestID: id, KeyID: "key_spool", Account: "acme", Model: "m", Provider: "p",
		PromptTokens: 3, CompletionTokens: 4, Cost: decimal.RequireFromString(cost)}
}

// checkBooks: the database holds want records, each request id once, and the balance is the
// credits minus their sum.
func checkBooks(t *testing.T, pg *postgres.Store, credits string, want int) []store.UsageRecord {
	t.Helper()
	recs, err := pg.UsageRecords(store.UsageFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen, sum := map[string]bool{}, decimal.Zero
	for _, r := range recs {
		if seen[r.RequestID] {
			t.Fatalf("request %s recorded twice", r.RequestID)
		}
		seen[r.RequestID] = true
		sum = sum.Add(r.Cost)
	}
	if len(recs) != want {
		t.Fatalf("%d records in the database, want %d", len(recs), want)
	}
	a, err := pg.GetAccount("acme")
	if err != nil {
		t.Fatal(err)
	}
	if exp := decimal.RequireFromString(credits).Sub(sum); !a.Balance.Equal(exp) {
		t.Fatalf("balance %s, want credits %s minus the records' %s = %s", a.Balance, credits, sum, exp)
	}
	return recs
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSpoolShipsEachRecordOnce: records (some request ids twice) go through the journal to the
// database in batches, each once; the balance there is the credits minus their sum; the
// journal is empty after.
func TestSpoolShipsEachRecordOnce(t *testing.T) {
	pg := books(t, t.Name(), "100", true)
	path := filepath.Join(t.TempDir(), "spool.db")
	sp, err := Open(Options{Path: path, MaxBatch: 64}, pg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		sp.Record(rec(fmt.Sprint("r", i), "0.01"))
		if i%10 == 0 {
			sp.Record(rec(fmt.Sprint("r", i), "0.01")) // a record given twice
		}
	}
	waitFor(t, "every record shipped", 10*time.Second, func() bool { return sp.Status().Records == 0 && sp.Stats().Records == 550 })
	st := sp.Status()
	sp.Close()
	checkBooks(t, pg, "100", 500)
	if st.Shipped != 550 || st.Batches < 9 || st.Rejected != 0 {
		t.Fatalf("status %+v: want 550 shipped (50 of them again, kept once) in batches of at most 64", st)
	}
	t.Logf("550 records (50 twice) shipped in %d batches", st.Batches)
}

// TestSpoolShipsGathered: records settled steadily (one every 2 ms for about 0.6 s, each its own
// local commit, as a replica under load spools them) ship in shipments at most one per
// ShipEvery, not one per local commit: about 300 records in a handful of database transactions,
// each record once, the last shipped within a ShipEvery of its local commit.
func TestSpoolShipsGathered(t *testing.T) {
	pg := books(t, t.Name(), "100", true)
	sp, err := Open(Options{Path: filepath.Join(t.TempDir(), "spool.db")}, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	const n = 300
	start := time.Now()
	for i := range n {
		sp.Record(rec(fmt.Sprint("r", i), "0.01"))
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(start)
	waitFor(t, "every record shipped", 10*time.Second, func() bool { return sp.Status().Shipped == n })
	lag := time.Since(start) - took
	st := sp.Status()
	// At most one shipment per ShipEvery while records keep coming, plus the first (at once)
	// and the last; the old cadence shipped each local commit (about one per 10 ms window).
	if most := int64(took/ShipEvery) + 3; st.Batches > most {
		t.Fatalf("%d records over %v shipped in %d batches, want at most %d (one per %v)", n, took.Round(time.Millisecond), st.Batches, most, ShipEvery)
	}
	if lag > ShipEvery+time.Second {
		t.Fatalf("the last record shipped %v after the load, want within about %v", lag, ShipEvery)
	}
	t.Logf("%d records over %v: %d local commits, %d shipments (%.1f records each), the last shipped %v after the load",
		n, took.Round(time.Millisecond), sp.Stats().Commits, st.Batches, float64(n)/float64(st.Batches), lag.Round(time.Millisecond))
	checkBooks(t, pg, "100", n)
}

// TestSpoolHoldsBillAtNextStart: a hold left in the journal by a stop is billed at the next
// start as an estimate, shipped like a record; a hold whose request settled is not.
func TestSpoolHoldsBillAtNextStart(t *testing.T) {
	pg := books(t, t.Name(), "10", true)
	path := filepath.Join(t.TempDir(), "spool.db")
	sp, err := Open(Options{Path: path}, pg)
	if err != nil {
		t.Fatal(err)
	}
	sp.Hold(rec("cut", "0.5"), nil)
	sp.Hold(rec("done", "0.5"), nil)
	waitFor(t, "two holds in the journal", 5*time.Second, func() bool { return sp.Status().Holds == 2 })
	sp.Record(rec("done", "0.25"))
	waitFor(t, "the settled request's hold gone", 5*time.Second, func() bool { return sp.Status().Holds == 1 })
	sp.Close()
	if sp, err = Open(Options{Path: path}, pg); err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if n, err := sp.SettleHolds(store.EstimateGatewayRestart); err != nil || n != 1 {
		t.Fatalf("SettleHolds: %d %v, want the one cut request", n, err)
	}
	if err := sp.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	recs := checkBooks(t, pg, "10", 2)
	for _, r := range recs {
		if (r.RequestID == "cut") != (r.Estimated && r.EstimateReason == store.EstimateGatewayRestart) {
			t.Fatalf("record %+v", r)
		}
	}
}

// TestSpoolDatabaseDown: with the database stopped the journal keeps taking records (its
// health stays good while the database's is an outage), the lag shows them and their age;
// once the database is back every one is shipped, each once.
func TestSpoolDatabaseDown(t *testing.T) {
	pg := books(t, t.Name(), "100", true)
	sp, err := Open(Options{Path: filepath.Join(t.TempDir(), "spool.db")}, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	sp.Record(rec("before", "0.01"))
	waitFor(t, "the first record shipped", 5*time.Second, func() bool { return sp.Status().Shipped == 1 })
	srv := pgtest.Current()
	if err := srv.Down(); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	up := false
	defer func() {
		if !up {
			_ = srv.Up()
		}
	}()
	for i := range 200 {
		sp.Record(rec(fmt.Sprint("down", i), "0.01"))
	}
	waitFor(t, "200 records in the journal", 10*time.Second, func() bool { return sp.Status().Records == 200 })
	waitFor(t, "the database's outage seen", 10*time.Second, func() bool { return pg.Outage() != nil })
	if err := sp.Unavailable(); err != nil {
		t.Fatalf("the spool is unavailable while only the database is down: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	st := sp.Status()
	if st.Records != 200 || st.Oldest.Before(downAt) || st.Lag(time.Now()) < 300*time.Millisecond {
		t.Fatalf("status with the database down: %+v (lag %v)", st, st.Lag(time.Now()))
	}
	if err := srv.Up(); err != nil {
		t.Fatal(err)
	}
	up = true
	back := time.Now()
	waitFor(t, "the spool shipped once the database is back", 15*time.Second, func() bool { return sp.Status().Records == 0 })
	t.Logf("200 records spooled while the database was down shipped %v after it came back", time.Since(back).Round(time.Millisecond))
	checkBooks(t, pg, "100", 201)
}

// TestSpoolRejectsWhatTheDatabaseRefuses: a record of an account the database does not have
// is moved to the rejected records and reported; the others ship.
func TestSpoolRejectsWhatTheDatabaseRefuses(t *testing.T) {
	pg := books(t, t.Name(), "1", true)
	var reported []string
	sp, err := Open(Options{Path: filepath.Join(t.TempDir(), "spool.db"), Hooks: store.SettlerHooks{
		NotStored: func(r store.UsageRecord, err error) { reported = append(reported, r.RequestID+": "+err.Error()) }}}, pg)
	if err != nil {
		t.Fatal(err)
	}
	bad := rec("ghost", "0.1")
	bad.Account = "nobody"
	sp.Record(rec("a", "0.1"))
	sp.Record(bad)
	sp.Record(rec("b", "0.1"))
	waitFor(t, "the journal emptied", 5*time.Second, func() bool { return sp.Stats().Records == 3 && sp.Status().Records == 0 })
	st := sp.Status()
	sp.Close()
	checkBooks(t, pg, "1", 2)
	if st.Rejected != 1 || len(reported) != 1 || !strings.Contains(reported[0], "ghost: the database refused it") {
		t.Fatalf("rejected %d, reported %v", st.Rejected, reported)
	}
}

// TestSpoolLockedByAnotherProcess: a second spool on the same file is refused with what to do.
func TestSpoolLockedByAnotherProcess(t *testing.T) {
	pg := books(t, t.Name(), "1", false)
	path := filepath.Join(t.TempDir(), "spool.db")
	sp, err := Open(Options{Path: path}, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	// bbolt's lock is per open file description: a child process is another opener.
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpoolLockedChild$")
	cmd.Env = append(os.Environ(), "SPOOL_LOCKED_PATH="+path, "SPOOL_DB_KEY="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "is open in another process: give each replica its own spool file") {
		t.Fatalf("a second process on the spool: %v\n%s", err, out)
	}
}

func TestSpoolLockedChild(t *testing.T) {
	path := os.Getenv("SPOOL_LOCKED_PATH")
	if path == "" {
		return // run by TestSpoolLockedByAnotherProcess
	}
	pg := books(t, os.Getenv("SPOOL_DB_KEY"), "", false)
	_, err := Open(Options{Path: path}, pg)
	fmt.Println(err)
}

// TestSpoolKill9MidShipment: a process spooling records is killed with SIGKILL right after a
// shipment committed in the database and before the journal let go of it. After a restart the
// journal ships again: the records both places hold are recorded once, every record the journal
// held reaches the database, and the balance is the credits minus the records' sum.
func TestSpoolKill9MidShipment(t *testing.T) {
	if os.Getenv("SPOOL_CRASH_PATH") != "" {
		crashChild(t)
		return
	}
	pg := books(t, t.Name(), "1000", true)
	path := filepath.Join(t.TempDir(), "spool.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpoolKill9MidShipment$")
	cmd.Env = append(os.Environ(), "SPOOL_CRASH_PATH="+path, "SPOOL_DB_KEY="+t.Name())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var committed int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		fmt.Sscanf(sc.Text(), "journaled %d", &committed)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL: %v", err)
	}
	inDB, err := pg.UsageRecords(store.UsageFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := Open(Options{Path: path}, pg)
	if err != nil {
		t.Fatal(err)
	}
	left, err := sp.oldest(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	shippedIDs := map[string]bool{}
	for _, r := range inDB {
		shippedIDs[r.RequestID] = true
	}
	both := 0
	for _, l := range left {
		if shippedIDs[l.rec.RequestID] {
			both++
		}
	}
	if err := sp.Drain(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	t.Logf("killed after %d records journaled: %d in the database, %d in the journal, %d of them in both", committed, len(inDB), len(left), both)
	if both == 0 {
		t.Fatal("no record was both shipped and still in the journal: the kill was not mid-shipment")
	}
	final := checkBooks(t, pg, "1000", len(inDB)+len(left)-both)
	if len(final) < committed {
		t.Fatalf("%d records in the database, fewer than the %d the journal had committed before the kill", len(final), committed)
	}
}

// crashChild spools records at a steady pace and kills itself with SIGKILL just after its third
// shipment committed, saying before how many records its journal had committed.
func crashChild(t *testing.T) {
	pg := books(t, os.Getenv("SPOOL_DB_KEY"), "", false)
	var sp *Spool
	shipments := 0
	o := Options{Path: os.Getenv("SPOOL_CRASH_PATH"), MaxBatch: 25, afterShip: func() {
		if shipments++; shipments == 3 {
			fmt.Printf("journaled %d\n", sp.Stats().Records)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}}
	var err error
	if sp, err = Open(o, pg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; ctx.Err() == nil; i++ {
		sp.Record(rec(fmt.Sprint("c", i), "0.01"))
		if i%40 == 39 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Fatal("not killed within 20 s")
}
