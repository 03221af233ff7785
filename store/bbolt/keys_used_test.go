package bbolt

import (
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

// TestSetKeysUsed: a key's last use is saved to the second, never moves back, survives a
// reopen and a rotation; unknown ids are skipped.
func TestSetKeysUsed(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "a", "0")
	k, _, err := s.CreateKey("a", store.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if k.LastUsedAt != nil {
		t.Fatalf("a new key was used at %v", k.LastUsedAt)
	}
	at := time.Date(2026, 11, 23, 12, 0, 5, 700_000_000, time.FixedZone("CET", 3600))
	if err := s.SetKeysUsed(map[string]time.Time{k.ID: at, "key_gone": at}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetKeysUsed(map[string]time.Time{k.ID: at.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RotateKey(k.ID); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetKey(k.ID)
	want := time.Date(2026, 11, 23, 11, 0, 5, 0, time.UTC)
	if err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(want) || got.LastUsedAt.Location() != time.UTC {
		t.Fatalf("LastUsedAt = %v (%v), want %v", got.LastUsedAt, err, want)
	}
	if _, err := s.GetKey("key_gone"); err == nil {
		t.Fatal("an unknown id made a key")
	}
}
