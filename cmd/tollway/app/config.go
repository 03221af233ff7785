package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/tollway/tollway/configs"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
)

// Config is the file `tollway run --config` reads. Fields may grow; existing ones keep working.
type Config struct {
	Listen struct {
		Public string `mapstructure:"public"`
		Admin  string `mapstructure:"admin"`
	} `mapstructure:"listen"`
	Store struct {
		Path string `mapstructure:"path"`
	} `mapstructure:"store"`
	Envoy struct {
		Bin          string        `mapstructure:"bin"`
		LogLevel     string        `mapstructure:"log_level"`
		DrainTimeout time.Duration `mapstructure:"drain_timeout"`
	} `mapstructure:"envoy"`
	Log struct {
		Level string `mapstructure:"level"`
	} `mapstructure:"log"`
	Routing struct {
		// AttemptTimeout: an attempt silent this long gives way to the next of its chain.
		AttemptTimeout time.Duration `mapstructure:"attempt_timeout"`
	} `mapstructure:"routing"`
	Billing struct {
		// Enabled turns on admission (credits, monthly limits) and metering. Off, keys still
		// authenticate and nothing is billed.
		Enabled bool `mapstructure:"enabled"`
	} `mapstructure:"billing"`
	Providers []ProviderConfig `mapstructure:"providers"`
	Models    []ModelConfig    `mapstructure:"models"`
	Routes    []RouteConfig    `mapstructure:"routes"`

	path string // file it came from; "" for the embedded default
}

// ProviderConfig is one entry of providers:.
type ProviderConfig struct {
	Name    string `mapstructure:"name"`
	Type    string `mapstructure:"type"`
	BaseURL string `mapstructure:"base_url"`
	APIKey  string `mapstructure:"api_key"`
	CAFile  string `mapstructure:"ca_file"` // PEM bundle for https base URLs; default: the system bundle
}

// RouteConfig is one entry of routes: (id route:<slug of name>).
type RouteConfig struct {
	Name   string            `mapstructure:"name"`
	Rule   string            `mapstructure:"rule"`
	Models []string          `mapstructure:"models"`
	Modes  map[string]string `mapstructure:"modes"`
	Status string            `mapstructure:"status"` // active when omitted
}

// storeRoute is a route as the store keeps it; its id comes from the name once.
func (r RouteConfig) storeRoute() store.Route {
	status := r.Status
	if status == "" {
		status = ir.RouteActive
	}
	return store.Route{ID: ir.RoutePrefix + ir.Slug(r.Name), Name: r.Name, Rule: r.Rule, Models: r.Models, Modes: r.Modes, Status: status}
}

// ModelConfig is one entry of models:.
type ModelConfig struct {
	ID                          string                `mapstructure:"id"`
	Name                        string                `mapstructure:"name"`
	Providers                   []store.ModelProvider `mapstructure:"providers"`
	SupportedSamplingParameters []string              `mapstructure:"supported_sampling_parameters"`
	InputModalities             []string              `mapstructure:"input_modalities"`
	OutputModalities            []string              `mapstructure:"output_modalities"`
	ContextLength               int64                 `mapstructure:"context_length"`
	MaxOutputLength             int64                 `mapstructure:"max_output_length"`
	SupportedFeatures           []string              `mapstructure:"supported_features"`
	// Pricing is an object or an array of tiers with decimal-string prices (spec 2.4).
	Pricing any `mapstructure:"pricing"`
}

var defaults = map[string]any{
	"listen.public":           "127.0.0.1:8080",
	"listen.admin":            "127.0.0.1:9090",
	"store.path":              "data/tollway.db",
	"envoy.bin":               "",
	"envoy.log_level":         "warning",
	"envoy.drain_timeout":     "10s",
	"log.level":               "info",
	"billing.enabled":         true,
	"routing.attempt_timeout": "60s",
}

// LoadConfig reads path (the embedded default when path is ""), applies TOLLWAY_* environment
// overrides (TOLLWAY_LISTEN_PUBLIC=127.0.0.1:8081 ...) and checks it. Unknown keys are errors:
// a typo must not silently fall back to a default.
func LoadConfig(path string) (*Config, error) {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	v.SetEnvPrefix("TOLLWAY")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	v.SetConfigType("yaml")
	var err error
	if path == "" {
		err = v.ReadConfig(bytes.NewReader(configs.Default))
	} else {
		v.SetConfigFile(path)
		err = v.ReadInConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", displayPath(path), configError(err))
	}
	var c Config
	hooks := mapstructure.ComposeDecodeHookFunc(strictValues, mapstructure.StringToSliceHookFunc(",")) // viper's defaults, durations strict
	if err := v.UnmarshalExact(&c, viper.DecodeHook(hooks)); err != nil {
		return nil, fmt.Errorf("config %s: %w", displayPath(path), configError(err))
	}
	c.path = path
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s:\n%w", displayPath(path), err)
	}
	return &c, nil
}

func displayPath(p string) string {
	if p == "" {
		return "(embedded default)"
	}
	return p
}

// Validate checks what the IR does not: listen addresses and the store path.
func (c *Config) Validate() error {
	var errs []error
	if _, err := ir.ParseListen(c.Listen.Public); err != nil {
		errs = append(errs, err)
	}
	if err := loopbackOnly(c.Listen.Admin); err != nil {
		errs = append(errs, err)
	}
	if c.Store.Path == "" {
		errs = append(errs, errors.New("store.path is required, e.g. data/tollway.db"))
	}
	errs = append(errs, c.checkValues()...)
	if _, err := c.catalogIR(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// resolveSecret expands a "${VAR}" reference from the environment; any other non-empty value is a
// literal secret. ok is false when the reference names an unset variable.
func resolveSecret(ref string) (secret string, ok bool) {
	if m := envRef.FindStringSubmatch(ref); m != nil {
		v := os.Getenv(m[1])
		return v, v != ""
	}
	return ref, true
}

// storeRef is what reaches disk for a credential: references as written, literal secrets never.
func storeRef(ref string) string {
	if ref == "" || envRef.MatchString(ref) {
		return ref
	}
	return "(inline secret)"
}

// catalog is the config's providers and models as store records.
func (c *Config) catalog() (store.Catalog, error) {
	var cat store.Catalog
	var errs []error
	for _, p := range c.Providers {
		cat.Providers = append(cat.Providers, store.Provider{Name: p.Name, Type: p.Type, BaseURL: p.BaseURL, APIKeyRef: storeRef(p.APIKey), CAFile: p.CAFile})
	}
	for _, m := range c.Models {
		pricing, err := ir.ParsePricing(m.Pricing)
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: pricing: %w: %w", m.ID, err, ir.ErrInvalid))
			continue
		}
		raw, err := json.Marshal(pricing)
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: pricing: %w", m.ID, err))
			continue
		}
		cat.Models = append(cat.Models, store.Model{
			ID: m.ID, Name: m.Name, Providers: m.Providers,
			SupportedSamplingParameters: m.SupportedSamplingParameters,
			InputModalities:             m.InputModalities, OutputModalities: m.OutputModalities,
			ContextLength: m.ContextLength, MaxOutputLength: m.MaxOutputLength,
			SupportedFeatures: m.SupportedFeatures, Pricing: raw,
		})
	}
	for _, r := range c.Routes {
		cat.Routes = append(cat.Routes, r.storeRoute())
	}
	return cat, errors.Join(errs...)
}

// inlineSecrets are literal api_key values, kept in memory only.
func (c *Config) inlineSecrets() map[string]string {
	out := map[string]string{}
	for _, p := range c.Providers {
		if p.APIKey != "" && !envRef.MatchString(p.APIKey) {
			out[p.Name] = p.APIKey
		}
	}
	return out
}

func (c *Config) catalogIR() (*ir.Gateway, error) {
	cat, err := c.catalog()
	if err != nil {
		return nil, err
	}
	return catalog.Build(c.Listen.Public, cat, c.buildEnv())
}

// buildEnv is how this configuration's records resolve when they become IR: literal api_key
// values from memory, ${VAR} references from the environment, the system CA bundle.
func (c *Config) buildEnv() catalog.Env {
	inline := c.inlineSecrets()
	return catalog.Env{
		SystemCA: catalog.SystemCABundle(),
		Secret: func(p store.Provider) string {
			if s, ok := inline[p.Name]; ok {
				return s
			}
			if envRef.MatchString(p.APIKeyRef) {
				s, _ := resolveSecret(p.APIKeyRef)
				return s
			}
			return "" // an inline secret whose config is gone stays unresolved, never used as a literal
		},
	}
}
