package x402

// Local verification of EVM credentials, before any facilitator call, so a forged or tampered
// credential never reaches the facilitator (nor costs it an RPC): the EIP-712 digest the client
// signed is rebuilt from the payload and the offered requirement, the signer is recovered with
// secp256k1 and must be the payer, and every field the payment moves money by is checked
// against the offer. What needs the chain (balance, allowance, nonce state, a simulated
// transfer) is the facilitator's /verify.
//
// Only 65-byte EOA signatures are accepted: a smart-wallet signature (ERC-1271, or ERC-6492 for
// an undeployed wallet) is checked by calling the wallet contract, which needs the chain.

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Contract addresses the upto scheme signs for (as @x402/evm 2.27 hard-codes them).
const (
	// Permit2Address is Uniswap's Permit2, the EIP-712 verifyingContract of upto credentials.
	Permit2Address = "0x000000000022D473030F116dDEE9F6B43aC78BA3"
	// UptoProxyAddress is x402's upto Permit2 proxy: the spender every upto credential names.
	UptoProxyAddress = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002"
)

// Time rules.
const (
	// MinValidity: a credential must stay valid at least this long (the facilitator's rule:
	// validBefore / deadline >= now + 6 s), or it could expire before it settles.
	MinValidity = 6 * time.Second
	// ClockAllowance is how far ahead of the gateway's clock a client's clock may be: a
	// credential valid for longer than the option's maxTimeoutSeconds plus this is refused, so
	// no used credential has to be remembered for longer.
	ClockAllowance = 5 * time.Minute
	// ReplaySkew is how long after its validBefore / deadline a used credential is remembered:
	// chain time and the gateway's clock may disagree, and the gateway's clock may step back.
	ReplaySkew = 5 * time.Minute
)

// Credential is what a verified payment tells the gateway.
type Credential struct {
	Scheme  string
	Network string
	Asset   string // EIP-55
	Payer   string // EIP-55; the recovered signer
	PayTo   string // EIP-55
	// Nonce is the credential's nonce as 0x and 64 lower-case hex digits (EIP-3009's bytes32 or
	// Permit2's uint256), so one nonce has one spelling.
	Nonce string
	// Amount is what was signed, in atomic units: the value (exact) or the cap (upto).
	Amount string
	// ValidBefore is validBefore (exact) or deadline (upto): until then it could be replayed.
	ValidBefore time.Time
}

// Key is what the gateway records as used, in one spelling whatever the client's letter case:
// scheme, network, asset, payer and nonce.
func (c Credential) Key() string {
	return "x402/" + c.Scheme + "/" + c.Network + "/" + strings.ToLower(c.Asset) + "/" + strings.ToLower(c.Payer) + "/" + c.Nonce
}

// KeepUntil is how long the gateway must remember the credential as used.
func (c Credential) KeepUntil() time.Time { return c.ValidBefore.Add(ReplaySkew) }

type exactPayload struct {
	Signature     string `json:"signature"`
	Authorization *struct {
		From        string `json:"from"`
		To          string `json:"to"`
		Value       string `json:"value"`
		ValidAfter  string `json:"validAfter"`
		ValidBefore string `json:"validBefore"`
		Nonce       string `json:"nonce"`
	} `json:"authorization"`
}

type uptoPayload struct {
	Signature string `json:"signature"`
	Auth      *struct {
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
	} `json:"permit2Authorization"`
}

// Verify checks p locally against offered, the requirement Match found for it, at now. It
// returns the credential to record as used, or an *Error: ErrMalformed when the payload cannot
// be read, ErrInvalid when it is refused.
func Verify(p *PaymentPayload, offered Requirements, now time.Time) (Credential, error) {
	chain, ok := chainID(offered.Network)
	if !ok {
		return Credential{}, refuse(ErrInvalid, "payment_network_unsupported", "network %s is not an EVM network this gateway verifies", quote(offered.Network))
	}
	if p.Accepted.Scheme != offered.Scheme {
		return Credential{}, refuse(ErrInvalid, "payment_scheme_mismatch", "accepted.scheme %s is not the matched option's %s", quote(p.Accepted.Scheme), offered.Scheme)
	}
	v := &verifier{now: now, offered: offered, chain: chain, extra: extraStrings(offered.Extra)}
	switch offered.Scheme {
	case SchemeExact:
		return v.exact(p.Payload)
	case SchemeUpto:
		return v.upto(p.Payload)
	}
	return Credential{}, refuse(ErrInvalid, "payment_scheme_unsupported", "scheme %s is not verified by this gateway (exact and upto are)", quote(offered.Scheme))
}

type verifier struct {
	now     time.Time
	offered Requirements
	chain   *big.Int
	extra   map[string]string
	err     *Error // the first malformed field
}

func badPayload(format string, args ...any) *Error {
	return refuse(ErrMalformed, "invalid_payment_payload", "PAYMENT-SIGNATURE payload."+format, args...)
}

func (v *verifier) exact(raw jsontext.Value) (Credential, error) {
	var pl exactPayload
	if err := strictInto(raw, &pl, "payload"); err != nil {
		return Credential{}, err
	}
	a := pl.Authorization
	if a == nil {
		if bytes.Contains(raw, []byte(`"permit2Authorization"`)) {
			return Credential{}, refuse(ErrInvalid, "payment_payload_unsupported", "exact is accepted as EIP-3009 (payload.authorization) only, not Permit2: pay the exact option as offered (no assetTransferMethod)")
		}
		return Credential{}, badPayload("authorization is missing: an exact payment carries the signed EIP-3009 authorization {from, to, value, validAfter, validBefore, nonce}")
	}
	from := v.address("authorization.from", a.From)
	to := v.address("authorization.to", a.To)
	value := v.uint256("authorization.value", a.Value)
	after := v.uint256("authorization.validAfter", a.ValidAfter)
	before := v.uint256("authorization.validBefore", a.ValidBefore)
	nonce := v.bytes32("authorization.nonce", a.Nonce)
	sig := v.signature(pl.Signature)
	if v.err != nil {
		return Credential{}, v.err
	}
	o := v.offered
	switch {
	case !sameAddress(to.Hex(), o.PayTo):
		return Credential{}, refuse(ErrInvalid, "payment_recipient_mismatch", "authorization.to %s is not this endpoint's payTo %s: sign again from PAYMENT-REQUIRED", to.Hex(), o.PayTo)
	case value.String() != o.Amount:
		return Credential{}, refuse(ErrInvalid, "payment_amount_mismatch", "authorization.value %s is not this endpoint's amount %s: sign again from PAYMENT-REQUIRED", value, o.Amount)
	}
	if err := v.window("authorization.validAfter", after, "authorization.validBefore", before); err != nil {
		return Credential{}, err
	}
	name, version := v.extra["name"], v.extra["version"]
	if name == "" || version == "" {
		return Credential{}, refuse(ErrInvalid, "payment_option_invalid", "this endpoint's exact option lacks extra.name or extra.version (a gateway configuration error)")
	}
	td := apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain": {{Name: "name", Type: "string"}, {Name: "version", Type: "string"}, {Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"}},
			"TransferWithAuthorization": {
				{Name: "from", Type: "address"}, {Name: "to", Type: "address"}, {Name: "value", Type: "uint256"},
				{Name: "validAfter", Type: "uint256"}, {Name: "validBefore", Type: "uint256"}, {Name: "nonce", Type: "bytes32"},
			},
		},
		PrimaryType: "TransferWithAuthorization",
		Domain:      apitypes.TypedDataDomain{Name: name, Version: version, ChainId: (*math.HexOrDecimal256)(v.chain), VerifyingContract: checksum(o.Asset)},
		Message: apitypes.TypedDataMessage{
			"from": from.Hex(), "to": to.Hex(), "value": value, "validAfter": after, "validBefore": before, "nonce": nonce,
		},
	}
	if err := recoverSigner(td, sig, from); err != nil {
		return Credential{}, err
	}
	return Credential{Scheme: SchemeExact, Network: o.Network, Asset: checksum(o.Asset), Payer: from.Hex(), PayTo: to.Hex(),
		Nonce: "0x" + hex.EncodeToString(nonce), Amount: value.String(), ValidBefore: time.Unix(before.Int64(), 0)}, nil
}

func (v *verifier) upto(raw jsontext.Value) (Credential, error) {
	var pl uptoPayload
	if err := strictInto(raw, &pl, "payload"); err != nil {
		return Credential{}, err
	}
	a := pl.Auth
	if a == nil {
		return Credential{}, badPayload("permit2Authorization is missing: an upto payment carries the signed Permit2 authorization {from, permitted, spender, nonce, deadline, witness}")
	}
	from := v.address("permit2Authorization.from", a.From)
	token := v.address("permit2Authorization.permitted.token", a.Permitted.Token)
	amount := v.uint256("permit2Authorization.permitted.amount", a.Permitted.Amount)
	spender := v.address("permit2Authorization.spender", a.Spender)
	nonce := v.uint256("permit2Authorization.nonce", a.Nonce)
	deadline := v.uint256("permit2Authorization.deadline", a.Deadline)
	to := v.address("permit2Authorization.witness.to", a.Witness.To)
	facilitator := v.address("permit2Authorization.witness.facilitator", a.Witness.Facilitator)
	after := v.uint256("permit2Authorization.witness.validAfter", a.Witness.ValidAfter)
	sig := v.signature(pl.Signature)
	if v.err != nil {
		return Credential{}, v.err
	}
	o := v.offered
	switch {
	case !sameAddress(token.Hex(), o.Asset):
		return Credential{}, refuse(ErrInvalid, "payment_asset_mismatch", "permit2Authorization.permitted.token %s is not this endpoint's asset %s: sign again from PAYMENT-REQUIRED", token.Hex(), o.Asset)
	case amount.String() != o.Amount:
		return Credential{}, refuse(ErrInvalid, "payment_amount_mismatch", "permit2Authorization.permitted.amount %s is not this endpoint's cap %s: sign again from PAYMENT-REQUIRED", amount, o.Amount)
	case !sameAddress(spender.Hex(), UptoProxyAddress):
		return Credential{}, refuse(ErrInvalid, "payment_spender_mismatch", "permit2Authorization.spender %s is not x402's upto proxy %s: use an x402 v2 upto client", spender.Hex(), UptoProxyAddress)
	case !sameAddress(to.Hex(), o.PayTo):
		return Credential{}, refuse(ErrInvalid, "payment_recipient_mismatch", "permit2Authorization.witness.to %s is not this endpoint's payTo %s: sign again from PAYMENT-REQUIRED", to.Hex(), o.PayTo)
	case !isHexAddress(v.extra["facilitatorAddress"]):
		return Credential{}, refuse(ErrInvalid, "payment_option_invalid", "this endpoint's upto option lacks extra.facilitatorAddress (a gateway configuration error)")
	case !sameAddress(facilitator.Hex(), v.extra["facilitatorAddress"]):
		return Credential{}, refuse(ErrInvalid, "payment_facilitator_mismatch", "permit2Authorization.witness.facilitator %s is not this endpoint's extra.facilitatorAddress %s: sign again from PAYMENT-REQUIRED", facilitator.Hex(), v.extra["facilitatorAddress"])
	}
	if err := v.window("permit2Authorization.witness.validAfter", after, "permit2Authorization.deadline", deadline); err != nil {
		return Credential{}, err
	}
	td := apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain": {{Name: "name", Type: "string"}, {Name: "chainId", Type: "uint256"}, {Name: "verifyingContract", Type: "address"}},
			"PermitWitnessTransferFrom": {
				{Name: "permitted", Type: "TokenPermissions"}, {Name: "spender", Type: "address"}, {Name: "nonce", Type: "uint256"},
				{Name: "deadline", Type: "uint256"}, {Name: "witness", Type: "Witness"},
			},
			"TokenPermissions": {{Name: "token", Type: "address"}, {Name: "amount", Type: "uint256"}},
			"Witness":          {{Name: "to", Type: "address"}, {Name: "facilitator", Type: "address"}, {Name: "validAfter", Type: "uint256"}},
		},
		PrimaryType: "PermitWitnessTransferFrom",
		Domain:      apitypes.TypedDataDomain{Name: "Permit2", ChainId: (*math.HexOrDecimal256)(v.chain), VerifyingContract: Permit2Address},
		Message: apitypes.TypedDataMessage{
			"permitted": map[string]any{"token": token.Hex(), "amount": amount},
			"spender":   spender.Hex(),
			"nonce":     nonce,
			"deadline":  deadline,
			"witness":   map[string]any{"to": to.Hex(), "facilitator": facilitator.Hex(), "validAfter": after},
		},
	}
	if err := recoverSigner(td, sig, from); err != nil {
		return Credential{}, err
	}
	return Credential{Scheme: SchemeUpto, Network: o.Network, Asset: token.Hex(), Payer: from.Hex(), PayTo: to.Hex(),
		Nonce: fmt.Sprintf("0x%064x", nonce), Amount: amount.String(), ValidBefore: time.Unix(deadline.Int64(), 0)}, nil
}

// window checks a credential's validity window at v.now: started, valid at least MinValidity
// more, and not longer than the option allows (maxTimeoutSeconds plus ClockAllowance).
func (v *verifier) window(afterName string, after *big.Int, beforeName string, before *big.Int) error {
	now := v.now.Unix()
	latest := now + v.offered.MaxTimeoutSeconds + int64(ClockAllowance/time.Second)
	switch {
	case after.Cmp(big.NewInt(now)) > 0:
		return refuse(ErrInvalid, "payment_not_yet_valid", "%s %s is in the future (now %d): sign with validAfter 0 or a past time", afterName, after, now)
	case before.Cmp(big.NewInt(now+int64(MinValidity/time.Second))) < 0:
		return refuse(ErrInvalid, "payment_expired", "%s %s has passed or is less than %d s away (now %d): request the endpoint again and sign a fresh credential", beforeName, before, int(MinValidity/time.Second), now)
	case before.Cmp(big.NewInt(latest)) > 0:
		return refuse(ErrInvalid, "payment_validity_too_long", "%s %s is more than maxTimeoutSeconds (%d) ahead (now %d): sign for at most maxTimeoutSeconds, or set your clock right", beforeName, before, v.offered.MaxTimeoutSeconds, now)
	}
	return nil
}

// recoverSigner checks that sig over td's EIP-712 digest recovers from.
func recoverSigner(td apitypes.TypedData, sig []byte, from common.Address) error {
	digest, _, err := apitypes.TypedDataAndHash(td)
	if err != nil { // the inputs were checked; this is a bug, not the client's
		return refuse(ErrInvalid, "payment_signature_invalid", "the signed message could not be encoded: %v", err)
	}
	pub, err := crypto.SigToPub(digest, sig)
	if err != nil {
		return refuse(ErrInvalid, "payment_signature_invalid", "the signature does not recover a signer: sign the EIP-712 message again")
	}
	if got := crypto.PubkeyToAddress(*pub); got != from {
		return refuse(ErrInvalid, "payment_signature_invalid", "the signature is not %s's over this payment (it recovers %s): sign again, from the wallet that pays, the message for this network, asset and amount", from.Hex(), got.Hex())
	}
	return nil
}

func (v *verifier) fail(e *Error) {
	if v.err == nil {
		v.err = e
	}
}

// address reads a 0x address; mixed case must be a valid EIP-55 checksum (the facilitator's
// viem refuses one that is not, and must not be the one to find out).
func (v *verifier) address(field, s string) common.Address {
	if err := checkAddress(s); err != nil {
		v.fail(badPayload("%s %s: %v", field, quote(s), err))
		return common.Address{}
	}
	return common.HexToAddress(s)
}

// uint256 reads a decimal string without sign or leading zeros, below 2^256.
func (v *verifier) uint256(field, s string) *big.Int {
	n := new(big.Int)
	ok := s != "" && len(s) <= 78 && (s == "0" || s[0] != '0')
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] >= '0' && s[i] <= '9'
	}
	if ok {
		n.SetString(s, 10)
		ok = n.BitLen() <= 256
	}
	if !ok {
		v.fail(badPayload("%s %s: write an unsigned integer below 2^256 as a decimal string", field, quote(s)))
		return new(big.Int)
	}
	return n
}

// bytes32 reads 0x and 64 hex digits.
func (v *verifier) bytes32(field, s string) []byte {
	b, err := hexBytes(s)
	if err != nil || len(b) != 32 {
		v.fail(badPayload("%s %s: write 32 bytes as 0x and 64 hex digits", field, quote(s)))
		return make([]byte, 32)
	}
	return b
}

// signature reads a 65-byte r ‖ s ‖ v signature (v 27/28 or 0/1) with a low s (EIP-2; USDC and
// the reference clients use only those), returned with v as 0/1 for recovery.
func (v *verifier) signature(s string) []byte {
	b, err := hexBytes(s)
	switch {
	case err != nil || len(b) == 0:
		v.fail(badPayload("signature: write the EIP-712 signature as 0x and hex digits"))
		return nil
	case len(b) != 65:
		if v.err == nil {
			v.err = refuse(ErrInvalid, "payment_signature_unsupported", "the signature is %d bytes: this gateway accepts 65-byte EOA signatures only (a smart-wallet signature needs the chain to check); pay from an EOA wallet", len(b))
		}
		return nil
	}
	if b[64] >= 27 {
		b[64] -= 27
	}
	r, sv := new(big.Int).SetBytes(b[:32]), new(big.Int).SetBytes(b[32:64])
	if !crypto.ValidateSignatureValues(b[64], r, sv, true) {
		if v.err == nil {
			v.err = refuse(ErrInvalid, "payment_signature_invalid", "the signature's r, s or v is out of range (s must be in the lower half, v 27 or 28): sign again with a standard Ethereum wallet")
		}
		return nil
	}
	return b
}

func hexBytes(s string) ([]byte, error) {
	if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
		return nil, fmt.Errorf("no 0x prefix")
	}
	return hex.DecodeString(s[2:])
}

// extraStrings reads the text members of an option's extra.
func extraStrings(raw jsontext.Value) map[string]string {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	out := map[string]string{}
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}

// isHexAddress reports whether s is 0x and 40 hex digits (any case).
func isHexAddress(s string) bool {
	if len(s) != 42 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return false
	}
	_, err := hex.DecodeString(s[2:])
	return err == nil
}

// checkAddress accepts 0x and 40 hex digits, all lower case, all upper case or with a valid
// EIP-55 checksum (clients refuse a mixed-case address whose checksum is wrong), and not zero.
func checkAddress(s string) error {
	switch {
	case !isHexAddress(s) || s[1] != 'x':
		return fmt.Errorf("is not an address (0x and 40 hex digits)")
	case s[2:] != strings.ToLower(s[2:]) && s[2:] != strings.ToUpper(s[2:]) && s != checksum(s):
		return fmt.Errorf("has a wrong EIP-55 checksum (mixed case); write it all lower case or as %s", checksum(s))
	case common.HexToAddress(s) == (common.Address{}):
		return fmt.Errorf("is the zero address")
	}
	return nil
}

// checksum is s in EIP-55 spelling.
func checksum(s string) string { return common.HexToAddress(s).Hex() }
