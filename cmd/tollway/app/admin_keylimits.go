package app

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/xds/ir"
)

// keyLimitsRequest is the body of PUT /admin/v1/keys/{id}/limits: both settings, replaced
// together. No monthly_limit (or null) means no limit; no models (or []) means every model.
type keyLimitsRequest struct {
	MonthlyLimit *decimal.Decimal `json:"monthly_limit"`
	Models       []string         `json:"models"`
}

const keyLimitsExample = `{"monthly_limit": "5", "models": ["gpt-4o-mini", "route:support-bot"]}`

func decodeKeyLimits(raw []byte) (keyLimitsRequest, error) {
	var req keyLimitsRequest
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

// keyLimitRoutes: PUT /admin/v1/keys/{id}/limits sets a key's monthly limit and model
// allow-list; the next request with the key is admitted under them.
func (g *gateway) keyLimitRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /admin/v1/keys/{id}/limits", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		var req keyLimitsRequest
		if err == nil {
			req, err = decoded(r, decodeKeyLimits)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		k, err := g.store.SetKeyLimits(id, req.MonthlyLimit, req.Models)
		if err == nil {
			err = g.keysChanged()
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, viewKey(k, ""))
	})
}
