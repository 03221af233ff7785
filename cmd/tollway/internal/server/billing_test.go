package server

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
)

// TestNotStoredLogIsBounded: a client chooses its request id; the loud line about a record that
// could not be stored names it without printing 40 KiB of it.
func TestNotStoredLogIsBounded(t *testing.T) {
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs bytes.Buffer
	q := newSettler(slog.New(slog.NewTextHandler(&logs, nil)), st)
	huge := strings.Repeat("x", 40<<10)
	q.Record(store.UsageRecord{RequestID: huge, KeyID: "key_1", Account: huge, Model: "m", Cost: decimal.New(1, -100000)})
	q.Close()
	line := logs.String()
	if !strings.Contains(line, "USAGE RECORD NOT STORED") || !strings.Contains(line, "xxxxxxxx") {
		t.Fatalf("no NOT STORED line naming the record: %q", store.ShortID(line))
	}
	if len(line) > 1024 {
		t.Errorf("the NOT STORED line is %d bytes: it prints the client's id", len(line))
	}
}
