package bbolt

// Files written before the compact usage form (JSON values, index values holding the whole
// usage key) keep opening and reading exactly as before. testdata/legacy-v0.db and the
// JSON of what that code read from it were produced by the store as of commit 9ff4403.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tollway/tollway/store"
)

// openLegacy opens a copy of the legacy fixture.
func openLegacy(t *testing.T) (*Store, string) {
	t.Helper()
	raw, err := os.ReadFile("testdata/legacy-v0.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "legacy.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

// legacyView is what the old code wrote to testdata/legacy-v0.json, read the same way now.
func legacyView(t *testing.T, s *Store) []byte {
	t.Helper()
	all, err := s.UsageRecords(store.UsageFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage(store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ru, err := s.RouteUsage()
	if err != nil {
		t.Fatal(err)
	}
	acc, err := s.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	ms1, err := s.MonthSpend("2026-09")
	if err != nil {
		t.Fatal(err)
	}
	ms2, err := s.MonthSpend("2026-10")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{"records": all, "usage": u, "route_usage": ru, "accounts": acc, "spend_2026_09": ms1, "spend_2026_10": ms2}
	buf, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestLegacyFileReadsAsBefore(t *testing.T) {
	s, _ := openLegacy(t)
	defer s.Close()
	want, err := os.ReadFile("testdata/legacy-v0.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := legacyView(t, s); !bytes.Equal(got, want) {
		t.Errorf("a file written by the old code reads differently now:\n%s\nwant:\n%s", got, want)
	}
	if n := count(t, s); n != 40 {
		t.Errorf("%d records, want the fixture's 40", n)
	}
	credits := map[string]string{"acme": "25", "beta.co": "3.5"}
	checkLedger(t, s, credits)

	// New records go in the compact form next to the old ones; an old id is still settled.
	old := allRecords(t, s)[7]
	again := old
	again.Cost = dec("5")
	mustSettle(t, s, again)
	mustSettle(t, s, rec("new-1", "acme", "0.5"))
	if n := count(t, s); n != 41 {
		t.Errorf("%d records after settling an old id again and a new one, want 41", n)
	}
	checkLedger(t, s, credits)
}
