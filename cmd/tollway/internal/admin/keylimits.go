package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

const keyLimitsExample = `{"monthly_limit": "5", "models": ["gpt-4o-mini", "route:support-bot"], "rate_limits": {"requests_per_minute": 60, "tokens_per_minute": 100000}}`

// decodeKeyLimits decodes the body of PUT /admin/v1/keys/{id}/limits: both settings.
func decodeKeyLimits(raw []byte) (adminapi.KeyLimits, error) {
	var req adminapi.KeyLimits
	if err := decodeJSON(raw, &req, keyLimitsExample); err != nil {
		return req, err
	}
	var errs []error
	if req.MonthlyLimit != nil && req.MonthlyLimit.IsNegative() {
		errs = append(errs, faultf("monthly_limit", `%s is negative; send 0 or more USD as a string like "5", or null for no limit`, req.MonthlyLimit))
	}
	for i, m := range req.Models {
		if err := ir.CheckModelRef(m); err != nil {
			errs = append(errs, faultf(fmt.Sprintf("models[%d]", i), "%s: %v", ir.QuoteShort(m), err))
		}
	}
	errs = append(errs, rateFaults(req.RateLimits)...)
	return req, errors.Join(errs...)
}

// rateFaults are a request's rate_limits out of range, each naming its field and the fix.
func rateFaults(r *store.RateLimits) []error {
	var errs []error
	for _, b := range r.OutOfRange() {
		errs = append(errs, faultf("rate_limits."+b.Field, "%d is out of range; send a whole number from 1 to %d, or null for no limit", b.Value, store.MaxRate))
	}
	return errs
}

// decodeKeyLimitsPatch decodes the body of PATCH /admin/v1/keys/{id}/limits: the settings it
// names change (null: no limit, or every model), the others are kept.
func decodeKeyLimitsPatch(raw []byte) (store.KeyLimitsChange, error) {
	req, err := decodeKeyLimits(raw)
	if err != nil {
		return store.KeyLimitsChange{}, err
	}
	var named map[string]json.RawMessage
	_ = json.Unmarshal(raw, &named) // decodeKeyLimits took it: one JSON object
	_, limit := named["monthly_limit"]
	_, models := named["models"]
	rawRates, rates := named["rate_limits"]
	if !limit && !models && !rates {
		return store.KeyLimitsChange{}, faultf("body", `names none of monthly_limit, models and rate_limits; send the settings to change, e.s. {"monthly_limit": "5"}, {"models": []} or {"rate_limits": {"requests_per_minute": 60}}`)
	}
	c := store.KeyLimitsChange{SetMonthlyLimit: limit, MonthlyLimit: req.MonthlyLimit, SetModels: models, Models: req.Models}
	if rates {
		c.RatesChange = patchRates(rawRates, req.RateLimits)
	}
	return c, nil
}

// patchRates is the change a PATCH's rate_limits (raw, decoded as r) makes, as JSON merge
// patch would: a rate named is set (null: unset), "rate_limits": null unsets both, a member
// left out is kept. Keys' and routes' PATCHes share it.
func patchRates(raw json.RawMessage, r *store.RateLimits) store.RatesChange {
	if r == nil {
		r = &store.RateLimits{}
	}
	rpm, tpm := namedRates(raw)
	return store.RatesChange{SetRequestsPerMinute: rpm, RequestsPerMinute: r.RequestsPerMinute,
		SetTokensPerMinute: tpm, TokensPerMinute: r.TokensPerMinute}
}

// namedRates reports which rates a PATCH's rate_limits (raw, null or an object its decoder
// took) names: "rate_limits": null names both.
func namedRates(raw json.RawMessage) (rpm, tpm bool) {
	var members map[string]json.RawMessage
	_ = json.Unmarshal(raw, &members)
	if members == nil {
		return true, true
	}
	_, rpm = members["requests_per_minute"]
	_, tpm = members["tokens_per_minute"]
	return rpm, tpm
}

// keyLimitRoutes: PUT /admin/v1/keys/{id}/limits sets a key's monthly limit, model allow-list
// and rate limits; PATCH changes only the ones it names. The next request with the key is admitted
// under them.
func (s *api) keyLimitRoutes(mux *http.ServeMux) {
	put := func(raw []byte) (store.KeyLimitsChange, error) {
		req, err := decodeKeyLimits(raw)
		c := store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: req.MonthlyLimit, SetModels: true, Models: req.Models,
			RatesChange: store.RatesChange{SetRequestsPerMinute: true, SetTokensPerMinute: true}}
		if req.RateLimits != nil {
			c.RequestsPerMinute, c.TokensPerMinute = req.RateLimits.RequestsPerMinute, req.RateLimits.TokensPerMinute
		}
		return c, err
	}
	for method, decode := range map[string]func([]byte) (store.KeyLimitsChange, error){"PUT": put, "PATCH": decodeKeyLimitsPatch} {
		mux.HandleFunc(method+" /admin/v1/keys/{id}/limits", func(w http.ResponseWriter, r *http.Request) {
			id, err := pathParam(r, "id", maxPathID)
			var change store.KeyLimitsChange
			if err == nil {
				change, err = decoded(r, decode)
			}
			var k store.Key
			if err == nil {
				k, err = s.store.ChangeKeyLimits(id, change)
			}
			if err == nil {
				err = s.apply.KeysChanged()
			}
			if err != nil {
				writeErr(w, err)
				return
			}
			spent, err := s.keySpend(time.Now())
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, viewKeySpent(k, spent))
		})
	}
}
