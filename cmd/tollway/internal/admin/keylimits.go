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

const keyLimitsExample = `{"monthly_limit": "5", "models": ["gpt-4o-mini", "route:support-bot"]}`

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
	return req, errors.Join(errs...)
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
	if !limit && !models {
		return store.KeyLimitsChange{}, faultf("body", `names neither monthly_limit nor models; send the settings to change, e.s. {"monthly_limit": "5"} or {"models": []}`)
	}
	return store.KeyLimitsChange{SetMonthlyLimit: limit, MonthlyLimit: req.MonthlyLimit, SetModels: models, Models: req.Models}, nil
}

// keyLimitRoutes: PUT /admin/v1/keys/{id}/limits sets a key's monthly limit and model
// allow-list; PATCH changes only the ones it names. The next request with the key is admitted
// under them.
func (s *api) keyLimitRoutes(mux *http.ServeMux) {
	put := func(raw []byte) (store.KeyLimitsChange, error) {
		req, err := decodeKeyLimits(raw)
		return store.KeyLimitsChange{SetMonthlyLimit: true, MonthlyLimit: req.MonthlyLimit, SetModels: true, Models: req.Models}, err
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
