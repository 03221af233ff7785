// Package catalog turns the store's records (providers, models, routes) into the validated IR
// that the xDS translator and the ext_proc runtime both compile from. It is the one place where
// a stored record becomes an ir value; what it needs from outside the records (credentials,
// the system CA bundle) comes in through Env, so the step is golden-tested without I/O.
package catalog

import (
	"errors"
	"fmt"
	"os"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Env is what building needs besides the records.
type Env struct {
	// Secret resolves a provider's credential; "" means it did not resolve (the provider then
	// cannot take traffic). nil resolves nothing.
	Secret func(p store.Provider) string
	// KeyPair resolves Kling's access and secret keys the same way; nil resolves nothing.
	KeyPair func(p store.Provider) (access, secret string)
	// SystemCA is the CA bundle that verifies https providers without their own ca_file.
	SystemCA string
	// CheckFile reports whether a configured ca_file can be read; nil uses os.Stat.
	CheckFile func(path string) error
	// Demo gives the host:port of the in-process demo model server, starting it if needed; it
	// is called only when a provider of type demo exists. nil refuses demo providers.
	Demo func() (string, error)
}

// Build compiles the catalog into the IR of a gateway listening on public (host:port). Every
// problem is reported at once; the error wraps ir.ErrInvalid when the records are at fault.
func Build(public string, cat store.Catalog, env Env) (*ir.Gateway, error) {
	l, err := ir.ParseListen(public)
	if err != nil {
		return nil, err
	}
	check := env.CheckFile
	if check == nil {
		check = func(p string) error { _, err := os.Stat(p); return err }
	}
	g := &ir.Gateway{Listener: l}
	var errs []error
	for _, sp := range cat.Providers {
		p := ir.Provider{Name: sp.Name, Type: sp.Type, NeedsKey: sp.APIKeyRef != "" || sp.AccessKeyRef != "" || sp.SecretKeyRef != ""}
		if sp.Type == ir.ProviderTypeDemo {
			if err := demoProvider(&p, sp, env.Demo); err != nil {
				errs = append(errs, err)
			}
			g.Providers = append(g.Providers, p)
			continue
		}
		if err := ir.ParseProviderURL(&p, sp.BaseURL); err != nil {
			errs = append(errs, err)
		}
		if p.TLS {
			p.CAFile = sp.CAFile
			if p.CAFile == "" {
				p.CAFile = env.SystemCA
			} else if err := check(p.CAFile); err != nil {
				errs = append(errs, fmt.Errorf("provider %q: ca_file: %w: %w", sp.Name, err, ir.ErrInvalid))
			}
		}
		if env.Secret != nil {
			p.APIKey = env.Secret(sp)
		}
		if env.KeyPair != nil {
			p.AccessKey, p.SecretKey = env.KeyPair(sp)
		}
		switch {
		case sp.Type == ir.ProviderTypeKling && (sp.AccessKeyRef == "" || sp.SecretKeyRef == "" || sp.APIKeyRef != ""):
			errs = append(errs, fmt.Errorf("provider %q: type kling takes access_key and secret_key (the gateway signs a JWT with them), not api_key: %w", sp.Name, ir.ErrInvalid))
		case sp.Type != ir.ProviderTypeKling && (sp.AccessKeyRef != "" || sp.SecretKeyRef != ""):
			errs = append(errs, fmt.Errorf("provider %q: access_key and secret_key are for type kling; type %s takes api_key: %w", sp.Name, sp.Type, ir.ErrInvalid))
		}
		g.Providers = append(g.Providers, p)
	}
	for _, sm := range cat.Models {
		m := ir.Model{
			ID: sm.ID, Name: sm.Name, SupportedParameters: sm.SupportedSamplingParameters,
			InputModalities: orDefault(sm.InputModalities, "text"), OutputModalities: orDefault(sm.OutputModalities, "text"),
			ContextLength: sm.ContextLength, MaxOutputLength: sm.MaxOutputLength, SupportedFeatures: sm.SupportedFeatures,
			Family: sm.Family, Variant: sm.Variant,
		}
		if f, ok := ir.MediaFamilies[sm.Family]; ok {
			// What the catalog says of a media model unless the config says otherwise.
			m.OutputModalities = orDefault(sm.OutputModalities, f.Output...)
			in := f.Input
			if sm.Variant == "t2v" {
				in = []string{"text"} // text-to-video takes no image
			}
			m.InputModalities = orDefault(sm.InputModalities, in...)
			m.SupportedFeatures = orDefault(sm.SupportedFeatures, f.Feature)
		}
		if m.Kind() == ir.KindEmbeddings {
			m.SupportedFeatures = orDefault(sm.SupportedFeatures, ir.KindEmbeddings)
		}
		var err error
		if m.Pricing, err = pricing(sm); err != nil {
			errs = append(errs, err)
		}
		for _, t := range sm.Providers {
			m.Targets = append(m.Targets, ir.Target{Provider: t.Provider, Model: t.Model, SupportedParameters: t.SupportedSamplingParameters})
		}
		g.Models = append(g.Models, m)
	}
	for _, sr := range cat.Routes {
		r := ir.Route{Name: sr.Name, ID: sr.ID, Rule: sr.Rule, Models: sr.Models, Modes: sr.Modes, Status: sr.Status}
		if sr.RateLimits != nil {
			r.RateLimits = ir.RateLimitsOf(sr.RateLimits.RequestsPerMinute, sr.RateLimits.TokensPerMinute)
		}
		g.Routes = append(g.Routes, r)
	}
	errs = append(errs, g.Validate())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

// demoProvider points a provider of type demo at the in-process demo model server. It takes no
// URL or credential: its answers come from Tollway itself, and only from there.
func demoProvider(p *ir.Provider, sp store.Provider, demo func() (string, error)) error {
	if sp.BaseURL != "" || sp.APIKeyRef != "" || sp.CAFile != "" {
		return fmt.Errorf("provider %q: type demo takes no base_url, api_key or ca_file (Tollway serves it in-process); remove them, or use type openai for a real server: %w", sp.Name, ir.ErrInvalid)
	}
	if demo == nil {
		return fmt.Errorf("provider %q: type demo is served only by `tollway run`: %w", sp.Name, ir.ErrInvalid)
	}
	addr, err := demo()
	if err != nil {
		return fmt.Errorf("provider %q: %w", sp.Name, err)
	}
	return ir.ParseProviderURL(p, "http://"+addr+"/v1")
}

// pricing reads a model's stored pricing JSON (decimal strings) without going through float64.
func pricing(sm store.Model) (ir.Pricing, error) {
	if len(sm.Pricing) == 0 {
		return ir.ParsePricing(nil)
	}
	var p ir.Pricing
	if err := p.UnmarshalJSON(sm.Pricing); err != nil {
		return ir.Pricing{}, fmt.Errorf("model %q: pricing: %w: %w", sm.ID, err, ir.ErrInvalid)
	}
	return p, nil
}

func orDefault(v []string, d ...string) []string {
	if len(v) == 0 {
		return d
	}
	return v
}

// SystemCABundle finds the operating system's CA bundle (Debian/Ubuntu, RHEL/Fedora,
// Alpine/macOS); "" when there is none.
func SystemCABundle() string {
	for _, p := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
