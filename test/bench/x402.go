package main

// x402 (-scenarios x402): what paying per request costs over a keyed request, through the real
// Envoy and the offline test bed (a local chain, a real EIP-3009 token, a real facilitator). One
// request at a time (each payment is a transaction on the chain): a keyed chat request (the
// baseline), the 402 round trip (no PAYMENT-SIGNATURE), and a paid exact request (local
// verification, the credential's claim in bbolt, the facilitator's verify, the business call,
// the facilitator's settle). The facilitator's own verify and settle are timed directly too, and
// the gateway's local verification in process, so the paid request's cost can be read apart.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

const x402BenchConfig = `billing: {enabled: true}
providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${BENCH_PROVIDER_KEY}"}
models:
  - id: gpt-4o-mini
    providers: [{provider: fake, model: fake-llama-3}]
    pricing: {request: "0.0001"}
x402:
  pay_url: http://pay-url.invalid
  facilitator_url: %s
  endpoints:
    - slug: bench
      target: /v1/chat/completions
      accepts:
        - {scheme: exact, network: "%s", asset: "%s", pay_to: "%s", price: "0.001", asset_decimals: 6, extra: {name: USDC, version: "2"}}
`

func runX402(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	bed, err := harness.StartBed("--payer-usdc", "1000")
	if err != nil {
		return err
	}
	defer bed.Stop()
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	dir = filepath.Join(dir, "x402")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	g, err := harness.Start(ctx, harness.Options{Bin: o.tollwayBin, EnvoyBin: o.envoyBin, Dir: dir, Drain: 2 * time.Second,
		Body: fmt.Sprintf(x402BenchConfig, fake.URL(), bed.FacilitatorURL, bed.Network, bed.Asset, bed.PayTo),
		Env:  append([]string{"BENCH_PROVIDER_KEY=" + providerKey}, o.tollwayEnv...)})
	if err != nil {
		return err
	}
	defer g.Stop()
	cfg, _ := os.ReadFile(g.CfgPath)
	if err := os.WriteFile(g.CfgPath, bytes.ReplaceAll(cfg, []byte("http://pay-url.invalid"), []byte("http://"+g.Public)), 0o600); err != nil {
		return err
	}
	if _, err := g.CLI(ctx, "reload"); err != nil {
		return err
	}
	if err := g.NewAccount(ctx, "bench", "1000"); err != nil {
		return err
	}
	key, err := g.NewKey(ctx, "bench")
	if err != nil {
		return err
	}
	payer, err := crypto.HexToECDSA(strings.TrimPrefix(bed.PayerKey, "0x"))
	if err != nil {
		return err
	}
	client := newClient(o.timeout)
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in five words"}],"max_tokens":32}`)
	post := func(url, auth, sig string, want int) (time.Duration, http.Header, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("content-type", "application/json")
		if auth != "" {
			req.Header.Set("authorization", "Bearer "+auth)
		}
		if sig != "" {
			req.Header.Set(x402.HeaderPaymentSignature, sig)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != want {
			return 0, nil, fmt.Errorf("x402 bench: %s: %d %s", url, resp.StatusCode, raw)
		}
		return took, resp.Header, nil
	}
	paid := "http://" + g.Public + "/x402/bench"
	// The offer, from one 402.
	_, h, err := post(paid, "", "", http.StatusPaymentRequired)
	if err != nil {
		return err
	}
	pr, err := x402.DecodePaymentRequired(h.Get(x402.HeaderPaymentRequired))
	if err != nil {
		return err
	}
	offer := pr.Accepts[0]
	n := o.x402Requests
	var keyed, unpaid, paidLat, verify, settle, local []time.Duration
	fac := x402.NewFacilitator(bed.FacilitatorURL)
	fmt.Fprintf(stderr, "bench: x402: %d keyed, 402 and paid requests, one at a time ...\n", n)
	for i := range n + 2 { // the first two warm up
		k, _, err := post(g.BaseURL+"/chat/completions", key, "", http.StatusOK)
		if err != nil {
			return err
		}
		u, _, err := post(paid, "", "", http.StatusPaymentRequired)
		if err != nil {
			return err
		}
		sig, err := signExact(payer, offer)
		if err != nil {
			return err
		}
		p, ph, err := post(paid, "", sig, http.StatusOK)
		if err != nil {
			return err
		}
		if ph.Get(x402.HeaderPaymentResponse) == "" {
			return fmt.Errorf("x402 bench: a paid answer without PAYMENT-RESPONSE")
		}
		// The facilitator alone, with a credential of its own, and the local check in process.
		sig2, err := signExact(payer, offer)
		if err != nil {
			return err
		}
		pp, err := x402.DecodePaymentSignature(sig2)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := x402.Verify(pp, offer, time.Now()); err != nil {
			return err
		}
		t1 := time.Now()
		if _, err := fac.Verify(ctx, pp, offer); err != nil {
			return err
		}
		t2 := time.Now()
		if _, err := fac.Settle(ctx, pp, offer); err != nil {
			return err
		}
		t3 := time.Now()
		if i >= 2 {
			keyed, unpaid, paidLat = append(keyed, k), append(unpaid, u), append(paidLat, p)
			local, verify, settle = append(local, t1.Sub(t0)), append(verify, t2.Sub(t1)), append(settle, t3.Sub(t2))
		}
	}
	fmt.Fprintf(stdout, "\n== x402: %d requests one at a time through Envoy, a local chain and facilitator ==\n", n)
	fmt.Fprintf(stdout, "%-44s %9s %9s %12s %12s\n", "path", "p50 ms", "p99 ms", "p50 over keyed", "p99 over keyed")
	row := func(name string, d []time.Duration) {
		fmt.Fprintf(stdout, "%-44s %9s %9s %12s %12s\n", name, ms(pct(d, 0.50)), ms(pct(d, 0.99)),
			plusMS(pct(d, 0.50)-pct(keyed, 0.50)), plusMS(pct(d, 0.99)-pct(keyed, 0.99)))
	}
	row("keyed chat (baseline)", keyed)
	row("402 round trip (no PAYMENT-SIGNATURE)", unpaid)
	row("paid exact (verify, claim, business, settle)", paidLat)
	fmt.Fprintf(stdout, "of which, measured apart: local EIP-712 verification %s ms p50, facilitator /verify %s ms p50, /settle (a transaction on the chain) %s ms p50\n",
		ms(pct(local, 0.5)), ms(pct(verify, 0.5)), ms(pct(settle, 0.5)))
	return nil
}

// signExact makes an exact (EIP-3009) credential for offer, valid for its maxTimeoutSeconds, as
// the reference clients shape it.
func signExact(key *ecdsa.PrivateKey, offer x402.Requirements) (string, error) {
	var nonce [32]byte
	_, _ = rand.Read(nonce[:])
	var extra struct{ Name, Version string }
	if err := json.Unmarshal(offer.Extra, &extra); err != nil {
		return "", err
	}
	chain, err := strconv.ParseInt(strings.TrimPrefix(offer.Network, "eip155:"), 10, 64)
	if err != nil {
		return "", err
	}
	from := crypto.PubkeyToAddress(key.PublicKey).Hex()
	before := strconv.FormatInt(time.Now().Unix()+offer.MaxTimeoutSeconds, 10)
	value, _ := new(big.Int).SetString(offer.Amount, 10)
	beforeN, _ := new(big.Int).SetString(before, 10)
	td := apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain":              {{Name: "name", Type: "string"}, {Name: "version", Type: "string"}, {Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"}},
			"TransferWithAuthorization": {{Name: "from", Type: "address"}, {Name: "to", Type: "address"}, {Name: "value", Type: "uint256"}, {Name: "validAfter", Type: "uint256"}, {Name: "validBefore", Type: "uint256"}, {Name: "nonce", Type: "bytes32"}},
		},
		PrimaryType: "TransferWithAuthorization",
		Domain:      apitypes.TypedDataDomain{Name: extra.Name, Version: extra.Version, ChainId: math.NewHexOrDecimal256(chain), VerifyingContract: offer.Asset},
		Message: apitypes.TypedDataMessage{"from": from, "to": offer.PayTo, "value": value, "validAfter": big.NewInt(0),
			"validBefore": beforeN, "nonce": nonce[:]},
	}
	digest, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		return "", err
	}
	sig, err := crypto.Sign(digest, key)
	if err != nil {
		return "", err
	}
	sig[64] += 27
	payload, _ := json.Marshal(map[string]any{"signature": "0x" + hex.EncodeToString(sig), "authorization": map[string]string{
		"from": from, "to": offer.PayTo, "value": offer.Amount, "validAfter": "0", "validBefore": before, "nonce": "0x" + hex.EncodeToString(nonce[:]),
	}})
	return x402.EncodePaymentSignature(&x402.PaymentPayload{Accepted: offer, Payload: payload})
}
