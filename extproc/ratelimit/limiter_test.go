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
// across minute boundaries, evenly and at irregular times (so admissions fall at every offset
// within the seconds), gets at most the limit through in any 60-second window (every window,
// not only the aligned ones: maxInWindow slides over each admission), and about the limit per
// 61 s overall (a fixed minute would let 2x through at a boundary).
func TestTwiceTheRateAcrossAMinuteBoundary(t *testing.T) {
	for _, limit := range []int64{1, 2, 7, 60, 600} {
		for _, irregular := range []bool{false, true} {
			c := &clock{t0}
			l := New(c.now)
			step := time.Minute / time.Duration(2*limit)
			var passed []time.Time
			seed := uint64(limit)
			for c.t.Before(t0.Add(3 * time.Minute)) {
				if g, _, _ := l.Admit("key_a", Limits{Requests: limit}, 0); g != nil {
					passed = append(passed, c.t)
				}
				d := step
				if irregular { // 0 to 2 steps, 1 on average
					seed = seed*6364136223846793005 + 1442695040888963407
					d = 2 * step * time.Duration(seed>>33%1000) / 1000
				}
				c.t = c.t.Add(d)
			}
			if n := maxInWindow(passed); int64(n) > limit {
				t.Errorf("limit %d (irregular %v): %d passed in one 60 s window", limit, irregular, n)
			}
			if n := int64(len(passed)); n < 3*limit*60/61-1 || n > 3*limit {
				t.Errorf("limit %d (irregular %v): %d passed in 3 minutes, want about %d", limit, irregular, n, 3*limit)
			}
		}
	}
}

// TestTokensPerMinute: tokens are charged at admission from the estimate, at most the limit
// pass in any window, and settlement corrects the charge both ways.
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
		if sum > 600 {
			t.Fatalf("%d tokens in the window ending %v", sum, passed[hi])
		}
	}

	c.t = c.t.Add(time.Hour + 250*time.Millisecond)
	g, _, _ := l.Admit("k", lim, 60)
	if g == nil || g.Status.Tokens.Remaining != 540 || g.Status.Tokens.Reset != 60750*time.Millisecond {
		t.Fatalf("admitted %v, status %+v", g != nil, g.Status)
	}
	g.Settle(6) // used far less
	if st := l.Peek("k", lim); st.Tokens.Remaining != 594 {
		t.Fatalf("settled 6 of 60 tokens: %+v", st.Tokens)
	}
	c.t = c.t.Add(time.Second)
	g2, wait, st := l.Admit("k", lim, 594) // the rest of the minute
	if g2 == nil {
		t.Fatalf("after settling 6 tokens, 594 refused for %v", wait)
	}
	g2.Settle(600) // used 6 more than its charge: counted in this second
	if _, wait, st = l.Admit("k", lim, 1); wait != 60750*time.Millisecond || st.Tokens.Remaining != 0 {
		t.Fatalf("after settling 600 tokens: wait %v, status %+v", wait, st) // the first second's 6 leave at +61 s, then 1 fits
	}
	if g, wait, _ := l.Admit("k", lim, 601); g != nil || wait != TooLarge {
		t.Fatalf("601 tokens under 600 a minute: admitted %v, wait %v", g != nil, wait)
	}
}

// TestRefusedCostsNothingAndRefund: a refusal charges nothing and says how long to wait (until
// the first second's requests leave the window); a refunded grant gives its request back;
// owners are independent.
func TestRefusedCostsNothingAndRefund(t *testing.T) {
	c := &clock{t0}
	l := New(c.now)
	lim := Limits{Requests: 2}
	g, _, _ := l.Admit("a", lim, 0)
	if g == nil || g.Status.Requests.Remaining != 1 || g.Status.Requests.Reset != 61*time.Second {
		t.Fatalf("first: %+v", g)
	}
	c.t = c.t.Add(10 * time.Second)
	if g, _, _ := l.Admit("a", lim, 0); g == nil || g.Status.Requests.Remaining != 0 || g.Status.Requests.Reset != 61*time.Second {
		t.Fatalf("second, 10 s later (the window empty 61 s after it): %+v", g)
	}
	for range 5 {
		c.t = c.t.Add(time.Second)
		if g, wait, st := l.Admit("a", lim, 0); g != nil || st.Requests.Remaining != 0 || wait != 61*time.Second-(c.t.Sub(t0)) {
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
	if st := l.Peek("a", lim); st.Requests.Remaining != 0 || st.Tokens.Limit != 0 {
		t.Fatalf("peek: %+v", st)
	}
	c.t = c.t.Add(61 * time.Second)
	b.Refund() // its second left the window: nothing to give back
	if st := l.Peek("a", lim); st.Requests.Remaining != 2 || st.Requests.Reset != 0 {
		t.Fatalf("peek a minute later: %+v", st)
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
	lim := Limits{Tokens: 60}
	g, _, _ := l.Admit("k", lim, 10)
	for _, used := range []int64{20, 15, 30} { // 15: less than charged, nothing given back yet
		c.t = c.t.Add(time.Second)
		g.Progress(used)
	}
	if st := l.Peek("k", lim); st.Tokens.Remaining != 30 || st.Tokens.Reset != 61*time.Second {
		t.Fatalf("after 30 tokens streamed: %+v", st.Tokens) // reset: the last second's 10 leave 61 s later
	}
	g.Settle(25)
	g.Progress(100) // after Settle: nothing
	if st := l.Peek("k", lim); st.Tokens.Remaining != 35 {
		t.Fatalf("settled at 25: %+v", st.Tokens)
	}
}

// TestBurstUsesTheWholeMinute: a key may spend its whole minute's allowance at once, as
// OpenAI's limits allow: 20 concurrent chats of 2,000 tokens under 1,000,000 tokens a minute
// all pass, and 60 requests in one second under 60 a minute pass; the 61st is refused until
// the first second leaves the window, about a minute later.
func TestBurstUsesTheWholeMinute(t *testing.T) {
	c := &clock{t0}
	l := New(c.now)
	for i := range 20 {
		if g, wait, _ := l.Admit("tok", Limits{Tokens: 1_000_000}, 2000); g == nil {
			t.Fatalf("chat %d of 2,000 tokens refused for %v under 1,000,000 tokens a minute", i+1, wait)
		}
	}
	lim := Limits{Requests: 60}
	for i := range 60 {
		c.t = t0.Add(time.Duration(i) * 10 * time.Millisecond)
		if g, wait, _ := l.Admit("req", lim, 0); g == nil {
			t.Fatalf("request %d of 60 in one second refused for %v under 60 a minute", i+1, wait)
		}
	}
	g, wait, st := l.Admit("req", lim, 0)
	if g != nil || wait < 59*time.Second || wait > 61*time.Second || st.Requests.Remaining != 0 {
		t.Fatalf("61st in the same second: admitted %v, wait %v, status %+v", g != nil, wait, st)
	}
}
