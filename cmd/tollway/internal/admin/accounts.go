package admin

import (
	"errors"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/store"
)

// viewAccount is a with what it can still spend right now and its callback secret.
func (s *api) viewAccount(a store.Account) adminapi.Account {
	v := adminapi.Account{Account: a}
	v.CallbackSecret, _ = s.store.CallbackSecret(a.ID)
	if s.ledger != nil {
		avail, _ := s.ledger.Snapshot(a.ID, "", time.Now())
		v.Available = &avail
	}
	return v
}

// decodeAccountRequest decodes and checks an account request; the store checks the id's form.
func decodeAccountRequest(raw []byte) (adminapi.AccountRequest, error) {
	var a adminapi.AccountRequest
	if err := decodeJSON(raw, &a, `{"id": "acme", "credits": "25"}`); err != nil {
		return a, err
	}
	var errs []error
	if a.ID == "" {
		errs = append(errs, faultf("id", `is required: the account's id, e.s. "acme"`))
	}
	if a.Credits.IsNegative() {
		errs = append(errs, faultf("credits", `%s is negative; send 0 or more USD as a string like "25"`, a.Credits))
	}
	return a, errors.Join(errs...)
}

// decodeCredit decodes the body of POST /admin/v1/accounts/{id}/credit: a positive amount.
func decodeCredit(raw []byte) (decimal.Decimal, error) {
	var req adminapi.Credit
	if err := decodeJSON(raw, &req, `{"amount": "10"}`); err != nil {
		return decimal.Decimal{}, err
	}
	if req.Amount == nil || !req.Amount.IsPositive() {
		return decimal.Decimal{}, faultf("amount", `is required and must be more than 0 USD; send a string like "10"`)
	}
	return *req.Amount, nil
}

// accountRoutes serves accounts and usage. Changes go to the store first, then to the in-memory
// ledger the request path reads, so a credit is usable as soon as the call returns.
func (s *api) accountRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/accounts", func(w http.ResponseWriter, r *http.Request) {
		as, err := s.store.Accounts()
		if err != nil {
			writeErr(w, err)
			return
		}
		out := adminapi.List[adminapi.Account]{Data: make([]adminapi.Account, 0, len(as))}
		for _, a := range as {
			out.Data = append(out.Data, s.viewAccount(a))
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /admin/v1/accounts", func(w http.ResponseWriter, r *http.Request) {
		req, err := decoded(r, decodeAccountRequest)
		if err != nil {
			writeErr(w, err)
			return
		}
		a, err := s.store.CreateAccount(req.ID, req.Credits)
		if err != nil {
			writeErr(w, err)
			return
		}
		if s.ledger != nil {
			s.ledger.SetAccount(a.ID, a.Balance)
		}
		writeJSON(w, http.StatusCreated, s.viewAccount(a))
	})
	mux.HandleFunc("POST /admin/v1/accounts/{id}/credit", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		var amount decimal.Decimal
		if err == nil {
			amount, err = decoded(r, decodeCredit)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		a, err := s.store.CreditAccount(id, amount)
		if err != nil {
			writeErr(w, err)
			return
		}
		if s.ledger != nil {
			s.ledger.Credit(a.ID, amount)
		}
		writeJSON(w, http.StatusOK, s.viewAccount(a))
	})
	mux.HandleFunc("GET /admin/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r, "key", "account", "model", "since", "until"); err != nil {
			writeErr(w, err)
			return
		}
		f, err := usageFilter(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		sum, err := s.store.Usage(f)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sum)
	})
	mux.HandleFunc("GET /admin/v1/usage/records", func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r, "key", "account", "model"); err != nil {
			writeErr(w, err)
			return
		}
		q := r.URL.Query()
		recs, err := s.store.UsageRecords(store.UsageFilter{KeyID: q.Get("key"), Account: q.Get("account"), Model: q.Get("model")}, 1000)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": recs})
	})
}
