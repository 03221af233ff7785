package x402

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestMatch(t *testing.T) {
	offered := []Requirements{exactReq(), uptoReq()}
	echo := uptoReq()
	echo.Asset, echo.PayTo = strings.ToLower(echo.Asset), strings.ToUpper(echo.PayTo[:2])+strings.ToUpper(echo.PayTo[2:])
	echo.PayTo = "0x" + echo.PayTo[2:]
	echo.Extra = jsontext.Value(`{ "version":"2", "name":"USDC",
		"facilitatorAddress":"` + testFacilitator + `"}`) // another member order and spacing, as the Python client echoes
	if i, why := Match(echo, offered); i != 1 || why != "" {
		t.Fatalf("Match(echo) = %d %q, want 1", i, why)
	}
	for _, c := range []struct {
		name string
		edit func(r *Requirements)
		says string
	}{
		{"amount", func(r *Requirements) { r.Amount = "5000" }, `accepted.amount "5000" does not match this endpoint's 10000`},
		{"amount spelled differently", func(r *Requirements) { r.Amount = "010000" }, `accepted.amount "010000"`},
		{"network", func(r *Requirements) { r.Network = "eip155:8453" }, `accepted.network "eip155:8453" does not match this endpoint's eip155:31337`},
		{"asset", func(r *Requirements) { r.Asset = testFacilitator }, "accepted.asset"},
		{"payTo", func(r *Requirements) { r.PayTo = testFacilitator }, "accepted.payTo"},
		{"maxTimeoutSeconds", func(r *Requirements) { r.MaxTimeoutSeconds = 3600 }, `accepted.maxTimeoutSeconds "3600" does not match this endpoint's 60`},
		{"extra value", func(r *Requirements) { r.Extra = jsontext.Value(`{"name":"USD Coin","version":"2"}`) }, "accepted.extra"},
		{"extra number type", func(r *Requirements) { r.Extra = jsontext.Value(`{"name":"USDC","version":2}`) }, "accepted.extra"},
		{"extra member added", func(r *Requirements) { r.Extra = jsontext.Value(`{"name":"USDC","version":"2","x":1}`) }, "accepted.extra"},
		{"extra missing", func(r *Requirements) { r.Extra = nil }, "accepted.extra"},
		{"scheme", func(r *Requirements) { r.Scheme = "stream" }, `accepted.scheme "stream" is not offered by this endpoint (offered: exact, upto)`},
	} {
		r := exactReq()
		c.edit(&r)
		i, why := Match(r, offered)
		if i != -1 || !strings.Contains(why, c.says) {
			t.Errorf("%s: Match = %d %q, want -1 saying %q", c.name, i, why, c.says)
		}
	}
	// Several differences: the reason names the first, from the closest option.
	r := exactReq()
	r.Amount, r.PayTo = "1", testFacilitator
	if _, why := Match(r, offered); !strings.HasPrefix(why, "accepted.amount") {
		t.Errorf("two differences: %q", why)
	}
	if i, why := Match(exactReq(), nil); i != -1 || why == "" {
		t.Errorf("nothing offered: %d %q", i, why)
	}
}

func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":[1,{"c":null}]}`, `{"b":[1,{"c":null}],"a":1}`, true},
		{`{"a":1}`, `{"a":1.0}`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
		{`{"a":[1,2]}`, `{"a":[2,1]}`, false},
		{``, `null`, true},
		{`{}`, ``, false},
		{`{"a":1,"a":1}`, `{"a":1}`, false}, // duplicate names are not JSON this package reads
		{`{"a":1} x`, `{"a":1}`, false},
		{`{"a":true}`, `{"a":true}`, true},
		{`{"n":123456789012345678901234567890}`, `{"n":123456789012345678901234567891}`, false},
	} {
		if got := sameJSON(jsontext.Value(c.a), jsontext.Value(c.b)); got != c.same {
			t.Errorf("sameJSON(%s, %s) = %v", c.a, c.b, got)
		}
	}
}
