package bbolt

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

// SetKeysUsed records when keys were last used (key id -> time), in one transaction: the
// gateway hands over what changed at most once a minute, never a write per request. A time
// older than the one stored is ignored (a key's last use never moves back), and so is an id
// with no key.
func (s *Store) SetKeysUsed(used map[string]time.Time) error {
	if len(used) == 0 {
		return nil
	}
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		for id, at := range used {
			v := b.Get([]byte(id))
			if v == nil {
				continue
			}
			var k store.Key
			if err := jsonUnmarshal(v, &k); err != nil {
				return err
			}
			at = at.UTC().Truncate(time.Second)
			if k.LastUsedAt != nil && !at.After(*k.LastUsedAt) {
				continue
			}
			k.LastUsedAt = &at
			if err := putJSON(b, id, k); err != nil {
				return err
			}
		}
		return nil
	})
}
