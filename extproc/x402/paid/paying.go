package paid

// A credential's use: it is claimed in the store, durably, before the business call it pays
// for runs (a credential pays for one request), and held in memory while that request runs, so
// that a copy sent meanwhile is told apart from a replay: 409 payment_in_progress (docs/x402.md#statuses:
// a request-state conflict: the first request's answer is still coming) rather than 402
// payment_already_used (its answer was given). The store's claim alone makes a credential
// single-use; the memory only picks the refusal.

import (
	"errors"
	"net/http"
	"sync"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
)

// inFlight is the set of credentials whose paid request is running (by x402.Credential.Key).
type inFlight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// take marks key in use; false when it already is.
func (f *inFlight) take(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.keys[key]; busy {
		return false
	}
	if f.keys == nil {
		f.keys = map[string]struct{}{}
	}
	f.keys[key] = struct{}{}
	return true
}

// drop ends key's use.
func (f *inFlight) drop(key string) {
	f.mu.Lock()
	delete(f.keys, key)
	f.mu.Unlock()
}

var errPaymentInProgress = core.Errorf(http.StatusConflict, "payment_in_progress",
	"another request paid with this credential is still in progress; its answer is the one this credential pays for (a credential pays for one request). To run this request as well, send it without PAYMENT-SIGNATURE and sign the new PAYMENT-REQUIRED")

// useCredential claims cred for this request and holds it until the request ends (endPaying);
// nil means it is this request's. The claim is taken in memory first, so a copy finds it in use
// from before the store's claim until after the request's end.
func (x *exchange) useCredential(cred x402.Credential) *core.APIError {
	key := cred.Key()
	if !x.e.paying.take(key) {
		return errPaymentInProgress
	}
	err := x.e.payments.Load().Credentials.ClaimCredential(key, cred.KeepUntil())
	if err == nil {
		x.pay.inUse = key
		return nil
	}
	x.e.paying.drop(key)
	switch {
	case errors.Is(err, store.ErrExists):
		return x.paymentRequired("the credential was already used", "payment_already_used", "this credential was already used (a credential pays for one request); sign a new one from PAYMENT-REQUIRED")
	case errors.Is(err, store.ErrUnavailable) && x.SharedStoreRefusal() != nil:
		return x.SharedStoreRefusal() // the store failed as the claim was written: the credential is unused
	}
	return core.Errorf(http.StatusInternalServerError, "internal_error", "the payment could not be recorded; nothing was charged; retry")
}

// endPaying lets go of the request's credential (it stays used in the store): the request's
// answer has been given (its last byte or an immediate answer went to Envoy), or the exchange
// ended. A client that got its answer and sends the credential again gets a replay's 402.
func (x *exchange) endPaying() {
	if x.pay != nil && x.pay.inUse != "" {
		x.e.paying.drop(x.pay.inUse)
		x.pay.inUse = ""
	}
}
