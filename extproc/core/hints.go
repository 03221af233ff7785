package core

import (
	"log/slog"
	"sync"
	"time"
)

// Refusals the client cannot fix itself (a paused route, an account out of credits) tell the
// client what it can do; what the operator can do, with its commands, goes to the operator's
// log (APIError.Operator), once a minute per hint however many requests meet it.

const (
	hintEvery = time.Minute
	maxHints  = 1024 // hints remembered; beyond, those older than a minute are forgotten
)

type Hints struct {
	mu   sync.Mutex
	last map[string]time.Time // hint -> when it was last logged
}

// Hint logs e's operator Hint to log unless it was logged within the last minute.
func (h *Hints) Hint(log *slog.Logger, e *APIError) {
	if e.Operator == "" {
		return
	}
	now := time.Now()
	h.mu.Lock()
	if h.last == nil {
		h.last = map[string]time.Time{}
	}
	if at, ok := h.last[e.Operator]; ok && now.Sub(at) < hintEvery {
		h.mu.Unlock()
		return
	}
	if len(h.last) >= maxHints {
		for k, at := range h.last {
			if now.Sub(at) >= hintEvery {
				delete(h.last, k)
			}
		}
		if len(h.last) >= maxHints {
			clear(h.last)
		}
	}
	h.last[e.Operator] = now
	h.mu.Unlock()
	log.Warn("clients are refused: "+e.Operator, slog.String("code", e.Code), slog.Int("status", e.Status))
}
