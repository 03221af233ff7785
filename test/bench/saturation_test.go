package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeLoad is a result at rate whose every request took lat (achieved: the share served).
func fakeLoad(rate int, lat time.Duration, served float64) *result {
	r := &result{requests: rate, sentRate: float64(rate)}
	for i := range rate {
		if float64(i) < served*float64(rate) {
			r.lat = append(r.lat, lat)
		} else {
			r.fail("status 503")
		}
	}
	return r
}

func TestStepCurveStopsWhenBothSaturate(t *testing.T) {
	// direct 0.3 ms; envoy +1 ms until 2000/s; tollway +2 ms until 500/s, then +9 ms, and at
	// 250/s one noisy first try (+9 ms) that its second try does not repeat.
	tries := map[int]int{}
	var loaded []string
	measure := func(rate int, paths []string) *satStep {
		st := &satStep{rate: rate, res: map[string]*result{}, why: map[string]string{}}
		st.res[pathDirect] = fakeLoad(rate, 300*time.Microsecond, 1)
		for _, p := range paths {
			loaded = append(loaded, p+"@"+strings.Repeat("*", tries[rate])+itoa(rate))
			lat := 300*time.Microsecond + time.Millisecond
			switch {
			case p == pathEnvoy && rate > 2000:
				lat += 10 * time.Millisecond
			case p == pathTollway && (rate > 500 || rate == 250 && tries[rate] == 0):
				lat += 9 * time.Millisecond
			}
			st.res[p] = fakeLoad(rate, lat, 1)
		}
		tries[rate]++
		st.why[pathDirect] = directShort(st.res[pathDirect], rate)
		return st
	}
	c := stepCurve(context.Background(), "plain", []int{250, 500, 1000, 2000, 3000, 4000}, measure)
	if c.under[pathTollway] != 500 || !c.saturate[pathTollway] || c.under[pathEnvoy] != 2000 || !c.saturate[pathEnvoy] {
		t.Fatalf("under %v saturated %v, want tollway 500, envoy 2000, both saturated", c.under, c.saturate)
	}
	for _, p := range loaded {
		if p == pathEnvoy+"@4000" || strings.HasPrefix(p, pathTollway+"@2000") {
			t.Fatalf("loaded past saturation: %v", loaded)
		}
	}
	if got := satRate(c, pathTollway) + ", " + satRate(c, pathEnvoy) + " " + c.ratio(); got != "500/s, 2000/s 0.25x" {
		t.Fatalf("satRate, ratio: %s", got)
	}
	if n := len(c.steps); n != 8 { // 250 twice, 500, 1000 twice (tollway's second try), 2000, 3000 twice
		t.Fatalf("%d steps, want 8", n)
	}
}

func TestStepCurveEndsWhereDirectFallsShort(t *testing.T) {
	measure := func(rate int, paths []string) *satStep {
		st := &satStep{rate: rate, res: map[string]*result{}, why: map[string]string{}}
		served := 1.0
		if rate >= 1000 {
			served = 0.9 // the load generator and the fake are the limit
		}
		st.res[pathDirect] = fakeLoad(rate, time.Millisecond, served)
		for _, p := range paths {
			st.res[p] = fakeLoad(rate, 2*time.Millisecond, served)
		}
		st.why[pathDirect] = directShort(st.res[pathDirect], rate)
		return st
	}
	c := stepCurve(context.Background(), "plain", []int{500, 1000, 2000}, measure)
	if c.directShort != 1000 || c.saturate[pathEnvoy] || c.under[pathEnvoy] != 500 {
		t.Fatalf("directShort %d saturate %v under %v", c.directShort, c.saturate, c.under)
	}
	if got := satRate(c, pathTollway); got != ">= 500/s (direct itself fell short at 1000/s)" || c.ratio() != "-" {
		t.Fatalf("satRate: %s, ratio %s", got, c.ratio())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A step whose direct p99 stalled (+50 ms over the curve's lowest) judges nothing: its
// gateways are measured again, and the negative added p99 of the first try does not count.
func TestStepCurveMeasuresAStalledStepAgain(t *testing.T) {
	tries := map[int]int{}
	measure := func(rate int, paths []string) *satStep {
		st := &satStep{rate: rate, res: map[string]*result{}, why: map[string]string{}}
		direct := 300 * time.Microsecond
		if rate == 1000 && tries[rate] == 0 {
			direct = 50 * time.Millisecond
		}
		st.res[pathDirect] = fakeLoad(rate, direct, 1)
		for _, p := range paths {
			lat := 2 * time.Millisecond
			if p == pathTollway && rate >= 1000 {
				lat = 20 * time.Millisecond // +19.7 ms over a calm direct; -30 ms over the stalled one
			}
			st.res[p] = fakeLoad(rate, lat, 1)
		}
		tries[rate]++
		return st
	}
	c := stepCurve(context.Background(), "plain", []int{500, 1000}, measure)
	if tries[1000] != 2 || c.under[pathTollway] != 500 || !c.saturate[pathTollway] || c.under[pathEnvoy] != 1000 {
		t.Fatalf("tries %v under %v saturate %v", tries, c.under, c.saturate)
	}
}
