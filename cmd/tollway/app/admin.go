package app

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// The admin API listens on loopback only. It is how the CLI and operators change a running
// gateway, since the bbolt file belongs to the gateway process.

// keyView is a key as the admin API shows it: never the secret or its hash.
type keyView struct {
	ID           string           `json:"id"`
	Prefix       string           `json:"prefix"`
	Account      string           `json:"account"`
	Name         string           `json:"name,omitempty"`
	MonthlyLimit *decimal.Decimal `json:"monthly_limit,omitempty"`
	Models       []string         `json:"models,omitempty"`
	CreatedAt    time.Time        `json:"created_at"`
	RevokedAt    *time.Time       `json:"revoked_at,omitempty"`
	Secret       string           `json:"key,omitempty"` // only in the create/rotate answer, once
}

func viewKey(k store.Key, secret string) keyView {
	return keyView{k.ID, k.Prefix + "...", k.Account, k.Name, k.MonthlyLimit, k.Models, k.CreatedAt, k.RevokedAt, secret}
}

func (g *gateway) adminHandler(reload func() error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, g.xds.Status())
	})
	mux.HandleFunc("POST /admin/v1/reload", func(w http.ResponseWriter, r *http.Request) {
		if err := reload(); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, g.xds.Status())
	})
	mux.HandleFunc("GET /admin/v1/keys", func(w http.ResponseWriter, r *http.Request) {
		ks, err := g.store.Keys()
		if err != nil {
			writeErr(w, err)
			return
		}
		out := make([]keyView, 0, len(ks))
		for _, k := range ks {
			out = append(out, viewKey(k, ""))
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": out})
	})
	mux.HandleFunc("POST /admin/v1/keys", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Account      string           `json:"account"`
			Name         string           `json:"name"`
			MonthlyLimit *decimal.Decimal `json:"monthly_limit"`
			Models       []string         `json:"models"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Account == "" {
			writeErr(w, badRequest(`send {"account": "<account>", "name": "<optional>", "monthly_limit": "<USD, optional>", "models": ["<optional allow-list>"]}`))
			return
		}
		k, secret, err := g.store.CreateKey(req.Account, store.KeyOptions{Name: req.Name, MonthlyLimit: req.MonthlyLimit, Models: req.Models})
		if err == nil {
			err = g.keysChanged()
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, viewKey(k, secret))
	})
	mux.HandleFunc("POST /admin/v1/keys/{id}/revoke", func(w http.ResponseWriter, r *http.Request) {
		k, err := g.store.RevokeKey(r.PathValue("id"))
		if err == nil {
			err = g.keysChanged()
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, viewKey(k, ""))
	})
	mux.HandleFunc("POST /admin/v1/keys/{id}/rotate", func(w http.ResponseWriter, r *http.Request) {
		k, secret, err := g.store.RotateKey(r.PathValue("id"))
		if err == nil {
			err = g.keysChanged()
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, viewKey(k, secret))
	})
	g.accountRoutes(mux)
	g.routeRoutes(mux)
	mux.HandleFunc("GET /admin/v1/providers", func(w http.ResponseWriter, r *http.Request) {
		cat, err := g.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": cat.Providers})
	})
	mux.HandleFunc("PUT /admin/v1/providers/{name}", func(w http.ResponseWriter, r *http.Request) {
		var p store.Provider
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeErr(w, badRequest(`send {"type": "openai", "base_url": "https://...", "api_key_ref": "${ENV_VAR}"}`))
			return
		}
		if p.APIKeyRef != "" && !envRef.MatchString(p.APIKeyRef) {
			writeErr(w, badRequest("api_key_ref must name an environment variable of the gateway, like ${OPENAI_API_KEY}; secrets are never stored"))
			return
		}
		p.Name, p.Source = r.PathValue("name"), store.SourceAdmin
		g.change(w, r, func() error { return g.store.PutProvider(p) })
	})
	mux.HandleFunc("DELETE /admin/v1/providers/{name}", func(w http.ResponseWriter, r *http.Request) {
		g.change(w, r, func() error { return g.store.DeleteProvider(r.PathValue("name")) })
	})
	mux.HandleFunc("GET /admin/v1/models", func(w http.ResponseWriter, r *http.Request) {
		cat, err := g.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": cat.Models})
	})
	mux.HandleFunc("PUT /admin/v1/models/{id}", func(w http.ResponseWriter, r *http.Request) {
		var m store.Model
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			writeErr(w, badRequest(`send {"name": "...", "providers": [{"provider": "<name>", "model": "<upstream model>"}]}`))
			return
		}
		m.ID, m.Source = r.PathValue("id"), store.SourceAdmin
		g.change(w, r, func() error { return g.store.PutModel(m) })
	})
	mux.HandleFunc("DELETE /admin/v1/models/{id}", func(w http.ResponseWriter, r *http.Request) {
		g.change(w, r, func() error { return g.store.DeleteModel(r.PathValue("id")) })
	})
	return mux
}

// change writes to the store and applies; if the result is invalid or Envoy rejects it, the
// write is undone so the store keeps matching what runs.
func (g *gateway) change(w http.ResponseWriter, r *http.Request, write func() error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	before, err := g.store.Catalog()
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := write(); err != nil {
		writeErr(w, err)
		return
	}
	if err := g.applyLocked(r.Context()); err != nil {
		if rerr := g.store.RestoreCatalog(before); rerr != nil {
			g.log.Error("could not undo a rejected change", "error", rerr)
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, g.xds.Status())
}

type badRequestError struct{ msg string }

func (e badRequestError) Error() string { return e.msg }

func badRequest(msg string) error { return badRequestError{msg} }

// writeErr maps errors to HTTP status: the one place admin errors meet HTTP.
func writeErr(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, "internal_error"
	var br badRequestError
	switch {
	case errors.As(err, &br), errors.Is(err, ir.ErrInvalid):
		status, code = http.StatusBadRequest, "invalid_request"
	case errors.Is(err, store.ErrNotFound):
		status, code = http.StatusNotFound, "not_found"
	case errors.Is(err, store.ErrExists):
		status, code = http.StatusConflict, "already_exists"
	case errors.Is(err, store.ErrInvalid):
		status, code = http.StatusBadRequest, "invalid_request"
	case errors.Is(err, xds.ErrRejected):
		status, code = http.StatusConflict, "envoy_rejected"
	}
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": err.Error(), "code": code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client hung up; nothing to do

}
