package admin

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAdminTokenGuessLimit: 10 wrong tokens (bearer or console sign-in) from one source within
// a minute, and that source gets 429 with Retry-After, its right token too, until the oldest
// failure is a minute old; other sources (an IPv6 /64 is one) are unaffected; every failure is
// a WARN line with the source, never the token; the map of sources stays bounded.
func TestAdminTokenGuessLimit(t *testing.T) {
	const token = "guess-limit-unit-token-0123456789abcdef"
	a := newTestAdmin(t, token)
	var logs bytes.Buffer
	guard := a.h.(*adminGuard)
	guard.failures.log = slog.New(slog.NewTextHandler(&logs, nil))
	now := time.Unix(1_800_000_000, 0)
	guard.failures.now = func() time.Time { return now }
	call := func(from, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/admin/v1/keys", nil)
		req.Host, req.RemoteAddr = testAdminAddr, from
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		return rec
	}
	signIn := func(from, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/console/api/session", strings.NewReader(`{"token":"`+tok+`"}`))
		req.Host, req.RemoteAddr = testAdminAddr, from
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		return rec
	}
	for i := range 5 {
		if rec := call("192.0.2.7:4000", "Bearer guess-"+string(rune('a'+i))); rec.Code != 401 {
			t.Fatalf("wrong token %d: %d", i, rec.Code)
		}
		if rec := signIn("192.0.2.7:4001", "sign-in-guess"); rec.Code != 401 {
			t.Fatalf("wrong sign-in %d: %d", i, rec.Code)
		}
		now = now.Add(time.Second)
	}
	rec := call("192.0.2.7:4002", "Bearer "+token)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "55" || !strings.Contains(rec.Body.String(), "too_many_failed_attempts") {
		t.Fatalf("the 11th attempt (the right token): %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := signIn("192.0.2.7:4003", token); rec.Code != 429 {
		t.Fatalf("a sign-in from the limited source: %d", rec.Code)
	}
	if rec := call("192.0.2.8:4000", "Bearer "+token); rec.Code != 200 {
		t.Fatalf("another source's right token: %d", rec.Code)
	}
	// An IPv6 /64 is one source: rotating the interface id does not help.
	for i := range 10 {
		call("[2001:db8:1:2::"+strconv.FormatInt(int64(i+1), 16)+"]:4000", "Bearer nope")
	}
	if rec := call("[2001:db8:1:2::ffff]:4000", "Bearer nope"); rec.Code != 429 {
		t.Fatalf("same /64: %d", rec.Code)
	}
	if rec := call("[2001:db8:1:3::1]:4000", "Bearer "+token); rec.Code != 200 {
		t.Fatalf("another /64: %d", rec.Code)
	}
	// A minute after the first failure one slot is free again; a right token then clears the count.
	now = now.Add(56 * time.Second)
	if rec := call("192.0.2.7:4004", "Bearer "+token); rec.Code != 200 {
		t.Fatalf("a minute later: %d", rec.Code)
	}
	if rec := call("192.0.2.7:4005", "Bearer wrong-again"); rec.Code != 401 {
		t.Fatalf("after signing in, a wrong token: %d", rec.Code)
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"admin authentication failed: wrong admin token\" source=192.0.2.7 "); n != 11 {
		t.Errorf("%d WARN lines for 192.0.2.7, want 11:\n%s", n, out)
	}
	for _, secret := range []string{"guess-a", "sign-in-guess", "nope", "wrong-again", token} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, `via="console sign-in"`) || !strings.Contains(out, `via="bearer token"`) {
		t.Errorf("the log does not say how the token came:\n%s", out)
	}
	// Bounded: past maxAuthSources, the source that failed longest ago is forgotten.
	l := newAuthLimiter(slog.New(slog.DiscardHandler))
	for i := range maxAuthSources + 10 {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1"
		l.fail(req, "bearer token")
	}
	if len(l.fails) != maxAuthSources {
		t.Fatalf("%d sources kept, want %d", len(l.fails), maxAuthSources)
	}
}
