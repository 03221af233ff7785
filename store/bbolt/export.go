package bbolt

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// What only the file can list, for copying a gateway's state to another store (`tollway store
// migrate`): the store interfaces read the rest.

// Holds are the records of requests admitted and not settled (a stop cut them).
func (s *Store) Holds() ([]store.UsageRecord, error) {
	var out []store.UsageRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(k, v []byte) error {
			var rec store.UsageRecord
			if err := decodeHold(k, v, &rec); err != nil {
				return err
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// TaskIDs are the ids of every task kept, open or finished.
func (s *Store) TaskIDs() ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTasks).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// CallbackSecrets are the accounts' callback signing secrets, by account.
func (s *Store) CallbackSecrets() (map[string]string, error) {
	out := map[string]string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSecrets).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	return out, err
}

// Credentials are the x402 credentials used, each with when it may be forgotten.
func (s *Store) Credentials() (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCredentials).ForEach(func(k, v []byte) error {
			if len(v) < 8 {
				return store.Errorf(store.ErrInvalid, "store: credential %s: its keep-until time is damaged", store.ShortID(string(k)))
			}
			out[string(k)] = usageKeyTime(v)
			return nil
		})
	})
	return out, err
}
