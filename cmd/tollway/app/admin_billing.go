package app

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
)

// accountView is an account with what it can still spend right now (balance less open holds).
type accountView struct {
	store.Account
	Available *decimal.Decimal `json:"available,omitempty"`
}

func (g *gateway) viewAccount(a store.Account) accountView {
	v := accountView{Account: a}
	if g.ledger != nil {
		avail, _ := g.ledger.Snapshot(a.ID, "", time.Now())
		v.Available = &avail
	}
	return v
}

// accountRoutes serves accounts and usage. Changes go to the store first, then to the in-memory
// ledger the request path reads, so a credit is usable as soon as the call returns.
func (g *gateway) accountRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/accounts", func(w http.ResponseWriter, r *http.Request) {
		as, err := g.store.Accounts()
		if err != nil {
			writeErr(w, err)
			return
		}
		out := make([]accountView, 0, len(as))
		for _, a := range as {
			out = append(out, g.viewAccount(a))
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": out})
	})
	mux.HandleFunc("POST /admin/v1/accounts", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID      string          `json:"id"`
			Credits decimal.Decimal `json:"credits"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ID == "" {
			writeErr(w, badRequest(`send {"id": "<account>", "credits": "25"} (credits in USD, a decimal string)`))
			return
		}
		a, err := g.store.CreateAccount(req.ID, req.Credits)
		if err != nil {
			writeErr(w, err)
			return
		}
		if g.ledger != nil {
			g.ledger.SetAccount(a.ID, a.Balance)
		}
		writeJSON(w, http.StatusCreated, g.viewAccount(a))
	})
	mux.HandleFunc("POST /admin/v1/accounts/{id}/credit", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount decimal.Decimal `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, badRequest(`send {"amount": "10"} (USD, a decimal string)`))
			return
		}
		a, err := g.store.CreditAccount(r.PathValue("id"), req.Amount)
		if err != nil {
			writeErr(w, err)
			return
		}
		if g.ledger != nil {
			g.ledger.Credit(a.ID, req.Amount)
		}
		writeJSON(w, http.StatusOK, g.viewAccount(a))
	})
	mux.HandleFunc("GET /admin/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := store.UsageFilter{KeyID: q.Get("key"), Account: q.Get("account"), Model: q.Get("model")}
		for name, dst := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
			if v := q.Get(name); v != "" {
				t, err := time.Parse(time.DateOnly, v)
				if err != nil {
					writeErr(w, badRequest(name+" must be a date like 2026-11-01"))
					return
				}
				*dst = t
			}
		}
		sum, err := g.store.Usage(f)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sum)
	})
	mux.HandleFunc("GET /admin/v1/usage/records", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		recs, err := g.store.UsageRecords(store.UsageFilter{KeyID: q.Get("key"), Account: q.Get("account"), Model: q.Get("model")}, 1000)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": recs})
	})
}
