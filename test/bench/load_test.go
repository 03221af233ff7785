package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A request the in-flight cap kept from being sent is shed load, not an error of the target:
// the money path offered 10,000/s failed the whole run with its 2,000-request cap reached.
func TestOpenLoopShedIsNotAnError(t *testing.T) {
	r := openLoop(context.Background(), 1000, 100*time.Millisecond, 2, func() (time.Duration, time.Duration, error) {
		time.Sleep(40 * time.Millisecond)
		return 0, 40 * time.Millisecond, nil
	})
	if r.errors != 0 || len(r.errSamples) != 0 {
		t.Fatalf("errors %d %v, want none: every request sent succeeded", r.errors, r.errSamples)
	}
	if r.requests != 100 || len(r.lat) < 2 || len(r.lat)+r.shed != r.requests {
		t.Fatalf("requests %d = ok %d + shed %d?", r.requests, len(r.lat), r.shed)
	}
	if r.sentErrRate() != 0 || r.errRate() < 0.5 {
		t.Fatalf("sentErrRate %.3f (want 0), errRate %.3f (want the shed share)", r.sentErrRate(), r.errRate())
	}
	if got := shedNote(r); got == "" {
		t.Fatal("no shed note")
	}

	// A request sent that fails is still an error.
	r2 := openLoop(context.Background(), 100, 50*time.Millisecond, 10, func() (time.Duration, time.Duration, error) {
		return 0, 0, errors.New("status 503")
	})
	if r2.errors != 5 || r2.shed != 0 || r2.sentErrRate() != 1 {
		t.Fatalf("errors %d shed %d sentErrRate %.2f, want 5, 0, 1", r2.errors, r2.shed, r2.sentErrRate())
	}
	if m := r.merge(r2); m.shed != r.shed || m.errors != 5 || m.requests != 105 {
		t.Fatalf("merged: shed %d errors %d requests %d", m.shed, m.errors, m.requests)
	}
}

func TestGapSourceNamesTheLargerPart(t *testing.T) {
	for _, c := range []struct {
		gap, store time.Duration
		want       string
	}{
		{640 * time.Microsecond, 50 * time.Microsecond, "comes from spreading the load over 3 Envoy+Tollway pairs (the store's part within +0.100 ms: PASS)"},
		{640 * time.Microsecond, 500 * time.Microsecond, "comes from the store (the store's part within +0.100 ms: FAIL)"},
		{-20 * time.Microsecond, 10 * time.Microsecond, "comes from neither"},
	} {
		if got := gapSource(c.gap, c.store, "postgres - bbolt x3", "bbolt x3 - bbolt"); !strings.Contains(got, c.want) {
			t.Errorf("gapSource(%s, %s) = %q, want it to say %q", c.gap, c.store, got, c.want)
		}
	}
}

// A load sent across gateways that keep their records apart (bbolt x3) is counted toward each
// gateway's own record check: each target's served and failed, not the first one's.
func TestAttackAcrossTalliesEachTarget(t *testing.T) {
	var ts []*target
	for i := range 3 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if i == 1 {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, `{"object":"chat.completion"}`)
		}))
		defer srv.Close()
		ts = append(ts, &target{name: "bbolt x3", baseURL: srv.URL, client: newClient(5 * time.Second)})
	}
	r := attackAcross(context.Background(), ts, "/chat/completions", []byte(`{}`), `"chat.completion"`, 300, 300*time.Millisecond)
	tallyEach(ts, r)
	if r.requests < 30 || len(r.lat) == 0 || r.errors == 0 {
		t.Fatalf("requests %d ok %d errors %d: want some of each", r.requests, len(r.lat), r.errors)
	}
	if ts[1].served != 0 || ts[1].failed != int64(r.errors) {
		t.Errorf("the failing gateway: served %d failed %d, want 0 and every error (%d)", ts[1].served, ts[1].failed, r.errors)
	}
	if ts[0].served == 0 || ts[2].served == 0 || ts[0].served+ts[2].served != int64(len(r.lat)) || ts[0].failed+ts[2].failed != 0 {
		t.Errorf("the serving gateways: %d + %d served (%d+%d failed), want %d in all, none failed",
			ts[0].served, ts[2].served, ts[0].failed, ts[2].failed, len(r.lat))
	}
	if d := ts[0].served - ts[2].served; d < -1 || d > 1 {
		t.Errorf("round-robin: %d vs %d served", ts[0].served, ts[2].served)
	}
}
