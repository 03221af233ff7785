package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// maxKeyName bounds a key's name: a label in lists.
const maxKeyName = 128

// viewKey is k as the admin API shows it, with its secret when it was just made.
func viewKey(k store.Key, secret string) adminapi.Key {
	return adminapi.Key{ID: k.ID, Prefix: k.Prefix + "...", Account: k.Account, Name: k.Name, MonthlyLimit: k.MonthlyLimit,
		Models: k.Models, RateLimits: k.RateLimits, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt, Secret: secret}
}

// viewKeySpent is viewKey with the key's spend this month, from spent (keySpend).
func viewKeySpent(k store.Key, spent func(store.Key) decimal.Decimal) adminapi.Key {
	v := viewKey(k, "")
	s := spent(k)
	v.SpentThisMonth = &s
	return v
}

// keySpend says what each key spent in now's month (UTC): the ledger's settled spend, which the
// monthly limits count, or with billing off the usage records'.
func (s *api) keySpend(now time.Time) (func(store.Key) decimal.Decimal, error) {
	if s.ledger != nil {
		return func(k store.Key) decimal.Decimal {
			_, spent := s.ledger.Snapshot(k.Account, k.ID, now)
			return spent
		}, nil
	}
	spend, err := s.store.MonthSpend(now.UTC().Format("2006-01"))
	if err != nil {
		return nil, err
	}
	return func(k store.Key) decimal.Decimal { return spend[k.ID] }, nil
}

const keyExample = `{"account": "acme", "name": "ci", "monthly_limit": "5", "models": ["gpt-4o-mini"], "rate_limits": {"requests_per_minute": 60, "tokens_per_minute": 100000}}`

// decodeKeyRequest decodes and checks a key request; the store checks that the account exists.
func decodeKeyRequest(raw []byte) (adminapi.KeyRequest, error) {
	var k adminapi.KeyRequest
	if err := decodeJSON(raw, &k, keyExample); err != nil {
		return k, err
	}
	var errs []error
	if k.Account == "" {
		errs = append(errs, faultf("account", `is required: the account the key bills, e.s. "acme" (tollway accounts create acme)`))
	}
	if err := ir.CheckText("", k.Name, maxKeyName); err != nil {
		errs = append(errs, faultf("name", "%v", err))
	}
	if k.MonthlyLimit != nil && k.MonthlyLimit.IsNegative() {
		errs = append(errs, faultf("monthly_limit", `%s is negative; send 0 or more USD as a string like "5"`, k.MonthlyLimit))
	}
	for i, m := range k.Models {
		if err := ir.CheckModelRef(m); err != nil {
			errs = append(errs, faultf(fmt.Sprintf("models[%d]", i), "%s: %v", ir.QuoteShort(m), err))
		}
	}
	errs = append(errs, rateFaults(k.RateLimits)...)
	return k, errors.Join(errs...)
}

// keyRoutes serves API keys. A change reaches ext_proc's runtime before the call returns.
func (s *api) keyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/keys", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		ks, err := s.store.Keys()
		var spent func(store.Key) decimal.Decimal
		if err == nil {
			spent, err = s.keySpend(now)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		out := adminapi.KeyList{Month: now.UTC().Format("2006-01"), Data: make([]adminapi.Key, 0, len(ks))}
		for _, k := range ks {
			out.Data = append(out.Data, viewKeySpent(k, spent))
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /admin/v1/keys", func(w http.ResponseWriter, r *http.Request) {
		req, err := decoded(r, decodeKeyRequest)
		if err != nil {
			writeErr(w, err)
			return
		}
		k, secret, err := s.store.CreateKey(req.Account, store.KeyOptions{Name: req.Name, MonthlyLimit: req.MonthlyLimit, Models: req.Models, RateLimits: req.RateLimits})
		if err == nil {
			err = s.apply.KeysChanged()
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, viewKey(k, secret))
	})
	for _, action := range []string{"revoke", "rotate"} {
		mux.HandleFunc("POST /admin/v1/keys/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			id, err := pathParam(r, "id", maxPathID)
			if err != nil {
				writeErr(w, err)
				return
			}
			var (
				k      store.Key
				secret string
			)
			if action == "revoke" {
				k, err = s.store.RevokeKey(id)
			} else {
				k, secret, err = s.store.RotateKey(id)
			}
			if err == nil {
				err = s.apply.KeysChanged()
			}
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, viewKey(k, secret))
		})
	}
}
