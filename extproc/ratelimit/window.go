package ratelimit

// The sliding window one rate of one owner is counted in: what was admitted in each of the
// last 61 seconds (a ring of per-second buckets and their sum). The window at now sums the
// buckets of the seconds floor(now)-60 to floor(now); so for any 60-second window (a, a+60]
// and the last admission u in it, the sum checked at u covered all of (a, u]: admitting only
// when sum + cost <= limit lets at most the limit through in any 60 seconds.

import "time"

// buckets is how many seconds a window counts: the current one and the 60 before it.
const buckets = 61

type window struct {
	n    [buckets]int64
	head int64 // the newest second the ring holds; its buckets are head-60..head
	sum  int64
}

// second is t's bucket: its unix second.
func second(t time.Time) int64 { return t.Unix() }

func slot(sec int64) int { return int(((sec % buckets) + buckets) % buckets) }

// advance moves the window to the second sec: the buckets that left it are emptied.
func (w *window) advance(sec int64) {
	if sec <= w.head {
		return
	}
	if sec-w.head >= buckets {
		w.n, w.sum = [buckets]int64{}, 0
	} else {
		for s := w.head + 1; s <= sec; s++ {
			w.sum -= w.n[slot(s)]
			w.n[slot(s)] = 0
		}
	}
	w.head = sec
}

// holds reports whether the bucket of sec is still in the window.
func (w *window) holds(sec int64) bool { return sec <= w.head && sec > w.head-buckets }

// add counts n more in the bucket of sec (advanced to), or takes back up to -n from it when
// n is negative (never below nothing); a bucket that left the window is not touched.
func (w *window) add(sec, n int64) {
	w.advance(sec)
	if !w.holds(sec) {
		return
	}
	i := slot(sec)
	n = max(n, -w.n[i])
	w.n[i] += n
	w.sum += n
}

// wait is how long from now until enough of the oldest buckets leave the window for cost to
// fit under limit (bucket s leaves at s+61); ok is false when it never fits.
func (w *window) wait(cost, limit int64, now time.Time) (d time.Duration, ok bool) {
	if cost > limit {
		return 0, false
	}
	excess := w.sum + cost - limit
	if excess <= 0 {
		return 0, true
	}
	for s := w.head - buckets + 1; s <= w.head; s++ {
		if excess -= w.n[slot(s)]; excess <= 0 {
			return time.Unix(s+buckets, 0).Sub(now), true
		}
	}
	return 0, false
}

// reset is how long until the window holds nothing any more: until its newest non-empty
// bucket leaves it.
func (w *window) reset(now time.Time) time.Duration {
	for s := w.head; s > w.head-buckets; s-- {
		if w.n[slot(s)] > 0 {
			return max(time.Unix(s+buckets, 0).Sub(now), 0)
		}
	}
	return 0
}
