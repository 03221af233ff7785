package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	bolt "go.etcd.io/bbolt"
)

// KeyPrefix starts every API key, as the spec writes them: ale-<key>.
const KeyPrefix = "ale-"

// A key body is 32 bytes of randomness in unpadded base64url (43 characters): too much entropy
// to brute-force, so a plain SHA-256 is the right storage hash (no slow KDF needed).
var keyFormat = regexp.MustCompile(`^ale-[A-Za-z0-9_-]{43}$`)

// WellFormedKey reports whether s has the shape of a Tollway API key.
func WellFormedKey(s string) bool { return keyFormat.MatchString(s) }

// HashKey is the stored form of a key secret.
func HashKey(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: key randomness: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: id randomness: %w", err)
	}
	return "key_" + hex.EncodeToString(b[:]), nil
}

func withSecret(k Key, secret string) Key {
	h := HashKey(secret)
	k.Hash = hex.EncodeToString(h[:])
	k.Prefix = secret[:len(KeyPrefix)+6]
	return k
}

// CreateKey makes a key for account and returns its record and the secret, which is shown once
// and never stored.
func (s *Store) CreateKey(account, name string) (Key, string, error) {
	if account == "" {
		return Key{}, "", fmt.Errorf("store: a key needs an account")
	}
	id, err := newID()
	if err != nil {
		return Key{}, "", err
	}
	secret, err := newSecret()
	if err != nil {
		return Key{}, "", err
	}
	k := withSecret(Key{ID: id, Account: account, Name: name, CreatedAt: time.Now().UTC()}, secret)
	return k, secret, s.PutKey(k)
}

// RevokeKey marks a key revoked; requests with it fail from the next runtime snapshot on.
func (s *Store) RevokeKey(id string) (Key, error) {
	return s.updateKey(id, func(k *Key) (string, error) {
		if k.RevokedAt == nil {
			now := time.Now().UTC()
			k.RevokedAt = &now
		}
		return "", nil
	})
}

// RotateKey replaces a key's secret, keeping its id, account and name; the old secret stops working.
func (s *Store) RotateKey(id string) (Key, string, error) {
	var secret string
	k, err := s.updateKey(id, func(k *Key) (string, error) {
		if k.RevokedAt != nil {
			return "", fmt.Errorf("key %q is revoked; create a new key instead", id)
		}
		var err error
		secret, err = newSecret()
		if err != nil {
			return "", err
		}
		*k = withSecret(*k, secret)
		return secret, nil
	})
	return k, secret, err
}

func (s *Store) updateKey(id string, fn func(*Key) (string, error)) (Key, error) {
	var k Key
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("key %q: %w", id, ErrNotFound)
		}
		if err := jsonUnmarshal(v, &k); err != nil {
			return err
		}
		if _, err := fn(&k); err != nil {
			return err
		}
		return putJSON(b, id, k)
	})
	return k, err
}
