package x402

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// FuzzDecodePaymentSignature: the decoder never panics; what it accepts re-encodes to an equal
// value (and Verify judges it without panicking); what it refuses is a 400 *Error with a code and
// a message that does not repeat the header. Each input is a header as sent and a JSON document
// sent as the base64 of its bytes, so the fuzzer also mutates the JSON itself.
func FuzzDecodePaymentSignature(f *testing.F) {
	now := time.Unix(1_900_000_000, 0)
	add := func(h string) {
		doc, _ := base64.StdEncoding.DecodeString(h)
		f.Add(h, doc)
	}
	a := newExactAuth(now, exactReq(), payerKey)
	add(header(f, exactReq(), exactPayloadOf(a, a.sign(f, payerKey))))
	u := newUptoAuth(now, uptoReq(), payerKey)
	add(header(f, uptoReq(), uptoPayloadOf(u, u.sign(f, payerKey))))
	for _, v := range loadVectors(f) {
		add(v.Header)
	}
	for _, s := range []string{"", "=", "e30=", b64(`{"x402Version":2,"accepted":{},"payload":{}}`), b64(`{"x402Version":2,"accepted":{},"payload":{},"x402Version":2}`),
		b64(`{"x402Version":2.0,"accepted":{"amount":"1","extra":{"a":[1,{"b":null}]}},"payload":{"signature":"0x"}}`), b64("\xff\xfe")} {
		add(s)
	}
	f.Fuzz(func(t *testing.T, h string, doc []byte) {
		checkDecode(t, h, now)
		checkDecode(t, base64.StdEncoding.EncodeToString(doc), now)
	})
}

func checkDecode(t *testing.T, h string, now time.Time) {
	p, err := DecodePaymentSignature(h)
	if err != nil {
		var e *Error
		if p != nil || !errors.As(err, &e) || !errors.Is(err, ErrMalformed) || e.Code == "" || len(e.Msg) < 20 {
			t.Fatalf("refusal %#v (%v) is not a typed 400 with a code and a message", err, p)
		}
		if len(h) >= 24 && strings.Contains(e.Msg, strings.TrimSpace(h)) {
			t.Fatalf("the message repeats the header: %q", e.Msg)
		}
		return
	}
	h2, err := EncodePaymentSignature(p)
	if err != nil {
		t.Fatalf("an accepted header does not re-encode: %v", err)
	}
	p2, err := DecodePaymentSignature(h2)
	if err != nil {
		t.Fatalf("the re-encoded header is refused: %v", err)
	}
	if !samePayload(p, p2) {
		t.Fatalf("re-encoding changed the payload:\n%+v\n%+v", p, p2)
	}
	for _, r := range []Requirements{exactReq(), uptoReq()} {
		p.Accepted.Scheme = r.Scheme
		if _, err := Verify(p, r, now); err != nil {
			var e *Error
			if !errors.As(err, &e) || Status(err) == 500 || e.Code == "" {
				t.Fatalf("Verify refusal %#v is not a typed 400/402", err)
			}
		}
	}
}

// FuzzMatch: a requirement matches itself and its JSON round trip with members reordered;
// any single-field change does not match.
func FuzzMatch(f *testing.F) {
	for _, r := range []Requirements{exactReq(), uptoReq()} {
		f.Add(r.Scheme, r.Network, r.Amount, r.Asset, r.PayTo, r.MaxTimeoutSeconds, string(r.Extra), uint8(0), "x")
	}
	f.Add("", "", "", "", "", int64(-1), `{"a":[1,2,{"b":1e3}],"c":"\u00e9"}`, uint8(6), `{}`)
	f.Add("exact", "eip155:1", "1", "0xAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "x", int64(60), `null`, uint8(3), "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab")
	f.Fuzz(func(t *testing.T, scheme, network, amount, asset, payTo string, timeout int64, extra string, field uint8, value string) {
		r := Requirements{Scheme: scheme, Network: network, Amount: amount, Asset: asset, PayTo: payTo, MaxTimeoutSeconds: timeout}
		if v, err := parseJSON([]byte(extra)); err == nil && v != nil {
			r.Extra = jsontext.Value(extra)
		}
		if i, why := Match(r, []Requirements{r}); i != 0 {
			t.Fatalf("a requirement does not match itself: %q", why)
		}
		b, err := json.Marshal(r)
		if err != nil {
			return // text that is not UTF-8 cannot be sent as JSON
		}
		var rt Requirements
		if err := json.Unmarshal(reordered(t, b), &rt); err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if i, why := Match(rt, []Requirements{r}); i != 0 {
			t.Fatalf("the JSON round trip with members reordered does not match: %q\n%s", why, reordered(t, b))
		}
		// Every field changed in turn, then the field the fuzzer picked set to its value.
		changes := []func(*Requirements){
			func(c *Requirements) { c.Scheme += "x" },
			func(c *Requirements) { c.Network += "x" },
			func(c *Requirements) { c.Amount += "1" },
			func(c *Requirements) { c.Asset = otherAddress(c.Asset) },
			func(c *Requirements) { c.PayTo = otherAddress(c.PayTo) },
			func(c *Requirements) { c.MaxTimeoutSeconds++ },
			func(c *Requirements) { c.Extra = jsontext.Value(`{"changed":` + cmp(string(c.Extra), "null") + `}`) },
		}
		for i, change := range changes {
			c := r
			change(&c)
			if j, _ := Match(c, []Requirements{r}); j != -1 {
				t.Fatalf("field %d changed (%+v) still matches %+v", i, c, r)
			}
		}
		c := r
		switch field % 7 {
		case 0:
			c.Scheme = value
		case 1:
			c.Network = value
		case 2:
			c.Amount = value
		case 3:
			c.Asset = value
		case 4:
			c.PayTo = value
		case 5:
			c.MaxTimeoutSeconds, _ = strconv.ParseInt(value, 10, 64)
		case 6:
			c.Extra = jsontext.Value(value)
		}
		j, _ := Match(c, []Requirements{r})
		if equal := reflectEqualFields(c, r); equal != (j == 0) {
			t.Fatalf("field %d set to %q: Match = %d, but the fields are equal: %v", field%7, value, j, equal)
		}
	})
}

// reflectEqualFields is Match's definition of equality, written independently.
func reflectEqualFields(a, b Requirements) bool {
	addrEq := func(x, y string) bool {
		if isHexAddress(x) && isHexAddress(y) {
			return strings.EqualFold(x[2:], y[2:])
		}
		return x == y
	}
	ea, errA := parseJSON(a.Extra)
	eb, errB := parseJSON(b.Extra)
	if len(bytes.TrimSpace(a.Extra)) == 0 {
		ea, errA = nil, nil
	}
	if len(bytes.TrimSpace(b.Extra)) == 0 {
		eb, errB = nil, nil
	}
	extraEq := errA == nil && errB == nil && canonical(ea) == canonical(eb)
	return a.Scheme == b.Scheme && a.Network == b.Network && a.Amount == b.Amount && addrEq(a.Asset, b.Asset) &&
		addrEq(a.PayTo, b.PayTo) && a.MaxTimeoutSeconds == b.MaxTimeoutSeconds && extraEq
}

func canonical(v any) string {
	var b strings.Builder
	writeJSON(&b, v, false)
	return b.String()
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// otherAddress is an address that is not a (in any letter case), or a different string.
func otherAddress(a string) string {
	if isHexAddress(a) {
		last := a[len(a)-1]
		repl := byte('0')
		if last == '0' {
			repl = '1'
		}
		return a[:len(a)-1] + string(repl)
	}
	return a + "x"
}

// reordered rewrites a JSON document with every object's members in reverse order.
func reordered(t *testing.T, doc []byte) []byte {
	v, err := parseJSON(doc)
	if err != nil {
		t.Fatalf("reorder: %v", err)
	}
	var b strings.Builder
	writeJSON(&b, v, true)
	return []byte(b.String())
}

func writeJSON(b *strings.Builder, v any, reverse bool) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if reverse {
			slices.Reverse(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			q, _ := jsontext.AppendQuote(nil, k)
			b.Write(q)
			b.WriteByte(':')
			writeJSON(b, x[k], reverse)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e, reverse)
		}
		b.WriteByte(']')
	case string:
		q, _ := jsontext.AppendQuote(nil, x)
		b.Write(q)
	case number:
		b.WriteString(string(x))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	default:
		b.WriteString("null")
	}
}

// vector is one credential a reference client produced (testdata/*.json).
type vector struct {
	Client       string       `json:"client"`
	Scheme       string       `json:"scheme"`
	Requirements Requirements `json:"requirements"`
	Header       string       `json:"payment_signature"`
	Payer        string       `json:"payer"`
	SignedAt     int64        `json:"signed_at"`
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	files, _ := filepath.Glob("testdata/vector-*.json")
	var out []vector
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, v)
	}
	return out
}
