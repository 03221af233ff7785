package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Providers and models through the admin API. A record is checked as a request here (fields,
// types, ids); the IR then checks it against the whole catalog, and a change that fails there or
// in Envoy is undone (Applier.Change).

const (
	providerExample = `{"type": "openai", "base_url": "https://api.openai.com/v1", "api_key_ref": "${OPENAI_API_KEY}"}`
	modelExample    = `{"name": "GPT-4o mini", "providers": [{"provider": "openai", "model": "gpt-4o-mini"}], "pricing": {"prompt": "0.00000015", "completion": "0.0000006"}}`
)

// decodeProvider decodes the body of PUT /admin/v1/providers/{name}.
func decodeProvider(name string, raw []byte) (store.Provider, error) {
	if err := ir.CheckProviderName(name); err != nil {
		return store.Provider{}, faultf("name", "%s in the path: %v", ir.QuoteShort(name), err)
	}
	var p store.Provider
	if err := decodeJSON(raw, &p, providerExample); err != nil {
		return p, err
	}
	errs := recordIdentity("name", name, p.Name, p.Source)
	for field, ref := range map[string]string{"api_key_ref": p.APIKeyRef, "access_key_ref": p.AccessKeyRef, "secret_key_ref": p.SecretKeyRef} {
		if ref != "" && !config.IsEnvRef(ref) {
			errs = append(errs, faultf(field, "must name an environment variable of the gateway, like ${OPENAI_API_KEY}; secrets are never stored"))
		}
	}
	p.Name, p.Source = name, store.SourceAdmin
	return p, errors.Join(errs...)
}

// decodeModel decodes the body of PUT /admin/v1/models/{id} (ids may hold '/'); its pricing is
// checked and kept as sent.
func decodeModel(id string, raw []byte) (store.Model, error) {
	if err := ir.CheckModelID(id); err != nil {
		return store.Model{}, faultf("id", "%s in the path: %v", ir.QuoteShort(id), err)
	}
	var m adminapi.Model
	err := decodeJSON(raw, &m, modelExample)
	pricing, _ := m.Pricing.(json.RawMessage) // decodeValue's form of any; nil when absent
	if err != nil {
		return m.StoreModel(pricing), err
	}
	errs := recordIdentity("id", id, m.ID, m.Source)
	if len(pricing) > 0 {
		var p ir.Pricing
		if err := p.UnmarshalJSON(pricing); err != nil {
			errs = append(errs, faultf("pricing", "%v", err))
		}
	}
	m.ID, m.Source = id, store.SourceAdmin
	return m.StoreModel(pricing), errors.Join(errs...)
}

// recordIdentity checks what a PUT body says about its record's identity, so that what GET
// returns may be sent back: the key (name or id) must be the path's, source is the gateway's.
func recordIdentity(field, inPath, inBody string, source store.Source) []error {
	var errs []error
	if inBody != "" && inBody != inPath {
		errs = append(errs, faultf(field, "%s differs from %s in the path; the path names the record, leave %s out", ir.QuoteShort(inBody), ir.QuoteShort(inPath), field))
	}
	if source != "" && source != store.SourceAdmin {
		errs = append(errs, faultf("source", "%s: records written through the admin API are admin records; leave source out", ir.QuoteShort(string(source))))
	}
	return errs
}

func (s *api) catalogRoutes(mux *http.ServeMux) {
	catalogRecords(s, mux, "providers", "name", decodeProvider, s.store.PutProvider, s.store.DeleteProvider,
		func(c store.Catalog) any { return c.Providers })
	// Model ids may hold '/' (meta-llama/Llama-3.3-70B-Instruct): the id is the rest of the path.
	catalogRecords(s, mux, "models", "id...", decodeModel, s.store.PutModel, s.store.DeleteModel,
		func(c store.Catalog) any { return c.Models })
}

// catalogRecords serves one kind of catalog record: GET /admin/v1/<kind> lists them,
// PUT and DELETE /admin/v1/<kind>/{<param>} write one through Applier.Change.
func catalogRecords[T any](s *api, mux *http.ServeMux, kind, param string,
	decode func(string, []byte) (T, error), put func(T) error, del func(string) error, list func(store.Catalog) any) {
	name := strings.TrimSuffix(param, "...")
	mux.HandleFunc("GET /admin/v1/"+kind, func(w http.ResponseWriter, r *http.Request) {
		cat, err := s.store.Catalog()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": list(cat)})
	})
	mux.HandleFunc("PUT /admin/v1/"+kind+"/{"+param+"}", func(w http.ResponseWriter, r *http.Request) {
		key, err := pathParam(r, name, maxPathID)
		var rec T
		if err == nil {
			rec, err = decoded(r, func(raw []byte) (T, error) { return decode(key, raw) })
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		s.change(w, r, func() error { return put(rec) })
	})
	mux.HandleFunc("DELETE /admin/v1/"+kind+"/{"+param+"}", func(w http.ResponseWriter, r *http.Request) {
		key, err := pathParam(r, name, maxPathID)
		if err != nil {
			writeErr(w, err)
			return
		}
		s.change(w, r, func() error { return del(key) })
	})
}
