package bbolt

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "dir", "tollway.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s, path
}

func TestOpenCreatesDirectoryAndReopens(t *testing.T) {
	s, path := openTemp(t)
	if err := s.PutProvider(store.Provider{Name: "p", Type: "openai", BaseURL: "https://x/v1", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("store file not created: %v", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("store file mode = %v, want 0600", perm)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer s2.Close()
	cat, err := s2.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Providers) != 1 || cat.Providers[0].Name != "p" {
		t.Fatalf("after reopen providers = %+v, want the one written before Close", cat.Providers)
	}
}

func TestOpenLockedFailsFast(t *testing.T) {
	t.Parallel()
	s, path := openTemp(t)
	defer s.Close()
	start := time.Now()
	s2, err := Open(path)
	elapsed := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a locked store succeeded")
	}
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second Open error = %v, want one wrapping ErrLocked", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("lock error %q does not name the path %s", err, path)
	}
	if elapsed > 5*time.Second {
		t.Errorf("second Open took %v; it must time out after about a second", elapsed)
	}
}

func TestOpenNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not bolt"), 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a non-bbolt file succeeded")
	}
	if errors.Is(err, store.ErrLocked) {
		t.Fatalf("corrupt file reported as locked: %v", err)
	}
}

func providerNames(ps []store.Provider) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+"/"+string(p.Source))
	}
	return out
}

func modelIDs(ms []store.Model) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID+"/"+string(m.Source))
	}
	return out
}

func TestReplaceConfig(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()

	first := store.Catalog{
		Providers: []store.Provider{
			{Name: "openai", Type: "openai", BaseURL: "https://api.openai.com/v1", APIKeyRef: "${OPENAI_API_KEY}"},
			{Name: "old", Type: "openai", BaseURL: "http://127.0.0.1:1/v1"},
		},
		Models: []store.Model{
			{ID: "gpt", Providers: []store.ModelProvider{{Provider: "openai", Model: "gpt-4o"}}},
			{ID: "stale", Providers: []store.ModelProvider{{Provider: "old", Model: "x"}}},
		},
	}
	if err := s.ReplaceConfig(first); err != nil {
		t.Fatalf("ReplaceConfig: %v", err)
	}
	// Records written through the admin API.
	if err := s.PutProvider(store.Provider{Name: "adminp", Type: "openai", BaseURL: "http://127.0.0.1:2/v1", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutModel(store.Model{ID: "adminm", Providers: []store.ModelProvider{{Provider: "adminp", Model: "m"}}, Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutModel(store.Model{ID: "taken", Providers: []store.ModelProvider{{Provider: "adminp", Model: "m"}}, Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}

	second := store.Catalog{
		Providers: []store.Provider{
			{Name: "openai", Type: "openai", BaseURL: "https://api.openai.com/v2", APIKeyRef: "${OPENAI_API_KEY}"},
		},
		Models: []store.Model{
			{ID: "gpt", Name: "GPT", Providers: []store.ModelProvider{{Provider: "openai", Model: "gpt-4.1"}}},
			// The file names an admin-owned record: the file wins and owns it from now on.
			{ID: "taken", Providers: []store.ModelProvider{{Provider: "openai", Model: "o"}}},
		},
	}
	if err := s.ReplaceConfig(second); err != nil {
		t.Fatalf("second ReplaceConfig: %v", err)
	}
	cat, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := providerNames(cat.Providers), []string{"adminp/admin", "openai/config"}; !reflect.DeepEqual(got, want) {
		t.Errorf("providers = %v, want %v", got, want)
	}
	if got, want := modelIDs(cat.Models), []string{"adminm/admin", "gpt/config", "taken/config"}; !reflect.DeepEqual(got, want) {
		t.Errorf("models = %v, want %v", got, want)
	}
	for _, p := range cat.Providers {
		if p.Name == "openai" && p.BaseURL != "https://api.openai.com/v2" {
			t.Errorf("config provider not replaced: base_url %q", p.BaseURL)
		}
	}
	for _, m := range cat.Models {
		switch m.ID {
		case "gpt":
			if m.Name != "GPT" || len(m.Providers) != 1 || m.Providers[0].Model != "gpt-4.1" {
				t.Errorf("config model not replaced: %+v", m)
			}
		case "taken":
			if len(m.Providers) != 1 || m.Providers[0].Provider != "openai" {
				t.Errorf("admin model named by the file not replaced: %+v", m)
			}
		}
	}

	// An empty config removes every config record and nothing else.
	if err := s.ReplaceConfig(store.Catalog{}); err != nil {
		t.Fatal(err)
	}
	cat, err = s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := providerNames(cat.Providers), []string{"adminp/admin"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after empty config providers = %v, want %v", got, want)
	}
	if got, want := modelIDs(cat.Models), []string{"adminm/admin"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after empty config models = %v, want %v", got, want)
	}
}

func TestRestoreCatalog(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if err := s.ReplaceConfig(store.Catalog{
		Providers: []store.Provider{{Name: "a", Type: "openai", BaseURL: "http://127.0.0.1:1/v1"}},
		Models:    []store.Model{{ID: "m1", Providers: []store.ModelProvider{{Provider: "a", Model: "x"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutProvider(store.Provider{Name: "b", Type: "openai", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	mustAccount(t, s, "acct", "0")
	if _, _, err := s.CreateKey("acct", store.KeyOptions{Name: "k"}); err != nil {
		t.Fatal(err)
	}

	// A change that is then rejected and undone.
	if err := s.PutProvider(store.Provider{Name: "c", Type: "openai", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteModel("m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutProvider(store.Provider{Name: "a", Type: "changed", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}

	if err := s.RestoreCatalog(before); err != nil {
		t.Fatalf("RestoreCatalog: %v", err)
	}
	after, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("catalog after restore = %+v\nwant %+v", after, before)
	}
	keys, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Errorf("RestoreCatalog touched keys: %d keys, want 1", len(keys))
	}
}

func TestDeleteNotFound(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	for name, del := range map[string]func(string) error{
		"provider": s.DeleteProvider,
		"model":    s.DeleteModel,
	} {
		err := del("nope")
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Delete%s of a missing record: %v, want ErrNotFound", name, err)
			continue
		}
		if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("Delete%s error %q should name the kind and the key", name, err)
		}
	}
	if err := s.PutModel(store.Model{ID: "m", Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteModel("m"); err != nil {
		t.Fatalf("DeleteModel of an existing model: %v", err)
	}
	if err := s.DeleteModel("m"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteModel: %v, want ErrNotFound", err)
	}
}

func TestCreateKey(t *testing.T) {
	s, path := openTemp(t)
	mustAccount(t, s, "acct-1", "0")
	k, secret, err := s.CreateKey("acct-1", store.KeyOptions{Name: "laptop"})
	if err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if !strings.HasPrefix(secret, store.KeyPrefix) {
		t.Errorf("secret %q lacks the %s prefix", secret, store.KeyPrefix)
	}
	if !store.WellFormedKey(secret) {
		t.Errorf("secret %q is not WellFormedKey", secret)
	}
	sum := sha256.Sum256([]byte(secret))
	if k.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("Hash = %s, want hex(sha256(secret)) = %x", k.Hash, sum)
	}
	if h := store.HashKey(secret); hex.EncodeToString(h[:]) != k.Hash {
		t.Errorf("HashKey disagrees with the stored hash")
	}
	if !strings.HasPrefix(k.ID, "key_") || k.Account != "acct-1" || k.Name != "laptop" || k.RevokedAt != nil {
		t.Errorf("key record = %+v", k)
	}
	if !strings.HasPrefix(secret, k.Prefix) || len(k.Prefix) >= len(secret) || len(k.Prefix) <= len(store.KeyPrefix) {
		t.Errorf("Prefix %q must be a short leading part of the secret", k.Prefix)
	}
	if k.CreatedAt.IsZero() || k.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt = %v, want a UTC time", k.CreatedAt)
	}
	got, err := s.GetKey(k.ID)
	if err != nil {
		t.Fatalf("GetKey: %v", err)
	}
	if got.Hash != k.Hash || got.Account != k.Account || got.Prefix != k.Prefix || !got.CreatedAt.Equal(k.CreatedAt) {
		t.Errorf("GetKey = %+v, want %+v", got, k)
	}

	_, secret2, err := s.CreateKey("acct-1", store.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret2 == secret {
		t.Error("two CreateKey calls returned the same secret")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []string{secret, secret2} {
		if bytes.Contains(raw, []byte(sec)) {
			t.Errorf("the secret %s... is stored in clear in the bbolt file", sec[:10])
		}
		body := strings.TrimPrefix(sec, store.KeyPrefix)
		if bytes.Contains(raw, []byte(body)) {
			t.Errorf("the secret body is stored in clear in the bbolt file")
		}
	}
	// The check above must be able to fail: the hash is in the file.
	if !bytes.Contains(raw, []byte(k.Hash)) {
		t.Error("the key hash is not in the file; the byte search cannot be trusted")
	}
}

func TestCreateKeyNeedsAccount(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if _, _, err := s.CreateKey("", store.KeyOptions{Name: "x"}); err == nil {
		t.Fatal("CreateKey with no account succeeded")
	} else if !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CreateKey with no account: %v, want ErrInvalid", err)
	}
	ks, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 0 {
		t.Errorf("a failed CreateKey stored %d keys", len(ks))
	}
}

func TestWellFormedKey(t *testing.T) {
	body := strings.Repeat("A", 43)
	tests := []struct {
		in   string
		want bool
	}{
		{"ale-" + body, true},
		{"ale-" + strings.Repeat("a_-9", 10) + "xyz", true},
		{"ale-" + body[:42], false},
		{"ale-" + body + "A", false},
		{"sk-" + body, false},
		{"ALE-" + body, false},
		{"ale-" + body[:42] + "=", false},
		{"ale-" + body[:42] + "+", false},
		{" ale-" + body, false},
		{"", false},
	}
	for _, tt := range tests {
		if got := store.WellFormedKey(tt.in); got != tt.want {
			t.Errorf("WellFormedKey(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestRevokeKey(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "0")
	k, _, err := s.CreateKey("a", store.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.RevokeKey(k.ID)
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if r.RevokedAt == nil {
		t.Fatal("RevokeKey returned a record with no RevokedAt")
	}
	if r.Hash != k.Hash || r.ID != k.ID {
		t.Errorf("RevokeKey changed identity: %+v -> %+v", k, r)
	}
	stored, err := s.GetKey(k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.RevokedAt == nil || !stored.RevokedAt.Equal(*r.RevokedAt) {
		t.Errorf("stored RevokedAt = %v, want %v", stored.RevokedAt, r.RevokedAt)
	}
	// Revoking twice keeps the first revocation time.
	r2, err := s.RevokeKey(k.ID)
	if err != nil {
		t.Fatalf("second RevokeKey: %v", err)
	}
	if r2.RevokedAt == nil || !r2.RevokedAt.Equal(*r.RevokedAt) {
		t.Errorf("second revoke moved RevokedAt: %v -> %v", r.RevokedAt, r2.RevokedAt)
	}
	if _, err := s.RevokeKey("key_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeKey of a missing key: %v, want ErrNotFound", err)
	}
}

func TestRotateKey(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	mustAccount(t, s, "a", "0")
	k, secret, err := s.CreateKey("a", store.KeyOptions{Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	r, secret2, err := s.RotateKey(k.ID)
	if err != nil {
		t.Fatalf("RotateKey: %v", err)
	}
	if secret2 == secret || !store.WellFormedKey(secret2) {
		t.Errorf("rotated secret %q: want a new well-formed key", secret2)
	}
	if r.Hash == k.Hash {
		t.Error("RotateKey left the hash unchanged")
	}
	if h := store.HashKey(secret2); r.Hash != hex.EncodeToString(h[:]) {
		t.Error("rotated hash is not sha256 of the new secret")
	}
	if !strings.HasPrefix(secret2, r.Prefix) {
		t.Errorf("Prefix %q is not the start of the new secret", r.Prefix)
	}
	if r.ID != k.ID || r.Account != k.Account || r.Name != k.Name || !r.CreatedAt.Equal(k.CreatedAt) {
		t.Errorf("RotateKey changed id/account/name/created: %+v -> %+v", k, r)
	}
	stored, err := s.GetKey(k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Hash != r.Hash {
		t.Error("rotated hash not persisted")
	}

	if _, err := s.RevokeKey(k.ID); err != nil {
		t.Fatal(err)
	}
	_, secret3, err := s.RotateKey(k.ID)
	if err == nil {
		t.Fatal("RotateKey of a revoked key succeeded")
	}
	if secret3 != "" {
		t.Error("a failed rotation returned a secret")
	}
	if !strings.Contains(err.Error(), "revoked") {
		t.Errorf("error %q should say the key is revoked", err)
	}
	after, err := s.GetKey(k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Hash != r.Hash {
		t.Error("a failed rotation changed the stored hash")
	}
	if _, _, err := s.RotateKey("key_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RotateKey of a missing key: %v, want ErrNotFound", err)
	}
}

func TestGetKeyNotFound(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	_, err := s.GetKey("key_nope")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetKey: %v, want ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), "key_nope") {
		t.Errorf("error %q does not name the key id", err)
	}
}

func TestKeysOldestFirst(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// bbolt iterates by id; creation order is deliberately different.
	for _, k := range []store.Key{
		{ID: "a", Account: "x", CreatedAt: base.Add(2 * time.Hour)},
		{ID: "b", Account: "x", CreatedAt: base.Add(3 * time.Hour)},
		{ID: "c", Account: "x", CreatedAt: base},
		{ID: "d", Account: "x", CreatedAt: base.Add(time.Hour)},
	} {
		if err := s.PutKey(k); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := s.Keys()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range ks {
		ids = append(ids, k.ID)
	}
	if want := []string{"c", "d", "a", "b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Keys order = %v, want %v (oldest first)", ids, want)
	}
}

func TestCatalogSorted(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	if err := s.ReplaceConfig(store.Catalog{
		Providers: []store.Provider{{Name: "zeta"}, {Name: "alpha"}, {Name: "mid"}},
		Models:    []store.Model{{ID: "z"}, {ID: "a"}},
	}); err != nil {
		t.Fatal(err)
	}
	cat, err := s.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := providerNames(cat.Providers), []string{"alpha/config", "mid/config", "zeta/config"}; !reflect.DeepEqual(got, want) {
		t.Errorf("providers = %v, want %v", got, want)
	}
	if got, want := modelIDs(cat.Models), []string{"a/config", "z/config"}; !reflect.DeepEqual(got, want) {
		t.Errorf("models = %v, want %v", got, want)
	}
}
