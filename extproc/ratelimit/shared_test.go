package ratelimit

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// memShares is store.RateShares in memory (the same grant rule as the Postgres one), counting
// its calls; each replica binds it to its name (as).
type memShares struct {
	mu    sync.Mutex
	rows  map[string]map[string]*shareRow // owner -> replica -> row
	calls int
	fail  bool
}

type shareRow struct {
	want, share int64
	expires     time.Time
}

func (m *memShares) grant(replica string, wants map[string]int64, now, expires time.Time) (map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.fail {
		return nil, errors.New("store unreachable")
	}
	out := map[string]int64{}
	for id, want := range wants {
		if m.rows[id] == nil {
			m.rows[id] = map[string]*shareRow{}
		}
		var wants, shares int64
		for r, row := range m.rows[id] {
			if r != replica && row.expires.After(now) {
				wants, shares = wants+row.want, shares+row.share
			}
		}
		g := min(want, ShareWhole-shares)
		if wants+want > ShareWhole {
			g = min(g, want*ShareWhole/(wants+want))
		}
		g = max(g, 0)
		m.rows[id][replica] = &shareRow{want, g, expires}
		out[id] = g
	}
	return out, nil
}

type boundShares struct {
	m    *memShares
	name string
}

func (b boundShares) ShareRates(wants map[string]int64, now, expires time.Time) (map[string]int64, error) {
	return b.m.grant(b.name, wants, now, expires)
}

// cluster is n limiters sharing m on clock c.
func cluster(c *clock, m *memShares, n int) []*Limiter {
	var ls []*Limiter
	for i := range n {
		l := New(c.now)
		l.Share(boundShares{m, string(rune('a' + i))}, nil)
		ls = append(ls, l)
	}
	return ls
}

// TestSharedAcrossReplicas: three replicas sharing one store, sent 2x the limit in all (in turn,
// across minute boundaries, for four minutes), let through at most the limit plus one per
// replica in any 60 s window and (for limits of 60 and more), once the shares the replicas
// were granted in the first seconds are usable (61 s later), about the limit a minute; each
// calls the store once a renewal (once a second) and once for the owner's first request,
// never per request.
func TestSharedAcrossReplicas(t *testing.T) {
	for _, limit := range []int64{3, 60, 600, 6000} {
		c := &clock{t0}
		m := &memShares{rows: map[string]map[string]*shareRow{}}
		ls := cluster(c, m, 3)
		step := time.Minute / time.Duration(2*limit)
		var passed []time.Time
		sent, steady := 0, int64(0)
		next := t0.Add(renewEvery)
		for i := 0; c.t.Before(t0.Add(4 * time.Minute)); i++ {
			for !c.t.Before(next) {
				for _, l := range ls {
					l.Renew()
				}
				next = next.Add(renewEvery)
			}
			if g, _, _ := ls[i%3].Admit("key:a", Limits{Requests: limit}, 0); g != nil {
				passed = append(passed, c.t)
				if c.t.Sub(t0) >= time.Minute {
					steady++
				}
			}
			sent++
			c.t = c.t.Add(step)
		}
		if n := maxInWindow(passed); int64(n) > limit+3 {
			t.Errorf("limit %d: %d passed in one 60 s window", limit, n)
		}
		if limit >= 60 && (steady < 3*limit*9/10 || steady > 3*limit+3) {
			t.Errorf("limit %d: %d passed in the last 3 minutes, want about %d", limit, steady, 3*limit)
		}
		if m.calls > 3*240+3 {
			t.Errorf("limit %d: %d store calls for %d requests", limit, m.calls, sent)
		}
		t.Logf("limit %d: %d of %d let through (%d in the last 3 minutes, %d in the fullest 60 s), %d store calls", limit, len(passed), sent, steady, maxInWindow(passed), m.calls)
	}
}

// TestSharedShiftingTraffic: the traffic moving from one replica to another: the share follows
// (usable once the old replica's admissions have left the window and the new share has been
// held 61 s), and the bound holds throughout.
func TestSharedShiftingTraffic(t *testing.T) {
	c := &clock{t0}
	m := &memShares{rows: map[string]map[string]*shareRow{}}
	ls := cluster(c, m, 2)
	const limit = 120
	step := time.Minute / (2 * limit)
	var passed []time.Time
	next := t0.Add(renewEvery)
	late := 0 // let through by b in the last minute
	for c.t.Before(t0.Add(4 * time.Minute)) {
		for !c.t.Before(next) {
			ls[0].Renew()
			ls[1].Renew()
			next = next.Add(renewEvery)
		}
		l := ls[0]
		if c.t.Sub(t0) >= 90*time.Second {
			l = ls[1] // all traffic moves to b
		}
		if g, _, _ := l.Admit("key:a", Limits{Requests: limit}, 0); g != nil {
			passed = append(passed, c.t)
			if c.t.Sub(t0) >= 3*time.Minute {
				late++
			}
		}
		c.t = c.t.Add(step)
	}
	if n := maxInWindow(passed); n > limit+2 {
		t.Errorf("%d passed in one 60 s window", n)
	}
	if late < limit*9/10 {
		t.Errorf("b let through %d in the last minute, once it had all the traffic: its share did not follow", late)
	}
	t.Logf("%d let through, %d by b in the last minute", len(passed), late)
}

// TestSharedStoreDown: a replica meeting an owner while the store cannot be reached limits it
// alone; one holding a share keeps it.
func TestSharedStoreDown(t *testing.T) {
	c := &clock{t0}
	m := &memShares{rows: map[string]map[string]*shareRow{}, fail: true}
	l := cluster(c, m, 1)[0]
	lim := Limits{Requests: 60}
	for i := range 60 {
		if g, _, _ := l.Admit("k", lim, 0); g == nil {
			t.Fatalf("request %d refused while the store is out of reach", i+1)
		}
	}
	if g, _, _ := l.Admit("k", lim, 0); g != nil {
		t.Fatal("the store out of reach: the replica no longer limits at all")
	}
	l.Renew()
	c.t = c.t.Add(61 * time.Second)
	for i := range 60 {
		if g, _, _ := l.Admit("k", lim, 0); g == nil {
			t.Fatalf("request %d refused: the share held was dropped when its renewal failed", i+1)
		}
	}
}

// TestSharedGrowthUsableAfterAMinute: a replica's share that grows is usable only once held
// 61 s, when what another replica admitted on it has left every window: a burst of 60 on one
// replica, the traffic then on the other, which refuses (its Retry-After pointing at when its
// share becomes usable) until the burst's minute is over, then lets its share through.
func TestSharedGrowthUsableAfterAMinute(t *testing.T) {
	c := &clock{t0}
	m := &memShares{rows: map[string]map[string]*shareRow{}}
	ls := cluster(c, m, 2)
	lim := Limits{Requests: 60}
	for i := range 60 {
		if g, _, _ := ls[0].Admit("k", lim, 0); g == nil {
			t.Fatalf("a's burst: request %d refused", i+1)
		}
	}
	var passed []time.Time
	for range 60 {
		passed = append(passed, c.t)
	}
	firstB := time.Duration(0)
	for s := 1; s <= 130; s++ {
		c.t = t0.Add(time.Duration(s) * time.Second)
		ls[0].Renew()
		ls[1].Renew()
		g, wait, _ := ls[1].Admit("k", lim, 0)
		if g == nil {
			if wait <= 0 || wait > 61*time.Second {
				t.Fatalf("b refused at %ds with wait %v", s, wait)
			}
			continue
		}
		passed = append(passed, c.t)
		if firstB == 0 {
			firstB = c.t.Sub(t0)
		}
	}
	if n := maxInWindow(passed); n > 60+2 {
		t.Fatalf("%d passed in one 60 s window (b first at %v)", n, firstB)
	}
	if firstB < 61*time.Second || firstB > 70*time.Second {
		t.Fatalf("b let its first request through at %v: want once the burst's minute is over, soon after", firstB)
	}
	t.Logf("b first at %v, %d in all, %d in the fullest 60 s", firstB, len(passed), maxInWindow(passed))
}
