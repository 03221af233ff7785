package bbolt

// Single-use payment credentials (x402): a credential is claimed, committed and fsynced, before
// the business call it pays for runs, so a replay, the same credential on another endpoint or
// fifty concurrent copies of it find it used. It is remembered until it could no longer settle
// (its validBefore / deadline plus a skew), then swept by PruneCredentials.

import (
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

var (
	bucketCredentials       = []byte("x402_credentials")        // key -> keep-until (8 bytes, unix ns)
	bucketCredentialsExpiry = []byte("x402_credentials_expiry") // keep-until ‖ key, for the sweep
)

func init() {
	allBuckets = append(allBuckets, bucketCredentials, bucketCredentialsExpiry)
}

// maxCredentialKey bounds a credential key (x402's are under 200 bytes).
const maxCredentialKey = 512

// ClaimCredential records key as used until until, durably, and fails with ErrExists when it
// already is (a used credential stays used until swept, even past until).
func (s *Store) ClaimCredential(key string, until time.Time) error {
	switch {
	case key == "" || len(key) > maxCredentialKey:
		return store.Errorf(store.ErrInvalid, "store: a credential key must be 1 to %d bytes", maxCredentialKey)
	case until.Unix() <= 0 || until.Year() > 2200:
		return store.Errorf(store.ErrInvalid, "store: credential %s kept until %v: not a time the index can order", key, until)
	}
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCredentials)
		if b.Get([]byte(key)) != nil {
			return store.Errorf(store.ErrExists, "payment credential already used")
		}
		at := usageKey(until, key)
		if err := b.Put([]byte(key), at[:8]); err != nil {
			return err
		}
		return tx.Bucket(bucketCredentialsExpiry).Put(at, nil)
	})
}

// PruneCredentials deletes, in one transaction, up to limit claimed credentials kept until before
// before. Fewer than limit deleted means none is left.
func (s *Store) PruneCredentials(before time.Time, limit int) (store.PruneResult, error) {
	var res store.PruneResult
	var start time.Time
	err := s.update(func(tx *bolt.Tx) error {
		start = time.Now()
		creds, expiry := tx.Bucket(bucketCredentials), tx.Bucket(bucketCredentialsExpiry)
		old := keysBefore(expiry, usageKey(before, ""), limit)
		for _, k := range old {
			if err := expiry.Delete(k); err != nil {
				return err
			}
			// Only the record this index entry was written with (a consistent file has no other).
			if v := creds.Get(k[8:]); len(v) == 8 && binary.BigEndian.Uint64(v) == binary.BigEndian.Uint64(k[:8]) {
				if err := creds.Delete(k[8:]); err != nil {
					return err
				}
			}
		}
		res.Deleted = len(old)
		return nil
	})
	if !start.IsZero() {
		res.Held = time.Since(start)
	}
	return res, err
}
