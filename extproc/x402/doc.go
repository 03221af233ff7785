// Package x402 is the pure core of Tollway's pay-per-request endpoints (x402 v2, HTTP 402;
// docs/x402.md): the wire types and header codecs (wire.go), the configured offer and the
// matcher of a client's `accepted` (offer.go, match.go), local EIP-712 verification of exact
// (EIP-3009) and upto (Permit2) credentials (evm.go) and the facilitator's HTTP client
// (facilitator.go). It knows nothing of ext_proc or Envoy and does no I/O but the facilitator
// calls; the gateway records used credentials in its store (store.ClaimCredential).
//
// Nothing a client signs binds a credential to one endpoint or request, so the gateway (1) matches
// `accepted` strictly against this endpoint's current offer, (2) verifies the signature locally
// so forgeries never reach the facilitator, (3) records the credential as used, atomically and
// durably, before the business call, and (4) settles only after the business call succeeded.
//
// Per request, after the body was validated (an invalid body gets its 400 before any payment is
// asked for), with offer = offers[slug] from Config.NewOffers and fac = NewFacilitator(url):
//
//	var quote decimal.Decimal
//	if offer.NeedsQuote() {
//		quote = worstCaseUSD(req) // the billing hold's bound
//	}
//	offered, err := offer.Requirements(quote)              // err: 500
//	h := headers.Get(x402.HeaderPaymentSignature)
//	if h == "" {                                           // 402 + PAYMENT-REQUIRED, Cache-Control: no-store
//		return pay402(x402.EncodePaymentRequired(offer.PaymentRequired(offered, "PAYMENT-SIGNATURE header is required")))
//	}
//	pp, err := x402.DecodePaymentSignature(h)             // err: x402.Status(err) = 400, x402.Code(err)
//	i, why := x402.Match(pp.Accepted, offered)
//	if i < 0 {                                             // 402 with a fresh PAYMENT-REQUIRED saying why
//		return pay402(x402.EncodePaymentRequired(offer.PaymentRequired(offered, why)))
//	}
//	cred, err := x402.Verify(pp, offered[i], time.Now())  // err: 400 or 402 (+ PAYMENT-REQUIRED, error = err.Error())
//	err = st.ClaimCredential(cred.Key(), cred.KeepUntil()) // store.ErrExists: 402 "credential already used"
//	_, err = fac.Verify(ctx, pp, offered[i])               // ErrUnavailable: 503; ErrRejected: 402
//	... the business call (require_key enforced first), billed like a keyed request ...
//	if status >= 400 { return answer }                     // unsettled; the credential stays burned
//	settle := offered[i]                                   // exact: the signed amount
//	if settle.Scheme == x402.SchemeUpto {
//		settle, _, _ = offer.Charge(i, actualCostUSD)   // rounded up, at most the cap
//		if settle.Amount == "0" { return answer }       // no transaction; burned locally
//	}
//	sr, err := fac.Settle(ctx, pp, settle)                // ErrSettleFailed: 402 + PAYMENT-RESPONSE(sr)
//	// ErrSettleUnknown (or ErrUnavailable: never sent): the answer goes out with PAYMENT-RESPONSE
//	// {success: false, errorReason: ReasonSettlementPending}; Settle again later until it
//	// succeeds or refuses with SpentNonce (settled), or the credential expires (unpaid)
//	h, _ = x402.EncodeSettlementResponse(sr)               // PAYMENT-RESPONSE on the answer
//
// Status maps every error of this package to its HTTP status and Code to a stable error code;
// messages say what is wrong and how to fix it, and never contain a signature or a header.
//
// Decisions where x402 is silent: header JSON is read with duplicate member names and invalid
// UTF-8 refused and names matched case-sensitively (no two readings of one credential); the
// scheme payload's numbers must be canonical decimal strings; a credential valid for longer than
// maxTimeoutSeconds + ClockAllowance is refused (used credentials are remembered only that
// long, plus ReplaySkew); signatures must be 65-byte low-s EOA signatures; exact is EIP-3009 only
// (no Permit2 assetTransferMethod); prices are USD of a USD stablecoin, converted exactly at
// config load, a per-request quote or an upto charge rounded up to the next atomic unit.
package x402
