package bbolt

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// CreateKey makes a key for account and returns its record and the secret, which is shown once
// and never stored. The account must exist (CreateAccount); otherwise the error wraps ErrNotFound
// and says how to create it. Invalid options wrap ErrInvalid.
func (s *Store) CreateKey(account string, opts store.KeyOptions) (store.Key, string, error) {
	k, secret, err := store.NewKey(account, opts, time.Now())
	if err != nil {
		return store.Key{}, "", err
	}
	err = s.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketAccounts).Get([]byte(account)) == nil {
			return store.AccountMissing(account)
		}
		return putJSON(tx.Bucket(bucketKeys), k.ID, k)
	})
	if err != nil {
		return store.Key{}, "", err
	}
	s.changed(store.TopicKeys, k.ID)
	return k, secret, nil
}

// RevokeKey marks a key revoked; requests with it fail from the next runtime snapshot on.
func (s *Store) RevokeKey(id string) (store.Key, error) {
	return s.updateKey(id, func(k *store.Key) error {
		k.Revoke(time.Now())
		return nil
	})
}

// RotateKey replaces a key's secret, keeping its id, account and name; the old secret stops working.
func (s *Store) RotateKey(id string) (store.Key, string, error) {
	var secret string
	k, err := s.updateKey(id, func(k *store.Key) (err error) {
		secret, err = k.Rotate()
		return err
	})
	return k, secret, err
}

func (s *Store) updateKey(id string, fn func(*store.Key) error) (store.Key, error) {
	var k store.Key
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("key %q: %w", id, store.ErrNotFound)
		}
		if err := jsonUnmarshal(v, &k); err != nil {
			return err
		}
		if err := fn(&k); err != nil {
			return err
		}
		return putJSON(b, id, k)
	})
	if err == nil {
		s.changed(store.TopicKeys, id)
	}
	return k, err
}
