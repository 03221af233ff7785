package chat

import (
	"strings"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Payment is what a paid endpoint's payment (extproc/x402/paid) does at a chat
// request's steps; nil for a request paid by its key's account.
type Payment interface {
	// Refuses is the 403 of a plan the endpoint's models list refuses though the caller's key
	// would allow it; nil when the endpoint does not refuse it.
	Refuses(r *ir.Route, models []*core.Model, target string) *core.APIError
	// Admit prices the request at worst and checks its credential; nil: the call may run.
	// bill is what the answer cost (at most worst) and its usage record, asked for when the
	// payment settles.
	Admit(worst decimal.Decimal, bill func() (decimal.Decimal, store.UsageRecord)) *core.APIError
	// Answer runs when the business answer begins (status < 400). An exact payment settles
	// now: header is its PAYMENT-RESPONSE, and e the answer instead when it failed. An upto
	// stream settles just before its [DONE]: beforeDone makes that event.
	Answer(streaming bool) (header string, beforeDone func() []byte, e *core.APIError)
	// Settle settles the answered request, if it was not, and records it; header is the
	// PAYMENT-RESPONSE. An error means the facilitator refused: the result is withheld and
	// Failed(err) is the answer.
	Settle() (header string, err error)
	Failed(err error) *core.APIError
}

// HeaderPaymentResponse is the x402 PAYMENT-RESPONSE header as Envoy carries it (lower case).
var HeaderPaymentResponse = strings.ToLower(x402.HeaderPaymentResponse)
