package x402

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
)

func TestVerifyExactAccepts(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	r := exactReq()
	a := newExactAuth(now, r, payerKey)
	a.To = strings.ToLower(a.To) // clients may send any case; the key has one spelling
	c, err := Verify(paid(t, r, exactPayloadOf(a, a.sign(t, payerKey))), r, now)
	if err != nil {
		t.Fatal(err)
	}
	want := Credential{Scheme: "exact", Network: testNetwork, Asset: testToken, Payer: addr(payerKey), PayTo: testPayTo,
		Nonce: strings.ToLower(a.Nonce), Amount: "10000", ValidBefore: now.Add(60 * time.Second)}
	if c != want {
		t.Fatalf("credential\n got %+v\nwant %+v", c, want)
	}
	if k := c.Key(); k != strings.ToLower(k) || !strings.Contains(k, strings.ToLower(addr(payerKey))) || !strings.HasSuffix(k, a.Nonce) {
		t.Errorf("Key() = %q: want one lower-case spelling ending in the nonce", k)
	}
	if c.KeepUntil() != c.ValidBefore.Add(ReplaySkew) {
		t.Errorf("KeepUntil = %v", c.KeepUntil())
	}
	// A nonce in upper-case hex is the same credential.
	a.Nonce = "0x" + strings.ToUpper(a.Nonce[2:])
	c2, err := Verify(paid(t, r, exactPayloadOf(a, a.sign(t, payerKey))), r, now)
	if err != nil || c2.Key() != c.Key() {
		t.Fatalf("upper-case nonce: %v, key %q vs %q", err, c2.Key(), c.Key())
	}
}

func TestVerifyUptoAccepts(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	r := uptoReq()
	u := newUptoAuth(now, r, payerKey)
	u.Nonce = "1"
	c, err := Verify(paid(t, r, uptoPayloadOf(u, u.sign(t, payerKey))), r, now)
	if err != nil {
		t.Fatal(err)
	}
	want := Credential{Scheme: "upto", Network: testNetwork, Asset: testToken, Payer: addr(payerKey), PayTo: testPayTo,
		Nonce: "0x" + strings.Repeat("0", 63) + "1", Amount: "50000", ValidBefore: now.Add(60 * time.Second)}
	if c != want {
		t.Fatalf("credential\n got %+v\nwant %+v", c, want)
	}
}

// refusal is one way of breaking a credential and the code it must be refused with.
type refusal struct {
	name string
	kind error
	code string
}

func TestVerifyExactRefuses(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	r := exactReq()
	sec := func(d int64) string { return strconv.FormatInt(now.Unix()+d, 10) }
	cases := []struct {
		refusal
		edit func(a *exactAuth) // before signing
		post func(a *exactAuth) // after signing (tampering)
		key  bool               // sign with otherKey
		sig  func(string) string
		offr func(r *Requirements)
	}{
		{refusal: refusal{"tampered amount", ErrInvalid, "payment_amount_mismatch"}, post: func(a *exactAuth) { a.Value = "1" }},
		{refusal: refusal{"signed a smaller amount", ErrInvalid, "payment_amount_mismatch"}, edit: func(a *exactAuth) { a.Value = "5000" }},
		{refusal: refusal{"tampered payTo", ErrInvalid, "payment_recipient_mismatch"}, post: func(a *exactAuth) { a.To = addr(otherKey) }},
		{refusal: refusal{"signed another payTo", ErrInvalid, "payment_recipient_mismatch"}, edit: func(a *exactAuth) { a.To = addr(otherKey) }},
		{refusal: refusal{"tampered nonce", ErrInvalid, "payment_signature_invalid"}, post: func(a *exactAuth) { a.Nonce = "0x" + strings.Repeat("ab", 32) }},
		{refusal: refusal{"tampered validBefore", ErrInvalid, "payment_signature_invalid"}, post: func(a *exactAuth) { a.ValidBefore = sec(50) }},
		{refusal: refusal{"wrong chain id in the domain", ErrInvalid, "payment_signature_invalid"}, edit: func(a *exactAuth) { a.chainID = 84532 }},
		{refusal: refusal{"network of the offer differs", ErrInvalid, "payment_signature_invalid"}, offr: func(r *Requirements) { r.Network = "eip155:1" }},
		{refusal: refusal{"another asset in the domain", ErrInvalid, "payment_signature_invalid"}, edit: func(a *exactAuth) { a.token = testFacilitator }},
		{refusal: refusal{"another domain name", ErrInvalid, "payment_signature_invalid"}, edit: func(a *exactAuth) { a.name = "USD Coin" }},
		{refusal: refusal{"another domain version", ErrInvalid, "payment_signature_invalid"}, edit: func(a *exactAuth) { a.version = "1" }},
		{refusal: refusal{"wrong signer", ErrInvalid, "payment_signature_invalid"}, key: true},
		{refusal: refusal{"from is not the signer", ErrInvalid, "payment_signature_invalid"}, post: func(a *exactAuth) { a.From = addr(otherKey) }},
		{refusal: refusal{"expired", ErrInvalid, "payment_expired"}, edit: func(a *exactAuth) { a.ValidBefore = sec(-1) }},
		{refusal: refusal{"expires within 6 s", ErrInvalid, "payment_expired"}, edit: func(a *exactAuth) { a.ValidBefore = sec(5) }},
		{refusal: refusal{"not yet valid", ErrInvalid, "payment_not_yet_valid"}, edit: func(a *exactAuth) { a.ValidAfter = sec(30) }},
		{refusal: refusal{"valid for too long", ErrInvalid, "payment_validity_too_long"}, edit: func(a *exactAuth) { a.ValidBefore = sec(60 + 301) }},
		{refusal: refusal{"validBefore past 2^256", ErrMalformed, "invalid_payment_payload"}, post: func(a *exactAuth) {
			a.ValidBefore = new(big.Int).Lsh(big.NewInt(1), 256).String()
		}},
		{refusal: refusal{"value not decimal", ErrMalformed, "invalid_payment_payload"}, post: func(a *exactAuth) { a.Value = "0x2710" }},
		{refusal: refusal{"value with leading zero", ErrMalformed, "invalid_payment_payload"}, post: func(a *exactAuth) { a.Value = "010000" }},
		{refusal: refusal{"negative value", ErrMalformed, "invalid_payment_payload"}, post: func(a *exactAuth) { a.Value = "-10000" }},
		{refusal: refusal{"short nonce", ErrMalformed, "invalid_payment_payload"}, post: func(a *exactAuth) { a.Nonce = "0x1234" }},
		{refusal: refusal{"bad checksum", ErrMalformed, "invalid_payment_payload"}, post: func(a *exactAuth) {
			a.To = "0x3c44CdDdB6a900fa2b585dd299e03d12FA4293BC"
		}},
		{refusal: refusal{"signature not hex", ErrMalformed, "invalid_payment_payload"}, sig: func(string) string { return "0xzz" }},
		{refusal: refusal{"signature without 0x", ErrMalformed, "invalid_payment_payload"}, sig: func(s string) string { return s[2:] }},
		{refusal: refusal{"empty signature", ErrMalformed, "invalid_payment_payload"}, sig: func(string) string { return "" }},
		{refusal: refusal{"64-byte signature", ErrInvalid, "payment_signature_unsupported"}, sig: func(s string) string { return s[:130] }},
		{refusal: refusal{"smart-wallet signature", ErrInvalid, "payment_signature_unsupported"}, sig: func(s string) string { return s + strings.Repeat("00", 64) }},
		{refusal: refusal{"v out of range", ErrInvalid, "payment_signature_invalid"}, sig: func(s string) string { return s[:130] + "1d" }},
		{refusal: refusal{"high s (malleated)", ErrInvalid, "payment_signature_invalid"}, sig: malleate},
		{refusal: refusal{"zero r", ErrInvalid, "payment_signature_invalid"}, sig: func(s string) string { return "0x" + strings.Repeat("0", 64) + s[66:] }},
		{refusal: refusal{"flipped bit", ErrInvalid, "payment_signature_invalid"}, sig: func(s string) string { return s[:10] + flip(s[10]) + s[11:] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			offered := exactReq()
			if c.offr != nil {
				c.offr(&offered)
			}
			a := newExactAuth(now, r, payerKey)
			if c.edit != nil {
				c.edit(&a)
			}
			k := payerKey
			if c.key {
				k = otherKey
			}
			sig := a.sign(t, k)
			if c.post != nil {
				c.post(&a)
			}
			if c.sig != nil {
				sig = c.sig(sig)
			}
			_, err := Verify(paid(t, offered, exactPayloadOf(a, sig)), offered, now)
			checkRefusal(t, err, c.refusal)
		})
	}
}

func TestVerifyUptoRefuses(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	r := uptoReq()
	sec := func(d int64) string { return strconv.FormatInt(now.Unix()+d, 10) }
	cases := []struct {
		refusal
		edit func(a *uptoAuth)
		post func(a *uptoAuth)
		key  bool
		offr func(r *Requirements)
	}{
		{refusal: refusal{"tampered cap", ErrInvalid, "payment_amount_mismatch"}, post: func(a *uptoAuth) { a.Permitted.Amount = "1" }},
		{refusal: refusal{"signed a larger cap", ErrInvalid, "payment_amount_mismatch"}, edit: func(a *uptoAuth) { a.Permitted.Amount = "60000" }},
		{refusal: refusal{"another token", ErrInvalid, "payment_asset_mismatch"}, edit: func(a *uptoAuth) { a.Permitted.Token = testFacilitator }},
		{refusal: refusal{"another spender", ErrInvalid, "payment_spender_mismatch"}, edit: func(a *uptoAuth) { a.Spender = addr(otherKey) }},
		{refusal: refusal{"exact proxy as spender", ErrInvalid, "payment_spender_mismatch"}, edit: func(a *uptoAuth) { a.Spender = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001" }},
		{refusal: refusal{"tampered payTo", ErrInvalid, "payment_recipient_mismatch"}, post: func(a *uptoAuth) { a.Witness.To = addr(otherKey) }},
		{refusal: refusal{"another facilitator", ErrInvalid, "payment_facilitator_mismatch"}, edit: func(a *uptoAuth) { a.Witness.Facilitator = addr(otherKey) }},
		{refusal: refusal{"tampered nonce", ErrInvalid, "payment_signature_invalid"}, post: func(a *uptoAuth) { a.Nonce = "7" }},
		{refusal: refusal{"tampered deadline", ErrInvalid, "payment_signature_invalid"}, post: func(a *uptoAuth) { a.Deadline = sec(59) }},
		{refusal: refusal{"wrong chain id in the domain", ErrInvalid, "payment_signature_invalid"}, edit: func(a *uptoAuth) { a.chainID = 1 }},
		{refusal: refusal{"another verifying contract", ErrInvalid, "payment_signature_invalid"}, edit: func(a *uptoAuth) { a.verifier = testToken }},
		{refusal: refusal{"network of the offer differs", ErrInvalid, "payment_signature_invalid"}, offr: func(r *Requirements) { r.Network = "eip155:8453" }},
		{refusal: refusal{"wrong signer", ErrInvalid, "payment_signature_invalid"}, key: true},
		{refusal: refusal{"expired", ErrInvalid, "payment_expired"}, edit: func(a *uptoAuth) { a.Deadline = sec(0) }},
		{refusal: refusal{"not yet valid", ErrInvalid, "payment_not_yet_valid"}, edit: func(a *uptoAuth) { a.Witness.ValidAfter = sec(1) }},
		{refusal: refusal{"valid for too long", ErrInvalid, "payment_validity_too_long"}, edit: func(a *uptoAuth) { a.Deadline = sec(100000) }},
		{refusal: refusal{"nonce in hex", ErrMalformed, "invalid_payment_payload"}, post: func(a *uptoAuth) { a.Nonce = "0x01" }},
		{refusal: refusal{"missing witness", ErrMalformed, "invalid_payment_payload"}, post: func(a *uptoAuth) { a.Witness.Facilitator = "" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			offered := uptoReq()
			if c.offr != nil {
				c.offr(&offered)
			}
			a := newUptoAuth(now, r, payerKey)
			if c.edit != nil {
				c.edit(&a)
			}
			k := payerKey
			if c.key {
				k = otherKey
			}
			sig := a.sign(t, k)
			if c.post != nil {
				c.post(&a)
			}
			_, err := Verify(paid(t, offered, uptoPayloadOf(a, sig)), offered, now)
			checkRefusal(t, err, c.refusal)
		})
	}
}

func TestVerifyPayloadShape(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	a := newExactAuth(now, exactReq(), payerKey)
	sig := a.sign(t, payerKey)
	u := newUptoAuth(now, uptoReq(), payerKey)
	for _, c := range []struct {
		refusal
		r       Requirements
		payload any
	}{
		{refusal{"exact without authorization", ErrMalformed, "invalid_payment_payload"}, exactReq(), map[string]any{"signature": sig}},
		{refusal{"exact paid with Permit2", ErrInvalid, "payment_payload_unsupported"}, exactReq(), uptoPayloadOf(u, sig)},
		{refusal{"upto paid with EIP-3009", ErrMalformed, "invalid_payment_payload"}, uptoReq(), exactPayloadOf(a, sig)},
		{refusal{"value as a number", ErrMalformed, "invalid_payment_payload"}, exactReq(), map[string]any{"signature": sig,
			"authorization": map[string]any{"from": a.From, "to": a.To, "value": 10000, "validAfter": "0", "validBefore": a.ValidBefore, "nonce": a.Nonce}}},
		{refusal{"authorization not an object", ErrMalformed, "invalid_payment_payload"}, exactReq(), map[string]any{"signature": sig, "authorization": "x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Verify(paid(t, c.r, c.payload), c.r, now)
			checkRefusal(t, err, c.refusal)
		})
	}
	// The matched option's scheme must be the echoed one.
	_, err := Verify(paid(t, exactReq(), exactPayloadOf(a, sig)), uptoReq(), now)
	checkRefusal(t, err, refusal{"scheme", ErrInvalid, "payment_scheme_mismatch"})
}

func checkRefusal(t *testing.T, err error, want refusal) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, want.kind) || e.Code != want.code {
		t.Fatalf("%s: got %v (code %q), want %v with code %s", want.name, err, Code(err), want.kind, want.code)
	}
	t.Logf("%s: %s", e.Code, e.Msg)
	if longHex.MatchString(e.Msg) {
		t.Errorf("%s: message holds a long hex run (a signature?): %s", want.name, e.Msg)
	}
	if len(e.Msg) < 20 {
		t.Errorf("%s: message %q says too little", want.name, e.Msg)
	}
}

// malleate turns a signature into its high-s twin, which recovers the same signer.
func malleate(s string) string {
	b := hexMust(s)
	n := crypto.S256().Params().N
	hs := new(big.Int).Sub(n, new(big.Int).SetBytes(b[32:64]))
	hs.FillBytes(b[32:64])
	b[64] ^= 1 // 27 <-> 28
	return fmt.Sprintf("0x%x", b)
}

func hexMust(s string) []byte {
	b, err := hexBytes(s)
	if err != nil {
		panic(err)
	}
	return b
}

func flip(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}

// BenchmarkVerify: the local cost of a paid request before any facilitator call (decode, match,
// EIP-712 digest, secp256k1 recovery).
func BenchmarkVerify(b *testing.B) {
	now := time.Unix(1_900_000_000, 0)
	a := newExactAuth(now, exactReq(), payerKey)
	u := newUptoAuth(now, uptoReq(), payerKey)
	for _, c := range []struct {
		name string
		r    Requirements
		h    string
	}{
		{"exact", exactReq(), header(b, exactReq(), exactPayloadOf(a, a.sign(b, payerKey)))},
		{"upto", uptoReq(), header(b, uptoReq(), uptoPayloadOf(u, u.sign(b, payerKey)))},
	} {
		b.Run(c.name, func(b *testing.B) {
			offered := []Requirements{exactReq(), uptoReq()}
			for b.Loop() {
				p, err := DecodePaymentSignature(c.h)
				if err != nil {
					b.Fatal(err)
				}
				i, why := Match(p.Accepted, offered)
				if i < 0 {
					b.Fatal(why)
				}
				if _, err := Verify(p, offered[i], now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
