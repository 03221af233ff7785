package extproc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// keyInfoHeaders is GET /v1/key (or another method) with auth as the Authorization header.
func keyInfoHeaders(method, auth, requestID string) *extprocv3.ProcessingRequest {
	hs := []string{":method", method, ":path", "/v1/key", "x-request-id", requestID}
	if auth != "" {
		hs = append(hs, "authorization", auth)
	}
	req := requestHeaders(true)
	for i := 0; i < len(hs); i += 2 {
		req.GetRequestHeaders().Headers.Headers = append(req.GetRequestHeaders().Headers.Headers, hdr(hs[i], hs[i+1], true))
	}
	return req
}

// getKey asks GET /v1/key with auth and returns the answer's status and body.
func getKey(t *testing.T, e *envoy, method, auth string) (int, []byte) {
	t.Helper()
	s := e.open()
	resp := s.roundTrip(keyInfoHeaders(method, auth, "rid-key"))
	im := resp.GetImmediateResponse()
	if im == nil {
		t.Fatalf("%s /v1/key was not answered by ext_proc: %v", method, resp)
	}
	s.expectClosed()
	return int(im.GetStatus().GetCode()), im.GetBody()
}

func decodeKeyView(t *testing.T, body []byte) (keyView, map[string]json.RawMessage) {
	t.Helper()
	var v keyView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET /v1/key body %s: %v", body, err)
	}
	return v, decodeObject(t, body)
}

func str(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// TestKeyInfo: GET /v1/key answers the calling key's own view, its spend read from the ledger
// (settled, and held by requests in flight), never the key.
func TestKeyInfo(t *testing.T) {
	persisted := time.Unix(1700000500, 0).UTC()
	limit := decimal.RequireFromString("500")
	e, ledger, rec := billedServer(t, "1000", &limit)
	k := keyRecord("key_valid", validSecret, false)
	k.Name, k.MonthlyLimit, k.Models, k.LastUsedAt = "ci", &limit, []string{"gpt", "route:support"}, &persisted
	e.srv.Swap(core.Compile(pricedGateway(t), []store.Key{k}))
	auth := "Bearer " + validSecret

	status, body := getKey(t, e, "GET", auth)
	if status != 200 {
		t.Fatalf("GET /v1/key: %d %s", status, body)
	}
	v, fields := decodeKeyView(t, body)
	if v.Object != "key" || v.ID != "key_valid" || str(v.Label) != "ci" || v.Account != "acct-key_valid" || str(v.MonthlyLimit) != "500" ||
		v.Month != "2026-11" || str(v.SpentThisMonth) != "0" || str(v.Held) != "0" || str(v.Remaining) != "500" ||
		strings.Join(v.Models, ",") != "gpt,route:support" || v.CreatedAt != 1700000000 || v.LastUsedAt == nil || *v.LastUsedAt != persisted.Unix() {
		t.Fatalf("GET /v1/key = %s", body)
	}
	if raw, ok := fields["rate_limits"]; !ok || string(raw) != "null" {
		t.Errorf("rate_limits = %s, want null (the key has none)", raw)
	}
	h := store.HashKey(validSecret)
	for _, secret := range []string{validSecret, validSecret[4:20], string(h[:4])} {
		if strings.Contains(string(body), secret) {
			t.Fatalf("GET /v1/key shows the key: %s", body)
		}
	}

	// A request billed $11 (3 prompt tokens x $1 + 4 completion x $2): spent is the ledger's.
	before := time.Now().Unix()
	s := e.open()
	s.roundTrip(chatHeaders(auth, "r1", true))
	s.roundTrip(requestBody(shortPrompt))
	s.roundTrip(servedHeaders("200", "application/json", "openai/gpt"))
	s.roundTrip(responseBody(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hey"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`))
	s.close()
	if recs := rec.all(); len(recs) != 1 || !recs[0].Cost.Equal(decimal.NewFromInt(11)) {
		t.Fatalf("records %+v", recs)
	}
	_, body = getKey(t, e, "GET", auth)
	v, _ = decodeKeyView(t, body)
	spent, held := ledger.KeyMonth("key_valid", testNow)
	if str(v.SpentThisMonth) != "11" || !spent.Equal(decimal.NewFromInt(11)) || !held.IsZero() || str(v.Held) != "0" || str(v.Remaining) != "489" {
		t.Fatalf("after an $11 answer: %s (ledger spent %s held %s)", body, spent, held)
	}
	if v.LastUsedAt == nil || *v.LastUsedAt < before || *v.LastUsedAt > time.Now().Unix() {
		t.Fatalf("last_used_at %v, want the chat request's time (%d or later)", v.LastUsedAt, before)
	}

	// A request in flight holds its worst case: remaining is what admission would still let through.
	s = e.open()
	s.roundTrip(chatHeaders(auth, "r2", true))
	s.roundTrip(requestBody(shortPrompt))
	_, held = ledger.KeyMonth("key_valid", testNow)
	_, body = getKey(t, e, "GET", auth)
	v, _ = decodeKeyView(t, body)
	if !held.IsPositive() || str(v.Held) != held.String() || str(v.Remaining) != limit.Sub(decimal.NewFromInt(11)).Sub(held).String() || str(v.SpentThisMonth) != "11" {
		t.Fatalf("with a hold of %s in flight: %s", held, body)
	}
	s.close()
}

// TestKeyInfoRefusals: a key refused on GET /v1/key is 401 key_market_key_invalid with the
// message invalid_api_key has for the same key; the path takes only GET.
func TestKeyInfoRefusals(t *testing.T) {
	e := startServer(t, testRuntime())
	for _, tc := range []struct {
		name, auth string
		like       *core.APIError
	}{
		{"no key", "", core.ErrMissingKey},
		{"basic", "Basic dXNlcjpwYXNz", core.ErrMissingKey},
		{"malformed", "Bearer ale-x", core.ErrMalformedKey},
		{"unknown", "Bearer " + unknownSecret, core.ErrInvalidKey},
		{"revoked", "Bearer " + revokedSecret, core.ErrInvalidKey},
	} {
		status, body := getKey(t, e, "GET", tc.auth)
		var got core.ErrorBody
		_ = json.Unmarshal(body, &got)
		if status != 401 || got.Error.Code != "key_market_key_invalid" || got.Error.Message != tc.like.Message || got.Error.RequestID != "rid-key" {
			t.Errorf("%s: %d %s; want 401 key_market_key_invalid saying %q", tc.name, status, body, tc.like.Message)
		}
	}
	status, body := getKey(t, e, "POST", "Bearer "+validSecret)
	if status != 405 || !strings.Contains(string(body), "use GET") {
		t.Errorf("POST /v1/key: %d %s, want 405 saying use GET", status, body)
	}
}

// TestKeyInfoWithoutBilling: with billing off nothing is metered, so spend and what remains are
// null; a key without a name, limit or allow-list shows nulls for them.
func TestKeyInfoWithoutBilling(t *testing.T) {
	e := startServer(t, testRuntime())
	status, body := getKey(t, e, "GET", "Bearer "+validSecret)
	v, fields := decodeKeyView(t, body)
	if status != 200 || v.Label != nil || v.MonthlyLimit != nil || v.SpentThisMonth != nil || v.Held != nil || v.Remaining != nil ||
		v.Models != nil || v.LastUsedAt != nil || v.Month != time.Now().UTC().Format("2006-01") {
		t.Fatalf("GET /v1/key without billing: %d %s", status, body)
	}
	for _, f := range []string{"label", "monthly_limit", "spent_this_month", "held", "remaining", "models", "rate_limits", "last_used_at"} {
		if string(fields[f]) != "null" {
			t.Errorf("%s = %s, want null", f, fields[f])
		}
	}
}

// TestKeysUsed: every request a key authenticates marks it used, except GET /v1/key itself;
// SaveKeysUsed hands over what changed since the last save that succeeded.
func TestKeysUsed(t *testing.T) {
	e := startServer(t, testRuntime())
	saved := func() map[string]time.Time {
		var got map[string]time.Time
		if err := e.srv.SaveKeysUsed(func(m map[string]time.Time) error { got = m; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	getKey(t, e, "GET", "Bearer "+validSecret)
	if got := saved(); len(got) != 0 {
		t.Fatalf("GET /v1/key marked the key used: %v", got)
	}
	before := time.Now().Truncate(time.Second)
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	s.close()
	got := saved()
	if at, ok := got["key_valid"]; len(got) != 1 || !ok || at.Before(before) || at.After(time.Now()) {
		t.Fatalf("after a chat request: %v, want key_valid at about %v", got, before)
	}
	if got := saved(); len(got) != 0 {
		t.Fatalf("saved twice: %v", got)
	}
	// Another use within the same second changes nothing; a later one is saved again.
	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r2", true))
	s.close()
	later := time.Now().Add(2 * time.Second)
	e.srv.sh.KeyUse.Touch("key_valid", later)
	if err := e.srv.SaveKeysUsed(func(map[string]time.Time) error { return errors.New("disk full") }); err == nil {
		t.Fatal("a failed save was not reported")
	}
	if got := saved(); len(got) != 1 || got["key_valid"].Unix() != later.Unix() {
		t.Fatalf("a failed save lost the use: %v", got)
	}
	// The view shows the latest of the store's and the memory's.
	_, body := getKey(t, e, "GET", "Bearer "+validSecret)
	if v, _ := decodeKeyView(t, body); v.LastUsedAt == nil || *v.LastUsedAt < before.Unix() {
		t.Fatalf("last_used_at after use: %s", body)
	}
}

// GET /v1/key is counted under its own endpoint label.
func TestKeyInfoEndpointLabel(t *testing.T) {
	if got := endpointLabel(core.KeyPath); got != EndpointKey {
		t.Fatalf("endpointLabel(%s) = %q", core.KeyPath, got)
	}
}
