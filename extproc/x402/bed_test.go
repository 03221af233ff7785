package x402

// The facilitator client against the real @x402/core facilitator of the offline test bed
// (test/x402: anvil, the EIP-3009 token, Permit2, the upto proxy), with credentials signed in
// Go: the facilitator's viem checks the EIP-712 shapes of this package independently.

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/test/harness"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/shopspring/decimal"
)

// startBed starts the offline test bed and stops it when the test ends. It fails, never skips,
// when Node or the bed is missing, except under -short.
func startBed(t *testing.T, args ...string) *harness.Bed {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the x402 test bed (Node, anvil) is not started")
	}
	b, err := harness.StartBed(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

func TestFacilitatorWithTestBed(t *testing.T) {
	started := time.Now()
	b := startBed(t, "--preapprove")
	t.Logf("bed ready in %v", time.Since(started).Round(time.Millisecond))
	payer := mustKey(strings.TrimPrefix(b.PayerKey, "0x"))
	if addr(payer) != b.PayerAddress {
		t.Fatalf("payer key %s is not %s's", addr(payer), b.PayerAddress)
	}
	extra, _ := json.Marshal(map[string]string{"name": b.AssetName, "version": b.AssetVersion})
	exact := Requirements{Scheme: SchemeExact, Network: b.Network, Amount: "10000", Asset: b.Asset, PayTo: b.PayTo, MaxTimeoutSeconds: 60, Extra: extra}
	uptoExtra, _ := json.Marshal(map[string]string{"name": b.AssetName, "version": b.AssetVersion, "facilitatorAddress": b.FacilitatorAddress})
	upto := Requirements{Scheme: SchemeUpto, Network: b.Network, Amount: "50000", Asset: b.Asset, PayTo: b.PayTo, MaxTimeoutSeconds: 60, Extra: uptoExtra}
	fac := NewFacilitator(b.FacilitatorURL)
	ctx := context.Background()
	control := func(body string) {
		t.Helper()
		resp, err := http.Post(b.FacilitatorURL+"/"+map[bool]string{true: "__reset", false: "__control"}[body == ""], "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("control %s: %v %v", body, resp, err)
		}
		resp.Body.Close()
	}
	balance := func() decimal.Decimal {
		t.Helper()
		resp, err := http.Get(b.FacilitatorURL + "/__balance?address=" + b.PayerAddress)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var bal struct {
			Token string `json:"token"`
		}
		if err := json.UnmarshalRead(resp.Body, &bal); err != nil {
			t.Fatal(err)
		}
		return decimal.RequireFromString(bal.Token)
	}
	signExact := func(k string) *PaymentPayload {
		key := payer
		if k != "" {
			key = mustKey(k)
		}
		a := newExactAuth(time.Now(), exact, key)
		a.name, a.version, a.token = b.AssetName, b.AssetVersion, b.Asset
		p := paid(t, exact, exactPayloadOf(a, a.sign(t, key)))
		if _, err := Verify(p, exact, time.Now()); err != nil {
			t.Fatalf("local verify: %v", err)
		}
		return p
	}

	t.Run("supported", func(t *testing.T) {
		s, err := fac.Supported(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(exact); err != nil {
			t.Error(err)
		}
		if err := s.Check(upto); err != nil {
			t.Error(err)
		}
		wrong := upto
		wrong.Extra = jsontext.Value(`{"facilitatorAddress":"` + testPayTo + `"}`)
		if err := s.Check(wrong); !errors.Is(err, ErrConfig) {
			t.Errorf("another facilitatorAddress: %v", err)
		}
	})

	t.Run("exact verify, settle, replay", func(t *testing.T) {
		before := balance()
		p := signExact("")
		vr, err := fac.Verify(ctx, p, exact)
		if err != nil || !strings.EqualFold(vr.Payer, b.PayerAddress) {
			t.Fatalf("verify: %+v %v", vr, err)
		}
		sr, err := fac.Settle(ctx, p, exact)
		if err != nil || !sr.Success || len(sr.Transaction) != 66 || sr.Network != b.Network {
			t.Fatalf("settle: %+v %v", sr, err)
		}
		if got := before.Sub(balance()); got.String() != "10000" {
			t.Errorf("the payer paid %s atomic units, want 10000", got)
		}
		// The facilitator refuses the same credential once it settled on chain.
		if _, err := fac.Verify(ctx, p, exact); !errors.Is(err, ErrRejected) || Status(err) != 402 {
			t.Errorf("verify after settle: %v, want ErrRejected", err)
		}
		// Settling it again is refused with the reason that says its nonce is spent.
		if sr, err := fac.Settle(ctx, p, exact); !errors.Is(err, ErrSettleFailed) || sr.Success || !SpentNonce(SchemeExact, sr.ErrorReason) {
			t.Errorf("settle twice: %+v %v, want ErrSettleFailed for a spent nonce", sr, err)
		}
	})

	t.Run("upto settles the actual cost", func(t *testing.T) {
		offers, err := (&Config{PayURL: "http://127.0.0.1:8080", FacilitatorURL: b.FacilitatorURL, Endpoints: []Endpoint{{
			Slug: "chat", Target: ChatTarget, Accepts: []Accept{{Scheme: SchemeUpto, Network: b.Network, Asset: b.Asset, PayTo: b.PayTo,
				MaxPrice: "0.05", AssetDecimals: six, Extra: map[string]any{"facilitatoraddress": b.FacilitatorAddress}}},
		}}}).NewOffers()
		if err != nil {
			t.Fatal(err)
		}
		o := offers["chat"]
		offered, _ := o.Requirements(decimal.Zero)
		before := balance()
		u := newUptoAuth(time.Now(), offered[0], payer)
		u.Witness.Facilitator = b.FacilitatorAddress
		p := paid(t, offered[0], uptoPayloadOf(u, u.sign(t, payer)))
		if i, why := Match(p.Accepted, offered); i != 0 {
			t.Fatal(why)
		}
		if _, err := Verify(p, offered[0], time.Now()); err != nil {
			t.Fatalf("local verify: %v", err)
		}
		if _, err := fac.Verify(ctx, p, offered[0]); err != nil {
			t.Fatalf("verify: %v", err)
		}
		settle, capped, err := o.Charge(0, decimal.RequireFromString("0.0123451"))
		if err != nil || capped || settle.Amount != "12346" {
			t.Fatalf("charge: %+v %v %v", settle, capped, err)
		}
		sr, err := fac.Settle(ctx, p, settle)
		if err != nil || !sr.Success || sr.Amount != "12346" {
			t.Fatalf("settle: %+v %v", sr, err)
		}
		if got := before.Sub(balance()); got.String() != "12346" {
			t.Errorf("the payer paid %s atomic units, want the actual cost 12346 (cap 50000)", got)
		}
		// The same charge again: @x402/evm simulates first and says so; SpentNonce reads it.
		if sr, err := fac.Settle(ctx, p, settle); !errors.Is(err, ErrSettleFailed) || !SpentNonce(SchemeUpto, sr.ErrorReason) {
			t.Errorf("settle twice: %+v %v, want ErrSettleFailed for a spent nonce", sr, err)
		} else {
			t.Logf("upto settled twice: %s", sr.ErrorReason)
		}
	})

	t.Run("no funds: rejected", func(t *testing.T) {
		k, _ := crypto.GenerateKey()
		p := signExact(hex.EncodeToString(crypto.FromECDSA(k)))
		_, err := fac.Verify(ctx, p, exact)
		if !errors.Is(err, ErrRejected) || Code(err) != "payment_rejected" {
			t.Fatalf("verify of an unfunded payer: %v", err)
		}
		t.Logf("rejected: %v", err)
	})

	t.Run("facilitator controls", func(t *testing.T) {
		p := signExact("")
		for _, c := range []struct {
			control string
			settle  bool
			kind    error
		}{
			{`{"verify":"error"}`, false, ErrUnavailable},
			{`{"verify":"invalid"}`, false, ErrRejected},
			{`{"down":true,"down_mode":"503"}`, false, ErrUnavailable},
			{`{"down":true,"down_mode":"drop"}`, false, ErrUnavailable},
			{`{"settle":"error"}`, true, ErrSettleUnknown},
			{`{"settle":"fail"}`, true, ErrSettleFailed},
			{`{"down":true,"down_mode":"drop"}`, true, ErrSettleUnknown},
			{`{"down":true,"down_mode":"503"}`, true, ErrSettleUnknown},
		} {
			control(c.control)
			var err error
			var sr SettlementResponse
			if c.settle {
				sr, err = fac.Settle(ctx, p, exact)
			} else {
				_, err = fac.Verify(ctx, p, exact)
			}
			if !errors.Is(err, c.kind) {
				t.Errorf("%s (settle %v): %v, want %v", c.control, c.settle, err, c.kind)
			}
			if c.kind == ErrSettleFailed && (sr.Success || sr.ErrorReason != "test_forced_settle_failure") {
				t.Errorf("%s: %+v", c.control, sr)
			}
			control("")
		}
		control(`{"delay_ms":2000}`)
		slow := NewFacilitator(b.FacilitatorURL)
		slow.Timeout = 200 * time.Millisecond
		if _, err := slow.Verify(ctx, p, exact); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "within 200ms") {
			t.Errorf("slow facilitator: %v", err)
		}
		control("")
	})
}
