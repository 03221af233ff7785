package admin

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/xds/ir"
)

// catalogTransport reads the public listener's catalog: loopback, never through a proxy.
var catalogTransport = &http.Transport{Proxy: nil, MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second}

// maxCatalogBody bounds the catalog the admin API passes on.
const maxCatalogBody = 16 << 20

func (s *api) healthRoutes(mux *http.ServeMux) {
	// GET /admin/v1/health: providers with their credential and Envoy's health of them, and
	// whether each model can take traffic.
	mux.HandleFunc("GET /admin/v1/health", func(w http.ResponseWriter, r *http.Request) {
		providers, models, err := s.healthReport()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"providers": providers, "models": models})
	})

	// GET /admin/v1/catalog: the catalog exactly as clients see it, read from GET /v1/models on
	// the public listener (through Envoy and ext_proc, without a key).
	mux.HandleFunc("GET /admin/v1/catalog", func(w http.ResponseWriter, r *http.Request) {
		public := ""
		if cfg := s.runtime.Config(); cfg != nil {
			public = cfg.Listen.Public
		}
		addr, err := dialable(public)
		if err != nil {
			writeErr(w, err)
			return
		}
		ctx := r.Context()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/models", nil)
		if err != nil {
			writeErr(w, err)
			return
		}
		client := &http.Client{Transport: catalogTransport, Timeout: 5 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			writeErr(w, &adminRefusal{http.StatusBadGateway, "catalog_unavailable",
				fmt.Sprintf("could not read GET /v1/models from the public listener %s: %v", public, err)})
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxCatalogBody))
		if err != nil {
			writeErr(w, &adminRefusal{http.StatusBadGateway, "catalog_unavailable", "GET /v1/models broke off: " + err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	})
}

// healthReport is every provider with its credential and Envoy's health of it, and whether each
// model can take traffic.
func (s *api) healthReport() ([]adminapi.ProviderHealth, []adminapi.ModelHealth, error) {
	cat, err := s.store.Catalog()
	if err != nil {
		return nil, nil, err
	}
	ready, health := s.runtime.Credentials(), s.runtime.Health()
	serves := map[string][]string{}
	models := make([]adminapi.ModelHealth, 0, len(cat.Models))
	for _, m := range cat.Models {
		mh := adminapi.ModelHealth{ID: m.ID, Ready: s.ext.ModelReady(m.ID), Providers: []string{}}
		for _, p := range m.Providers {
			mh.Providers = append(mh.Providers, p.Provider)
			serves[p.Provider] = append(serves[p.Provider], m.ID)
		}
		models = append(models, mh)
	}
	providers := make([]adminapi.ProviderHealth, 0, len(cat.Providers))
	for _, p := range cat.Providers {
		ph := adminapi.ProviderHealth{Name: p.Name, Type: p.Type, Source: p.Source, Credential: ready[p.Name], Health: "unknown", Models: serves[p.Name]}
		if ph.Models == nil {
			ph.Models = []string{}
		}
		if ok, known := health[p.Name]; known && ph.Credential {
			ph.Health = map[bool]string{true: "healthy", false: "unhealthy"}[ok]
		}
		if rf, refused := s.ext.ProviderRefusal(p.Name); refused {
			ph.Refused = &rf
		}
		providers = append(providers, ph)
	}
	return providers, models, nil
}

// dialable is a listen address to connect to: a wildcard host becomes loopback.
func dialable(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen.public %s: %w", ir.QuoteShort(listen), err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}
