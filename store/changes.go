package store

import (
	"context"
	"sync"
)

// Topic is a kind of record whose changes Changes tells of.
type Topic string

const (
	TopicCatalog  Topic = "catalog"  // providers, models, routes
	TopicKeys     Topic = "keys"     // API keys (not their last use)
	TopicAccounts Topic = "accounts" // accounts and their credits (not settled debits)
)

// Change says a record of Topic changed: ID names it, "" means any number of them. Local says
// the change was committed through this same Store (this process), so what made it has
// already applied it; a change of unknown origin (a coalesced one, a reload) is not Local.
type Change struct {
	Topic Topic
	ID    string
	Local bool
}

// maxBehind is how many changes a subscriber may have waiting before they are coalesced.
const maxBehind = 1024

// Hub fans changes out to subscribers: an implementation publishes each change it learns of
// (committed by itself, or by another process), and Subscribe implements Changes. The zero
// value is ready.
type Hub struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

type subscriber struct {
	mu      sync.Mutex
	pending []Change
	wake    chan struct{}
}

// Publish hands c to every subscriber; it never blocks on one.
func (h *Hub) Publish(c Change) {
	h.mu.Lock()
	subs := make([]*subscriber, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		s.add(c)
	}
}

func (s *subscriber) add(c Change) {
	s.mu.Lock()
	s.pending = append(s.pending, c)
	if len(s.pending) > maxBehind {
		s.pending = coalesce(s.pending)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// coalesce turns changes into one Change per topic, without an ID, in the order topics came.
func coalesce(cs []Change) []Change {
	seen := map[Topic]bool{}
	out := make([]Change, 0, 3)
	for _, c := range cs {
		if !seen[c.Topic] {
			seen[c.Topic] = true
			out = append(out, Change{Topic: c.Topic})
		}
	}
	return out
}

// Subscribe implements Changes.Subscribe over what is published from its return on.
func (h *Hub) Subscribe(ctx context.Context) <-chan Change {
	s := &subscriber{wake: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	out := make(chan Change)
	go func() {
		defer close(out)
		defer func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			s.mu.Lock()
			batch := s.pending
			s.pending = nil
			s.mu.Unlock()
			for _, c := range batch {
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
