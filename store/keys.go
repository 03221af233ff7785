package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/shopspring/decimal"
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

// KeyOptions are the settings of a new key.
type KeyOptions struct {
	Name string
	// MonthlyLimit caps the key's spend per UTC calendar month; nil means no limit. Must be >= 0.
	MonthlyLimit *decimal.Decimal
	// Models restricts the key to these model ids or route names; nil or empty means all.
	Models []string
}

// CreateKey makes a key for account and returns its record and the secret, which is shown once
// and never stored. The account must exist (CreateAccount); otherwise the error wraps ErrNotFound
// and says how to create it. Invalid options wrap ErrInvalid.
func (s *Store) CreateKey(account string, opts KeyOptions) (Key, string, error) {
	if account == "" {
		return Key{}, "", errorOf(ErrInvalid, "store: a key needs an account")
	}
	if err := validAccountID(account); err != nil {
		return Key{}, "", err
	}
	var limit *decimal.Decimal
	if opts.MonthlyLimit != nil {
		if opts.MonthlyLimit.Sign() < 0 {
			return Key{}, "", errorOf(ErrInvalid, "monthly limit %s is negative", opts.MonthlyLimit)
		}
		l := *opts.MonthlyLimit
		limit = &l
	}
	var models []string
	seen := make(map[string]bool, len(opts.Models))
	for _, m := range opts.Models {
		if m == "" {
			return Key{}, "", errorOf(ErrInvalid, "a key's model list has an empty model id")
		}
		if !seen[m] {
			seen[m] = true
			models = append(models, m)
		}
	}
	id, err := newID()
	if err != nil {
		return Key{}, "", err
	}
	secret, err := newSecret()
	if err != nil {
		return Key{}, "", err
	}
	k := withSecret(Key{
		ID: id, Account: account, Name: opts.Name, CreatedAt: time.Now().UTC(),
		MonthlyLimit: limit, Models: models,
	}, secret)
	err = s.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketAccounts).Get([]byte(account)) == nil {
			return errorOf(ErrNotFound, "account %q does not exist; create it with: tollway accounts create %s --credits N", account, account)
		}
		return putJSON(tx.Bucket(bucketKeys), k.ID, k)
	})
	if err != nil {
		return Key{}, "", err
	}
	return k, secret, nil
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
			return "", errorOf(ErrInvalid, "key %q is revoked; create a new key instead", id)
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
	err := s.update(func(tx *bolt.Tx) error {
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
