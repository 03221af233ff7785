package app

import (
	"errors"
	"net/http"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Providers and models through the admin API. A record is checked as a request here (fields,
// types, ids); the IR then checks it against the whole catalog, and a change that fails there or
// in Envoy is undone (gateway.change).

const (
	providerExample = `{"type": "openai", "base_url": "https://api.openai.com/v1", "api_key_ref": "${OPENAI_API_KEY}"}`
	modelExample    = `{"name": "GPT-4o mini", "providers": [{"provider": "openai", "model": "gpt-4o-mini"}], "pricing": {"prompt": "0.00000015", "completion": "0.0000006"}}`
)

// decodeProvider decodes the body of PUT /admin/v1/providers/{name}. What GET returns may be
// sent back: name must then match the path, source is the gateway's to set.
func decodeProvider(name string, raw []byte) (store.Provider, error) {
	if err := ir.CheckProviderName(name); err != nil {
		return store.Provider{}, faultf("name", "%s in the path: %v", ir.QuoteShort(name), err)
	}
	var p store.Provider
	if err := decodeJSON(raw, &p, providerExample); err != nil {
		return p, err
	}
	var errs []error
	if p.Name != "" && p.Name != name {
		errs = append(errs, faultf("name", "%s differs from %s in the path; a provider's name is its path, leave it out", ir.QuoteShort(p.Name), ir.QuoteShort(name)))
	}
	errs = append(errs, checkSource(p.Source))
	if p.APIKeyRef != "" && !envRef.MatchString(p.APIKeyRef) {
		errs = append(errs, faultf("api_key_ref", "must name an environment variable of the gateway, like ${OPENAI_API_KEY}; secrets are never stored"))
	}
	p.Name, p.Source = name, store.SourceAdmin
	return p, errors.Join(errs...)
}

// decodeModel decodes the body of PUT /admin/v1/models/{id} (ids may hold '/').
func decodeModel(id string, raw []byte) (store.Model, error) {
	if err := ir.CheckModelID(id); err != nil {
		return store.Model{}, faultf("id", "%s in the path: %v", ir.QuoteShort(id), err)
	}
	var m store.Model
	if err := decodeJSON(raw, &m, modelExample); err != nil {
		return m, err
	}
	var errs []error
	if m.ID != "" && m.ID != id {
		errs = append(errs, faultf("id", "%s differs from %s in the path; a model's id is its path, leave it out", ir.QuoteShort(m.ID), ir.QuoteShort(id)))
	}
	errs = append(errs, checkSource(m.Source))
	if len(m.Pricing) > 0 {
		var p ir.Pricing
		if err := p.UnmarshalJSON(m.Pricing); err != nil {
			errs = append(errs, faultf("pricing", "%v", err))
		}
	}
	m.ID, m.Source = id, store.SourceAdmin
	return m, errors.Join(errs...)
}

func checkSource(s store.Source) error {
	if s != "" && s != store.SourceAdmin {
		return faultf("source", "%s: records written through the admin API are admin records; leave source out", ir.QuoteShort(string(s)))
	}
	return nil
}

func (g *gateway) catalogRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/v1/providers", func(w http.ResponseWriter, r *http.Request) {
		cat, err := g.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": cat.Providers})
	})
	mux.HandleFunc("PUT /admin/v1/providers/{name}", func(w http.ResponseWriter, r *http.Request) {
		name, err := pathParam(r, "name", maxPathID)
		var raw []byte
		if err == nil {
			raw, err = readBody(r)
		}
		var p store.Provider
		if err == nil {
			p, err = decodeProvider(name, raw)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		g.change(w, r, func() error { return g.store.PutProvider(p) })
	})
	mux.HandleFunc("DELETE /admin/v1/providers/{name}", func(w http.ResponseWriter, r *http.Request) {
		name, err := pathParam(r, "name", maxPathID)
		if err != nil {
			writeErr(w, err)
			return
		}
		g.change(w, r, func() error { return g.store.DeleteProvider(name) })
	})
	mux.HandleFunc("GET /admin/v1/models", func(w http.ResponseWriter, r *http.Request) {
		cat, err := g.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": cat.Models})
	})
	mux.HandleFunc("PUT /admin/v1/models/{id...}", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		var raw []byte
		if err == nil {
			raw, err = readBody(r)
		}
		var m store.Model
		if err == nil {
			m, err = decodeModel(id, raw)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		g.change(w, r, func() error { return g.store.PutModel(m) })
	})
	mux.HandleFunc("DELETE /admin/v1/models/{id...}", func(w http.ResponseWriter, r *http.Request) {
		id, err := pathParam(r, "id", maxPathID)
		if err != nil {
			writeErr(w, err)
			return
		}
		g.change(w, r, func() error { return g.store.DeleteModel(id) })
	})
}
