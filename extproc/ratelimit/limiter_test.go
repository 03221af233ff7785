package ratelimit

import (
	"testing"
	"time"
)

// clock is a fake clock the tests move.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.Date(2026, 11, 28, 14, 59, 30, 0, time.UTC) // 30 s before a minute's end

// maxInWindow is the most admissions at any 60-second window of times (sorted).
func maxInWindow(at []time.Time) int {
	best, lo := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= time.Minute {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// TestTwiceTheRateAcrossAMinuteBoundary: a client sending at 2x the limit for three minutes,
// across minute boundaries, gets at most the limit plus one through in any 60-second window,
// and about the limit per minute overall (a fixed minute would let 2x through at a boundary).
func TestTwiceTheRateAcrossAMinuteBoundary(t *testing.T) {
	for _, limit := range []int64{1, 2, 7, 60, 600} {
		c := &clock{t0}
		l := New(c.now)
		step := time.Minute / time.Duration(2*limit)
		var passed []time.Time
		for c.t.Before(t0.Add(3 * time.Minute)) {
			if g, _, _ := l.Admit("key_a", Limits{Requests: limit}, 0); g != nil {
				passed = append(passed, c.t)
			}
			c.t = c.t.Add(step)
		}
		if n := maxInWindow(passed); int64(n) > limit+1 {
			t.Errorf("limit %d: %d passed in one 60 s window", limit, n)
		}
		if n := int64(len(passed)); n < 3*limit || n > 3*limit+1 {
			t.Errorf("limit %d: %d passed in 3 minutes, want about %d", limit, n, 3*limit)
		}
	}
}

// TestTokensPerMinute: tokens are charged at admission from the estimate, at most the limit
// (plus one request's) pass in any window, and settlement corrects the charge both ways.
func TestTokensPerMinute(t *testing.T) {
	c := &clock{t0}
	l := New(c.now)
	lim := Limits{Tokens: 600} // 10 a second
	var passed []time.Time
	var tokens []int64
	for i := 0; c.t.Before(t0.Add(3 * time.Minute)); i++ {
		if g, _, _ := l.Admit("k", lim, 50); g != nil {
			passed, tokens = append(passed, c.t), append(tokens, 50)
		}
		c.t = c.t.Add(2 * time.Second) // 25 tokens a second asked: 2.5x
	}
	lo, sum := 0, int64(0)
	for hi := range passed {
		sum += tokens[hi]
		for passed[hi].Sub(passed[lo]) >= time.Minute {
			sum -= tokens[lo]
			lo++
		}
		if sum > 600+50 {
			t.Fatalf("%d tokens in the window ending %v", sum, passed[hi])
		}
	}

	c.t = c.t.Add(time.Hour)
	g, _, _ := l.Admit("k", lim, 60) // 6 s of the rate
	if g == nil || g.Status.Tokens.Remaining != 540 || g.Status.Tokens.Reset != 6*time.Second {
		t.Fatalf("admitted %v, status %+v", g != nil, g.Status)
	}
	g.Settle(6) // used far less: 0.6 s
	c.t = c.t.Add(time.Second)
	g2, wait, st := l.Admit("k", lim, 1)
	if g2 == nil {
		t.Fatalf("after settling 6 tokens, refused for %v", wait)
	}
	g2.Settle(600) // used far more than its 1 token: a minute's worth
	_, wait, st = l.Admit("k", lim, 1)
	if wait < 59*time.Second || wait > 61*time.Second || st.Tokens.Remaining != 0 {
		t.Fatalf("after settling 600 tokens: wait %v, status %+v", wait, st)
	}
}

// TestRefusedCostsNothingAndRefund: a refusal charges nothing and says how long to wait; a
// refunded grant gives its request back; owners are independent.
func TestRefusedCostsNothingAndRefund(t *testing.T) {
	c := &clock{t0}
	l := New(c.now)
	lim := Limits{Requests: 2} // one per 30 s
	g, _, _ := l.Admit("a", lim, 0)
	if g == nil || g.Status.Requests.Remaining != 1 || g.Status.Requests.Reset != 30*time.Second {
		t.Fatalf("first: %+v", g)
	}
	for range 5 {
		c.t = c.t.Add(time.Second)
		if g, wait, st := l.Admit("a", lim, 0); g != nil || st.Requests.Remaining != 1 || wait != 15*time.Second-(c.t.Sub(t0)) {
			t.Fatalf("refused at %v: grant %v wait %v status %+v", c.t.Sub(t0), g != nil, wait, st)
		}
	}
	if g, _, _ := l.Admit("b", lim, 0); g == nil {
		t.Fatal("another owner was refused")
	}
	g.Refund()
	g.Refund() // once
	b, _, _ := l.Admit("a", lim, 0)
	if b == nil {
		t.Fatal("refused after the refund")
	}
	if st := l.Peek("a", lim); st.Requests.Remaining != 1 || st.Tokens.Limit != 0 {
		t.Fatalf("peek: %+v", st)
	}
	if g, _, _ := l.Admit("a", Limits{}, 1e9); g == nil {
		t.Fatal("no limits refused")
	}
}

// TestStreamProgress: a stream's tokens are charged as it goes (Progress charges only what is
// beyond the charge so far) and Settle corrects the total, once.
func TestStreamProgress(t *testing.T) {
	c := &clock{t0}
	l := New(c.now)
	lim := Limits{Tokens: 60} // one a second
	g, _, _ := l.Admit("k", lim, 10)
	for _, used := range []int64{20, 15, 30} { // 15: less than charged, nothing given back yet
		g.Progress(used)
	}
	if st := l.Peek("k", lim); st.Tokens.Reset != 30*time.Second {
		t.Fatalf("after 30 tokens streamed: %+v", st.Tokens)
	}
	g.Settle(25)
	g.Progress(100) // after Settle: nothing
	if st := l.Peek("k", lim); st.Tokens.Reset != 25*time.Second || st.Tokens.Remaining != 35 {
		t.Fatalf("settled at 25: %+v", st.Tokens)
	}
}
