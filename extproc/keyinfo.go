package extproc

// GET /v1/key: the calling key's own view, so a client can check its key (docs/money.md#key-view: a key
// refused here is 401 key_market_key_invalid). Answered by ext_proc from the runtime and the
// in-memory ledger, like the catalog: no store read, no provider.

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"
)

// keyView is a key as its holder sees it: never the secret, its hash or its prefix. Amounts are
// exact decimal strings in USD; times are Unix seconds, as the task objects have them.
type keyView struct {
	Object  string  `json:"object"` // "key"
	ID      string  `json:"id"`
	Label   *string `json:"label"` // the key's name; null when it has none
	Account string  `json:"account"`
	// MonthlyLimit is null when the key has no limit; Remaining then is null too.
	MonthlyLimit *string `json:"monthly_limit"`
	// Month is the UTC calendar month the spend is of ("2026-11").
	Month string `json:"month"`
	// SpentThisMonth is what the key's settled requests were billed this month (its usage
	// records' costs); Held is what its requests in flight hold against its limit. Remaining =
	// monthly_limit - spent_this_month - held, at least 0: what admission lets through now.
	// All three are null with billing off (nothing is metered).
	SpentThisMonth *string `json:"spent_this_month"`
	Held           *string `json:"held"`
	Remaining      *string `json:"remaining"`
	// Models is the key's allow-list (model ids and routes); null: every model.
	Models []string `json:"models"`
	// RateLimits are the key's requests and tokens per minute (its own, else the gateway's
	// default); a rate it is not limited in is null, and the whole is null when neither is.
	RateLimits *rateView `json:"rate_limits"`
	CreatedAt  int64     `json:"created_at"`
	// LastUsedAt is when the key last authenticated a request other than GET /v1/key (keyUse);
	// null: never.
	LastUsedAt *int64 `json:"last_used_at"`
}

// rateView is a key's rates per minute; null: not limited.
type rateView struct {
	RequestsPerMinute *int64 `json:"requests_per_minute"`
	TokensPerMinute   *int64 `json:"tokens_per_minute"`
}

// viewRates is k's rates, nil when it has none.
func viewRates(k *core.KeyInfo) *rateView {
	if !k.Rates.Any() {
		return nil
	}
	one := func(n int64) *int64 {
		if n <= 0 {
			return nil
		}
		return &n
	}
	return &rateView{RequestsPerMinute: one(k.Rates.Requests), TokensPerMinute: one(k.Rates.Tokens)}
}

// errKeyMarket is how GET /v1/key refuses a key: e's message, under the spec's code for it.
func errKeyMarket(e *core.APIError) *core.APIError {
	return &core.APIError{Status: http.StatusUnauthorized, Code: "key_market_key_invalid", Message: e.Message}
}

// keyProcessor answers GET /v1/key at its headers.
type keyProcessor struct {
	core.AnsweredEarly
	x *exchange
}

func (k keyProcessor) RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	return k.x.answerKey(k.x.Head.Method, k.x.Head.Auth), nil
}

// answerKey answers GET /v1/key. Checking a key is not a use of it: last_used_at stays.
func (x *exchange) answerKey(method, auth string) *extprocv3.ProcessingResponse {
	if method != http.MethodGet {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; use GET", core.Clip(method), core.KeyPath))
	}
	k, e := x.LookupKey(auth)
	if e != nil {
		return x.Fail(errKeyMarket(e))
	}
	x.Key = k
	body, _ := json.Marshal(x.s.viewKey(k))
	return x.Reply(http.StatusOK, body)
}

// viewKey is k's view now.
func (s *Server) viewKey(k *core.KeyInfo) keyView {
	now := time.Now()
	if s.sh.Books != nil {
		now = s.sh.Books.Now()
	}
	v := keyView{Object: "key", ID: k.ID, Account: k.Account, Month: now.UTC().Format("2006-01"),
		Models: k.ModelList, RateLimits: viewRates(k), CreatedAt: k.Created.Unix()}
	if k.Name != "" {
		v.Label = &k.Name
	}
	if k.MonthlyLimit != nil {
		v.MonthlyLimit = amount(*k.MonthlyLimit)
	}
	if s.sh.Books != nil {
		spent, held := s.sh.Books.Ledger.KeyMonth(k.ID, now)
		v.SpentThisMonth, v.Held = amount(spent), amount(held)
		if k.MonthlyLimit != nil {
			v.Remaining = amount(decimal.Max(k.MonthlyLimit.Sub(spent).Sub(held), decimal.Zero))
		}
	}
	last := k.SavedUse
	if t, ok := s.sh.KeyUse.LastUse(k.ID); ok && (last == nil || t.After(*last)) {
		last = &t
	}
	if last != nil {
		sec := last.Unix()
		v.LastUsedAt = &sec
	}
	return v
}

func amount(d decimal.Decimal) *string {
	s := d.String()
	return &s
}
