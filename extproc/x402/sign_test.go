package x402

// Test credentials signed in Go (go-ethereum), shaped exactly as the reference clients shape
// theirs: the vectors in testdata/ and the facilitator test check the shapes against @x402/evm.

import (
	"crypto/ecdsa"
	"encoding/hex"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

const (
	testToken       = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
	testPayTo       = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
	testFacilitator = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
	testNetwork     = "eip155:31337"
)

// testKeys: a payer and someone else (anvil's well-known dev keys 1 and 5; test use only).
var (
	payerKey = mustKey("59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d")
	otherKey = mustKey("8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba")
)

func mustKey(h string) *ecdsa.PrivateKey {
	k, err := crypto.HexToECDSA(h)
	if err != nil {
		panic(err)
	}
	return k
}

func addr(k *ecdsa.PrivateKey) string { return crypto.PubkeyToAddress(k.PublicKey).Hex() }

func exactReq() Requirements {
	return Requirements{Scheme: SchemeExact, Network: testNetwork, Amount: "10000", Asset: testToken, PayTo: testPayTo,
		MaxTimeoutSeconds: 60, Extra: jsontext.Value(`{"name":"USDC","version":"2"}`)}
}

func uptoReq() Requirements {
	return Requirements{Scheme: SchemeUpto, Network: testNetwork, Amount: "50000", Asset: testToken, PayTo: testPayTo,
		MaxTimeoutSeconds: 60, Extra: jsontext.Value(`{"facilitatorAddress":"` + testFacilitator + `","name":"USDC","version":"2"}`)}
}

// exactAuth is an EIP-3009 authorization as the clients send it, with its signing domain.
type exactAuth struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Value       string `json:"value"`
	ValidAfter  string `json:"validAfter"`
	ValidBefore string `json:"validBefore"`
	Nonce       string `json:"nonce"`

	chainID       int64
	name, version string
	token         string
}

func newExactAuth(now time.Time, r Requirements, payer *ecdsa.PrivateKey) exactAuth {
	return exactAuth{From: addr(payer), To: r.PayTo, Value: r.Amount, ValidAfter: "0",
		ValidBefore: strconv.FormatInt(now.Unix()+r.MaxTimeoutSeconds, 10),
		Nonce:       "0x" + hex.EncodeToString(crypto.Keccak256([]byte(now.String()))),
		chainID:     31337, name: "USDC", version: "2", token: r.Asset}
}

func bigOf(s string) *big.Int {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic("not a number: " + s)
	}
	return n
}

func (a exactAuth) sign(t testing.TB, k *ecdsa.PrivateKey) string {
	t.Helper()
	nonce, _ := hex.DecodeString(a.Nonce[2:])
	td := apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain":              {{Name: "name", Type: "string"}, {Name: "version", Type: "string"}, {Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"}},
			"TransferWithAuthorization": {{Name: "from", Type: "address"}, {Name: "to", Type: "address"}, {Name: "value", Type: "uint256"}, {Name: "validAfter", Type: "uint256"}, {Name: "validBefore", Type: "uint256"}, {Name: "nonce", Type: "bytes32"}},
		},
		PrimaryType: "TransferWithAuthorization",
		Domain:      apitypes.TypedDataDomain{Name: a.name, Version: a.version, ChainId: math.NewHexOrDecimal256(a.chainID), VerifyingContract: a.token},
		Message: apitypes.TypedDataMessage{"from": a.From, "to": a.To, "value": bigOf(a.Value), "validAfter": bigOf(a.ValidAfter),
			"validBefore": bigOf(a.ValidBefore), "nonce": nonce},
	}
	return signTyped(t, td, k)
}

// uptoAuth is a Permit2 authorization with the upto witness.
type uptoAuth struct {
	From      string `json:"from"`
	Permitted struct {
		Token  string `json:"token"`
		Amount string `json:"amount"`
	} `json:"permitted"`
	Spender  string `json:"spender"`
	Nonce    string `json:"nonce"`
	Deadline string `json:"deadline"`
	Witness  struct {
		To          string `json:"to"`
		Facilitator string `json:"facilitator"`
		ValidAfter  string `json:"validAfter"`
	} `json:"witness"`

	chainID  int64
	verifier string
}

func newUptoAuth(now time.Time, r Requirements, payer *ecdsa.PrivateKey) uptoAuth {
	var a uptoAuth
	a.From = addr(payer)
	a.Permitted.Token, a.Permitted.Amount = r.Asset, r.Amount
	a.Spender = UptoProxyAddress
	a.Nonce = new(big.Int).SetBytes(crypto.Keccak256([]byte(now.String()))).String()
	a.Deadline = strconv.FormatInt(now.Unix()+r.MaxTimeoutSeconds, 10)
	a.Witness.To, a.Witness.Facilitator, a.Witness.ValidAfter = r.PayTo, testFacilitator, "0"
	a.chainID, a.verifier = 31337, Permit2Address
	return a
}

func (a uptoAuth) sign(t testing.TB, k *ecdsa.PrivateKey) string {
	t.Helper()
	td := apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain":              {{Name: "name", Type: "string"}, {Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"}},
			"PermitWitnessTransferFrom": {{Name: "permitted", Type: "TokenPermissions"}, {Name: "spender", Type: "address"}, {Name: "nonce", Type: "uint256"}, {Name: "deadline", Type: "uint256"}, {Name: "witness", Type: "Witness"}},
			"TokenPermissions":          {{Name: "token", Type: "address"}, {Name: "amount", Type: "uint256"}},
			"Witness":                   {{Name: "to", Type: "address"}, {Name: "facilitator", Type: "address"}, {Name: "validAfter", Type: "uint256"}},
		},
		PrimaryType: "PermitWitnessTransferFrom",
		Domain:      apitypes.TypedDataDomain{Name: "Permit2", ChainId: math.NewHexOrDecimal256(a.chainID), VerifyingContract: a.verifier},
		Message: apitypes.TypedDataMessage{
			"permitted": map[string]any{"token": a.Permitted.Token, "amount": bigOf(a.Permitted.Amount)},
			"spender":   a.Spender, "nonce": bigOf(a.Nonce), "deadline": bigOf(a.Deadline),
			"witness": map[string]any{"to": a.Witness.To, "facilitator": a.Witness.Facilitator, "validAfter": bigOf(a.Witness.ValidAfter)},
		},
	}
	return signTyped(t, td, k)
}

func signTyped(t testing.TB, td apitypes.TypedData, k *ecdsa.PrivateKey) string {
	t.Helper()
	digest, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := crypto.Sign(digest, k)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27 // as wallets send it
	return "0x" + hex.EncodeToString(sig)
}

// header is the PAYMENT-SIGNATURE a client sends for accepted with this scheme payload.
func header(t testing.TB, accepted Requirements, payload any) string {
	t.Helper()
	pl, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	h, err := EncodePaymentSignature(&PaymentPayload{Accepted: accepted, Payload: pl,
		Resource: &Resource{URL: "http://127.0.0.1:8080/x402/chat-mini"}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// paid decodes a client's header as the gateway would.
func paid(t testing.TB, accepted Requirements, payload any) *PaymentPayload {
	t.Helper()
	p, err := DecodePaymentSignature(header(t, accepted, payload))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return p
}

func exactPayloadOf(a exactAuth, sig string) map[string]any {
	return map[string]any{"signature": sig, "authorization": a}
}

func uptoPayloadOf(a uptoAuth, sig string) map[string]any {
	return map[string]any{"signature": sig, "permit2Authorization": a}
}

func TestSignHelpersRecover(t *testing.T) {
	now := time.Now()
	a := newExactAuth(now, exactReq(), payerKey)
	if _, err := Verify(paid(t, exactReq(), exactPayloadOf(a, a.sign(t, payerKey))), exactReq(), now); err != nil {
		t.Fatal(err)
	}
	u := newUptoAuth(now, uptoReq(), payerKey)
	if _, err := Verify(paid(t, uptoReq(), uptoPayloadOf(u, u.sign(t, payerKey))), uptoReq(), now); err != nil {
		t.Fatal(err)
	}
}
