package x402

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestDecodePaymentSignatureRoundTrip(t *testing.T) {
	now := time.Now()
	a := newExactAuth(now, exactReq(), payerKey)
	h := header(t, exactReq(), exactPayloadOf(a, a.sign(t, payerKey)))
	p, err := DecodePaymentSignature(" " + h + "\t")
	if err != nil {
		t.Fatal(err)
	}
	if p.X402Version != 2 || p.Accepted.Amount != "10000" || p.Resource == nil || len(p.Payload) == 0 || string(p.Raw) != mustB64(t, h) {
		t.Fatalf("decoded %+v", p)
	}
	h2, err := EncodePaymentSignature(p)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := DecodePaymentSignature(h2)
	if err != nil {
		t.Fatal(err)
	}
	if !samePayload(p, p2) {
		t.Fatalf("round trip changed the payload:\n%+v\n%+v", p, p2)
	}
}

func mustB64(t *testing.T, s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// samePayload compares two payloads as parsed values (not Raw, not JSON spacing).
func samePayload(a, b *PaymentPayload) bool {
	ra, rb := a.Accepted, b.Accepted
	ra.Extra, rb.Extra = nil, nil
	return a.X402Version == b.X402Version && reflect.DeepEqual(a.Resource, b.Resource) && reflect.DeepEqual(ra, rb) &&
		sameJSON(a.Accepted.Extra, b.Accepted.Extra) && sameJSON(a.Payload, b.Payload) && sameJSON(a.Extensions, b.Extensions)
}

func TestDecodePaymentSignatureRefuses(t *testing.T) {
	acc := `"accepted":{"scheme":"exact","network":"eip155:1","amount":"1","asset":"0x0","payTo":"0x0","maxTimeoutSeconds":60}`
	for _, c := range []struct{ name, header, says string }{
		{"empty", "", "is empty"},
		{"blank", "  ", "is empty"},
		{"too long", strings.Repeat("A", MaxPaymentSignature+4), "over the 16384"},
		{"not base64", "not base64!", "is not base64"},
		{"URL-safe base64", strings.NewReplacer("+", "-", "/", "_").Replace(b64(`{"x402Version":2,"a":"??>>??"}`)), "not URL-safe"},
		{"unpadded", strings.TrimRight(b64(`{"x402Version":2}`), "="), "is not base64"},
		{"not JSON", b64("hello"), "not a JSON object"},
		{"JSON array", b64(`[1,2]`), "not a JSON object"},
		{"JSON null", b64(`null`), "not a JSON object"},
		{"trailing data", b64(`{"x402Version":2} {}`), "not a JSON object"},
		{"duplicate member", b64(`{"x402Version":2,"x402Version":2,` + acc + `,"payload":{}}`), "appears twice"},
		{"invalid UTF-8", b64("{\"x402Version\":2,\"e\":\"\xff\"," + acc + `,"payload":{}}`), "invalid UTF-8"},
		{"no version", b64(`{` + acc + `,"payload":{}}`), "has no x402Version"},
		{"version 1", b64(`{"x402Version":1,` + acc + `,"payload":{}}`), `x402Version "1"`},
		{"version as text", b64(`{"x402Version":"2",` + acc + `,"payload":{}}`), "only x402 v2"},
		{"version 3", b64(`{"x402Version":3,` + acc + `,"payload":{}}`), "only x402 v2"},
		{"no accepted", b64(`{"x402Version":2,"payload":{}}`), "no accepted object"},
		{"accepted not an object", b64(`{"x402Version":2,"accepted":[],"payload":{}}`), "no accepted object"},
		{"no payload", b64(`{"x402Version":2,` + acc + `}`), "no payload object"},
		{"payload null", b64(`{"x402Version":2,` + acc + `,"payload":null}`), "no payload object"},
		{"amount as number", b64(`{"x402Version":2,"accepted":{"amount":1},"payload":{}}`), "accepted.amount: it must be a JSON string"},
		{"timeout as text", b64(`{"x402Version":2,"accepted":{"maxTimeoutSeconds":"60"},"payload":{}}`), "accepted.maxTimeoutSeconds: it must be a whole JSON number"},
		{"resource as text", b64(`{"x402Version":2,` + acc + `,"payload":{},"resource":"x"}`), "bad resource"},
		{"extensions as list", b64(`{"x402Version":2,` + acc + `,"payload":{},"extensions":[]}`), "extensions must be an object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := DecodePaymentSignature(c.header)
			var e *Error
			if p != nil || !errors.As(err, &e) || !errors.Is(err, ErrMalformed) || Status(err) != 400 || e.Code != "invalid_payment_signature" {
				t.Fatalf("got %v, %v; want a 400 *Error", p, err)
			}
			if !strings.Contains(e.Msg, c.says) || !strings.HasPrefix(e.Msg, "PAYMENT-SIGNATURE ") {
				t.Errorf("message %q does not say %q", e.Msg, c.says)
			}
			if len(c.header) > 8 && strings.Contains(e.Msg, c.header) {
				t.Errorf("message repeats the header: %q", e.Msg)
			}
		})
	}
}

func TestDecodePaymentSignatureKeepsUnknown(t *testing.T) {
	// Members x402 does not define are ignored by the checks but reach the facilitator (Raw).
	raw := `{"x402Version":2,"accepted":{"scheme":"exact","future":1},"payload":{"x":1},"extensions":{"eip2612GasSponsoring":{"info":{}}},"later":true}`
	p, err := DecodePaymentSignature(b64(raw))
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Raw) != raw || string(p.Extensions) != `{"eip2612GasSponsoring":{"info":{}}}` || p.Accepted.Scheme != "exact" {
		t.Fatalf("decoded %+v", p)
	}
	if got := body(p, exactReq()); string(got.PaymentPayload) != raw {
		t.Fatalf("facilitator body carries %s", got.PaymentPayload)
	}
}

func TestEncodePaymentRequired(t *testing.T) {
	r := exactReq()
	h, err := EncodePaymentRequired(PaymentRequired{Error: "PAYMENT-SIGNATURE header is required",
		Resource: Resource{URL: "http://127.0.0.1:8080/x402/chat-mini"}, Accepts: []Requirements{r}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"x402Version":2,"error":"PAYMENT-SIGNATURE header is required","resource":{"url":"http://127.0.0.1:8080/x402/chat-mini"},` +
		`"accepts":[{"scheme":"exact","network":"eip155:31337","amount":"10000","asset":"0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",` +
		`"payTo":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}}]}`
	if got := mustB64(t, h); got != want {
		t.Fatalf("PAYMENT-REQUIRED\n got %s\nwant %s", got, want)
	}
	pr, err := DecodePaymentRequired(h)
	if err != nil || pr.X402Version != 2 || len(pr.Accepts) != 1 || pr.Accepts[0].Amount != "10000" {
		t.Fatalf("decode: %+v %v", pr, err)
	}
	for _, bad := range []PaymentRequired{{Accepts: []Requirements{r}}, {Resource: Resource{URL: "http://x/x402/a"}}} {
		if _, err := EncodePaymentRequired(bad); err == nil {
			t.Errorf("EncodePaymentRequired(%+v) accepted", bad)
		}
	}
}

func TestEncodeSettlementResponse(t *testing.T) {
	for _, c := range []struct {
		s    SettlementResponse
		want string
	}{
		{SettlementResponse{Success: true, Payer: testPayTo, Transaction: "0xabc", Network: testNetwork, Amount: "5000"},
			`{"success":true,"payer":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","transaction":"0xabc","network":"eip155:31337","amount":"5000"}`},
		{SettlementResponse{ErrorReason: "insufficient_funds", Network: testNetwork},
			`{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:31337"}`},
	} {
		h, err := EncodeSettlementResponse(c.s)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustB64(t, h); got != c.want {
			t.Errorf("PAYMENT-RESPONSE\n got %s\nwant %s", got, c.want)
		}
		back, err := DecodeSettlementResponse(h)
		if err != nil || *back != c.s {
			t.Errorf("round trip: %+v %v", back, err)
		}
	}
}

func TestStatusAndCode(t *testing.T) {
	for err, want := range map[error]int{
		ErrMalformed: 400, ErrInvalid: 402, ErrRejected: 402, ErrSettleFailed: 402, ErrUnavailable: 503, ErrConfig: 500, errors.New("x"): 500,
	} {
		if got := Status(refuse(err, "c", "m")); got != want && errors.Is(refuse(err, "c", "m"), err) {
			t.Errorf("Status(%v) = %d, want %d", err, got, want)
		}
	}
	if Code(refuse(ErrInvalid, "payment_expired", "m")) != "payment_expired" || Code(errors.New("x")) != "" {
		t.Error("Code")
	}
}

func TestQuoteElidesHex(t *testing.T) {
	sig := "0x" + strings.Repeat("ab", 65)
	if q := quote("bad " + sig + "\n"); strings.Contains(q, sig) || strings.Contains(q, "\n") || len(q) > 110 {
		t.Errorf("quote = %s", q)
	}
	if q := quote(testPayTo); q != `"`+testPayTo+`"` {
		t.Errorf("an address must survive quoting: %s", q)
	}
}
