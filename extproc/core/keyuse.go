package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// KeyUse remembers, in memory, when each key last authenticated a request (to the second), and
// which keys changed since the gateway last saved them. A request costs one atomic load, and
// one store per key per second at most; the store is written by the gateway at most once a
// minute (SaveKeysUsed), never per request.
type KeyUse struct {
	last    sync.Map // key id -> *atomic.Int64 (unix seconds)
	mu      sync.Mutex
	changed map[string]bool // ids used since the last save
}

// Touch records that key id was used now.
func (u *KeyUse) Touch(id string, now time.Time) {
	sec := now.Unix()
	v, ok := u.last.Load(id)
	if !ok {
		v, _ = u.last.LoadOrStore(id, new(atomic.Int64))
	}
	at := v.(*atomic.Int64)
	for {
		old := at.Load()
		if old >= sec {
			return // this second is recorded (or a later one, by a request racing this one)
		}
		if at.CompareAndSwap(old, sec) {
			break
		}
	}
	u.mu.Lock()
	if u.changed == nil {
		u.changed = map[string]bool{}
	}
	u.changed[id] = true
	u.mu.Unlock()
}

// LastUse is when key id was last used since the gateway started (false: not since then).
func (u *KeyUse) LastUse(id string) (time.Time, bool) {
	v, ok := u.last.Load(id)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(v.(*atomic.Int64).Load(), 0).UTC(), true
}

// Save hands Save the keys used since the last Save that succeeded, with when each was
// last used. When Save fails they are kept for the next call, and its error returned.
func (u *KeyUse) Save(save func(map[string]time.Time) error) error {
	u.mu.Lock()
	ids := u.changed
	u.changed = nil
	u.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	used := make(map[string]time.Time, len(ids))
	for id := range ids {
		used[id], _ = u.LastUse(id)
	}
	err := save(used)
	if err != nil {
		u.mu.Lock()
		if u.changed == nil {
			u.changed = map[string]bool{}
		}
		for id := range ids {
			u.changed[id] = true
		}
		u.mu.Unlock()
	}
	return err
}
