package store

import (
	"sync"
	"sync/atomic"
)

// OutageState is a store's current outage, read with one atomic load (request paths read it on
// every request), and a channel closed when it ends. The zero value is healthy.
type OutageState struct {
	outage    atomic.Pointer[Outage]
	mu        sync.Mutex
	recovered chan struct{} // closed when the current outage ends; nil while healthy
}

// Fail starts an outage of o unless one is going on.
func (h *OutageState) Fail(o *Outage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outage.Load() != nil {
		return
	}
	h.outage.Store(o)
	h.recovered = make(chan struct{})
}

// OK ends the outage, if any.
func (h *OutageState) OK() {
	if h.outage.Load() == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recovered != nil {
		close(h.recovered)
		h.recovered = nil
	}
	h.outage.Store(nil)
}

// Current is the outage going on, nil while healthy.
func (h *OutageState) Current() *Outage { return h.outage.Load() }

// Err is the outage as an error, nil while healthy.
func (h *OutageState) Err() error {
	if o := h.outage.Load(); o != nil {
		return o
	}
	return nil
}

// Recovery is closed when the current outage ends; nil while there is none.
func (h *OutageState) Recovery() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recovered
}
