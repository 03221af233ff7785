// Package config is the gateway's configuration file: loading it (the file or an embedded one,
// TOLLWAY_* environment overrides, strict decoding said in the file's terms), checking it, and
// the values the other parts take from it (the catalog as store records, the secrets' lookup,
// the limits, the admin token). Viper is used only here.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
	"github.com/tollway/tollway/configs"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
)

// Config is the file `tollway run --config` reads. Fields may grow; existing ones keep working.
type Config struct {
	Listen struct {
		Public string `mapstructure:"public"`
		Admin  string `mapstructure:"admin"`
		// XDS and ExtProc are where Envoys Tollway does not start (envoy.mode external) reach
		// its control plane (ADS) and its ext_proc server; the child Envoy uses private sockets.
		XDS     string `mapstructure:"xds"`
		ExtProc string `mapstructure:"extproc"`
		// XFFNumTrustedHops: how many proxies in front of the gateway append to x-forwarded-for.
		XFFNumTrustedHops int `mapstructure:"xff_num_trusted_hops"`
	} `mapstructure:"listen"`
	Limits struct {
		// MaxConcurrentRequests sizes Envoy's circuit breakers; the excess gets 503.
		MaxConcurrentRequests int `mapstructure:"max_concurrent_requests"`
	} `mapstructure:"limits"`
	Store struct {
		// Driver is bbolt (one gateway, one file: store.path; the default) or postgres (several
		// gateways share the database store.dsn names).
		Driver string `mapstructure:"driver"`
		// DSN is the PostgreSQL database of driver postgres, "${VAR}" references expanded from
		// the environment: postgres://user:pass@host:5432/tollway?sslmode=disable.
		DSN  string `mapstructure:"dsn"`
		Path string `mapstructure:"path"`
		// Spool is the replica's local journal of usage records with driver postgres (shipped
		// to the database in batches); "" is spool-<replica>.db beside store.path (SpoolPath).
		Spool string `mapstructure:"spool"`
		// UsageRetentionDays is how long raw usage records are kept; 0 keeps them for good.
		UsageRetentionDays int `mapstructure:"usage_retention_days"`
		// TaskRetentionDays is how long finished media tasks are kept after they ended; 0 keeps
		// them for good.
		TaskRetentionDays int `mapstructure:"task_retention_days"`
		// ImageRetentionHours is how long images a provider sent inline (Gemini) are kept
		// for GET; URLs from providers expire on the provider's own schedule.
		ImageRetentionHours int `mapstructure:"image_retention_hours"`
	} `mapstructure:"store"`
	Envoy struct {
		// Mode is child (Tollway starts and supervises its own Envoy) or external (Envoys
		// started elsewhere from `tollway bootstrap` connect to listen.xds and listen.extproc).
		Mode         string        `mapstructure:"mode"`
		Bin          string        `mapstructure:"bin"`
		LogLevel     string        `mapstructure:"log_level"`
		DrainTimeout time.Duration `mapstructure:"drain_timeout"`
		// Concurrency is the child Envoy's worker threads; 0 gives it the CPUs Tollway may
		// use (envoyWorkers).
		Concurrency int `mapstructure:"concurrency"`
	} `mapstructure:"envoy"`
	Log struct {
		Level string `mapstructure:"level"`
		// Access is where Envoy's access log goes: stdout (default), stderr, off, or a file's
		// absolute path.
		Access string `mapstructure:"access"`
	} `mapstructure:"log"`
	Routing struct {
		// AttemptTimeout: an attempt silent this long gives way to the next of its chain.
		AttemptTimeout time.Duration `mapstructure:"attempt_timeout"`
		// FastLane (default true) meters OpenAI-shaped streams in Envoy and bills them from its
		// access log, with no ext_proc message per chunk (docs/performance.md#fast-lane); false
		// puts every answer on the chunk lane, which alone ends a stream whose provider went
		// silent with an error event.
		FastLane bool `mapstructure:"fast_lane"`
	} `mapstructure:"routing"`
	Admin struct {
		// Token, when set, must come with every admin API request as "Authorization: Bearer
		// <token>": a "${VAR}" reference read from the environment (preferred) or a literal.
		Token string `mapstructure:"token"`
	} `mapstructure:"admin"`
	Keys struct {
		// RateLimits is every key's default rates: a key's own rate_limits overrides each rate
		// it sets; unset here and on the key, a rate has no limit.
		RateLimits store.RateLimits `mapstructure:"rate_limits"`
	} `mapstructure:"keys"`
	Billing struct {
		// Enabled turns on admission (credits, monthly limits) and metering. Off, keys still
		// authenticate and nothing is billed.
		Enabled bool `mapstructure:"enabled"`
	} `mapstructure:"billing"`
	Metrics struct {
		// Enabled serves GET /metrics and /metrics/envoy on the admin listener; off, nothing
		// is measured on the request path.
		Enabled bool `mapstructure:"enabled"`
	} `mapstructure:"metrics"`
	Callbacks struct {
		// AllowPrivate lists the private addresses (IPs or CIDRs) task callbacks may reach;
		// by default callbacks go to public addresses only.
		AllowPrivate []string `mapstructure:"allow_private"`
	} `mapstructure:"callbacks"`
	Tasks struct {
		// MaxAge: a media task its provider has not finished this long after its creation fails
		// with task_timeout (its hold released, its callback sent).
		MaxAge time.Duration `mapstructure:"max_age"`
		// UnknownGrace: a task its provider keeps saying it does not know, this long and at
		// least 3 answers in a row, fails with task_expired_or_unknown.
		UnknownGrace time.Duration `mapstructure:"unknown_grace"`
	} `mapstructure:"tasks"`
	Replica struct {
		// Name is how this process is listed among the replicas sharing the store; "" is its
		// hostname and pid.
		Name string `mapstructure:"name"`
		// Lease: a replica silent this long is shown as gone (it renews every third of it).
		Lease time.Duration `mapstructure:"lease"`
	} `mapstructure:"replica"`
	Tracing struct {
		// OTLPEndpoint is the OpenTelemetry collector's OTLP/gRPC address (http://collector:4317,
		// https:// for TLS); "" turns tracing off (the default).
		OTLPEndpoint string `mapstructure:"otlp_endpoint"`
		// SampleRate is the share of requests traced, 0 to 1; a client's traceparent is
		// followed as it says.
		SampleRate  float64 `mapstructure:"sample_rate"`
		ServiceName string  `mapstructure:"service_name"`
	} `mapstructure:"tracing"`
	Providers []ProviderConfig `mapstructure:"providers"`
	Models    []adminapi.Model `mapstructure:"models"`
	Routes    []adminapi.Route `mapstructure:"routes"`
	// X402 lists the pay-per-request endpoints (docs/x402.md).
	X402 x402.Config `mapstructure:"x402"`

	path string // file it came from; "" for an embedded configuration
	demo bool   // the embedded demo configuration (tollway run --demo)
}

// ProviderConfig is one entry of providers:.
type ProviderConfig struct {
	Name    string `mapstructure:"name"`
	Type    string `mapstructure:"type"`
	BaseURL string `mapstructure:"base_url"`
	APIKey  string `mapstructure:"api_key"`
	// AccessKey and SecretKey are Kling's credential pair (type kling), in place of api_key.
	AccessKey string `mapstructure:"access_key"`
	SecretKey string `mapstructure:"secret_key"`
	CAFile    string `mapstructure:"ca_file"` // PEM bundle for https base URLs; default: the system bundle
}

// Envoy modes (envoy.mode, tollway run --envoy).
const (
	EnvoyChild    = "child"
	EnvoyExternal = "external"
)

var defaults = map[string]any{
	"listen.public":                  "127.0.0.1:8080",
	"listen.admin":                   "127.0.0.1:9090",
	"store.path":                     "data/tollway.db",
	"store.driver":                   StoreBbolt,
	"store.dsn":                      "",
	"store.spool":                    "",
	"replica.name":                   "",
	"replica.lease":                  "15s",
	"store.usage_retention_days":     35,
	"store.task_retention_days":      30,
	"store.image_retention_hours":    24,
	"envoy.mode":                     EnvoyChild,
	"listen.xds":                     "127.0.0.1:18000",
	"listen.extproc":                 "127.0.0.1:18001",
	"envoy.bin":                      "",
	"envoy.log_level":                "warning",
	"envoy.drain_timeout":            "10s",
	"envoy.concurrency":              0,
	"log.level":                      "info",
	"log.access":                     "stdout",
	"billing.enabled":                true,
	"metrics.enabled":                true,
	"admin.token":                    "", // known to viper, so TOLLWAY_ADMIN_TOKEN alone sets it
	"routing.attempt_timeout":        "60s",
	"routing.fast_lane":              true,
	"x402.facilitator_timeout":       "60s",
	"limits.max_concurrent_requests": ir.DefaultMaxConcurrentRequests,
	"listen.xff_num_trusted_hops":    0,
	"tasks.max_age":                  "6h",
	"tasks.unknown_grace":            "1m",
	"tracing.otlp_endpoint":          "",
	"tracing.sample_rate":            1.0,
	"tracing.service_name":           ir.DefaultServiceName,
}

// Load reads path (the embedded default when path is ""), applies TOLLWAY_* environment
// overrides (TOLLWAY_LISTEN_PUBLIC=127.0.0.1:8081 ...) and checks it. Unknown keys are errors:
// a typo must not silently fall back to a default.
func Load(path string) (*Config, error) {
	if path == "" {
		return loadConfig("", configs.Default, "(embedded default)")
	}
	return loadConfig(path, nil, path)
}

// LoadDemo reads the embedded demo configuration (configs/demo.yaml, `tollway run --demo`),
// with the same environment overrides and checks as Load.
func LoadDemo() (*Config, error) {
	c, err := loadConfig("", configs.Demo, "(embedded demo)")
	if err != nil {
		return nil, err
	}
	c.demo = true
	return c, nil
}

// Reread loads the configuration again from where c came from (a reload).
func (c *Config) Reread() (*Config, error) {
	if c.demo {
		return LoadDemo()
	}
	return Load(c.path)
}

// Path is the file c came from; "" for an embedded configuration (nothing to watch).
func (c *Config) Path() string { return c.path }

// loadConfig reads the file at path, or embedded when path is ""; errors call it name.
func loadConfig(path string, embedded []byte, name string) (*Config, error) {
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
		err = v.ReadConfig(bytes.NewReader(embedded))
	} else {
		v.SetConfigFile(path)
		err = v.ReadInConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", name, configError(err))
	}
	var c Config
	hooks := mapstructure.ComposeDecodeHookFunc(strictValues, mapstructure.StringToSliceHookFunc(",")) // viper's defaults, durations strict
	if err := v.UnmarshalExact(&c, viper.DecodeHook(hooks)); err != nil {
		return nil, fmt.Errorf("config %s: %w", name, configError(err))
	}
	c.path = path
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s:\n%w", name, err)
	}
	return &c, nil
}

// Validate checks what the IR does not: listen addresses, the store path and the limits.
func (c *Config) Validate() error {
	var errs []error
	if _, err := ir.ParseListen(c.Listen.Public); err != nil {
		errs = append(errs, err)
	}
	if err := adminListen(c.Listen.Admin, c.Admin.Token); err != nil {
		errs = append(errs, err)
	}
	if err := checkAdminTokenRef(c.Admin.Token); err != nil {
		errs = append(errs, err)
	}
	switch c.Envoy.Mode {
	case EnvoyChild:
	case EnvoyExternal:
		for key, addr := range map[string]string{"listen.xds": c.Listen.XDS, "listen.extproc": c.Listen.ExtProc} {
			if _, err := ir.ParseListen(addr); err != nil { // its message names listen.public
				errs = append(errs, fmt.Errorf("%s %q: want host:port to serve external Envoys on, e.g. 127.0.0.1:18000 (0.0.0.0:18000 for other hosts)", key, addr))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("envoy.mode %q: want child (Tollway starts its own Envoy; the default) or external (Envoys started from `tollway bootstrap` connect to it)", c.Envoy.Mode))
	}
	errs = append(errs, c.checkStore()...)
	if n := c.Limits.MaxConcurrentRequests; n < 1 || n > ir.MaxConcurrentRequestsCeiling {
		errs = append(errs, fmt.Errorf("limits.max_concurrent_requests %d: must be 1 to %d (default %d)", n, ir.MaxConcurrentRequestsCeiling, ir.DefaultMaxConcurrentRequests))
	}
	if n := c.Listen.XFFNumTrustedHops; n < 0 || n > ir.MaxXFFTrustedHops {
		errs = append(errs, fmt.Errorf("listen.xff_num_trusted_hops %d: must be 0 (clients connect directly) to %d (the proxies in front of the gateway that append to x-forwarded-for)", n, ir.MaxXFFTrustedHops))
	}
	if c.Store.UsageRetentionDays < 0 || c.Store.UsageRetentionDays > 36500 {
		errs = append(errs, fmt.Errorf("store.usage_retention_days is %d: give a number of days, e.g. 35, or 0 to keep usage records for good", c.Store.UsageRetentionDays))
	}
	if c.Store.ImageRetentionHours < 1 || c.Store.ImageRetentionHours > 24*366 {
		errs = append(errs, fmt.Errorf("store.image_retention_hours is %d: give a number of hours from 1 to 8784, e.g. 24", c.Store.ImageRetentionHours))
	}
	if c.Store.TaskRetentionDays < 0 || c.Store.TaskRetentionDays > 36500 {
		errs = append(errs, fmt.Errorf("store.task_retention_days is %d: give a number of days, e.g. 30, or 0 to keep finished tasks for good", c.Store.TaskRetentionDays))
	}
	errs = append(errs, c.checkValues()...)
	errs = append(errs, c.checkTasks()...)
	errs = append(errs, c.checkTracing()...)
	if _, err := c.CallbackAllow(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.checkX402()...)
	errs = append(errs, rateFaults("keys.rate_limits", &c.Keys.RateLimits, "leave it out for no default limit")...)
	for i, r := range c.Routes {
		errs = append(errs, rateFaults(fmt.Sprintf("routes[%d].rate_limits", i), r.RateLimits, "leave it out for no limit on the route")...)
	}
	if _, err := c.catalogIR(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// rateFaults are r's rates out of range, each naming its field (under at) and the fix.
func rateFaults(at string, r *store.RateLimits, unset string) []error {
	var errs []error
	for _, b := range r.OutOfRange() {
		errs = append(errs, fmt.Errorf("%s.%s is %d: give a whole number from 1 to %d per minute, or %s", at, b.Field, b.Value, store.MaxRate, unset))
	}
	return errs
}

// adminListen checks listen.admin: a loopback address, or any address when admin.token (the
// reference as written, or TOLLWAY_ADMIN_TOKEN) protects the admin API and console there.
func adminListen(addr, tokenRef string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen.admin %q: want host:port, e.g. 127.0.0.1:9090", addr)
	}
	if loopbackHost(host) || tokenRef != "" {
		return nil
	}
	return fmt.Errorf("listen.admin %q is not a loopback address, and without a token the admin API and console would be open to anyone who reaches it: "+
		"set admin: {token: \"${TOLLWAY_ADMIN_TOKEN}\"} (with TOLLWAY_ADMIN_TOKEN=$(openssl rand -hex 32) in the gateway's environment), "+
		"or listen on 127.0.0.1 and reach it through an SSH tunnel to the same port", addr)
}

// loopbackHost reports whether a listen address's host is loopback only.
func loopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// IsEnvRef reports whether ref names an environment variable as "${NAME}": the only form of a
// credential the store keeps.
func IsEnvRef(ref string) bool { return envRef.MatchString(ref) }

// resolveSecret expands a "${VAR}" reference from the environment; any other non-empty value is a
// literal secret. ok is false when the reference names an unset variable.
func resolveSecret(ref string) (secret string, ok bool) {
	if m := envRef.FindStringSubmatch(ref); m != nil {
		v := os.Getenv(m[1])
		return v, v != ""
	}
	return ref, true
}

// Admin token bounds: long enough not to be guessed, and safe in an HTTP header.
const (
	minAdminToken = 32
	maxAdminToken = 512
)

// checkAdminTokenRef checks admin.token as written: a ${VAR} reference (resolved when the gateway
// starts) or a literal. Messages never repeat a literal.
func checkAdminTokenRef(ref string) error {
	switch {
	case ref == "", envRef.MatchString(ref):
		return nil
	case strings.Contains(ref, "${"):
		return errors.New(`admin.token: write an environment reference as "${NAME}", e.g. "${TOLLWAY_ADMIN_TOKEN}"`)
	}
	if err := checkAdminToken(ref); err != nil {
		return fmt.Errorf("admin.token (or TOLLWAY_ADMIN_TOKEN): %w", err)
	}
	return nil
}

func checkAdminToken(tok string) error {
	if len(tok) < minAdminToken || len(tok) > maxAdminToken {
		return fmt.Errorf("the token has %d characters; it needs %d to %d, so that it cannot be guessed: make one with `openssl rand -hex 32` (64 characters)", len(tok), minAdminToken, maxAdminToken)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return errors.New("the token must be printable ASCII without spaces (it travels in an HTTP header), e.g. from `openssl rand -hex 32`")
		}
	}
	return nil
}

// AdminToken resolves admin.token; "" means the admin API takes no token. A reference to an
// unset variable is an error, never an open API: the operator asked for a token.
func (c *Config) AdminToken() (string, error) {
	ref := c.Admin.Token
	if ref == "" {
		return "", nil
	}
	tok, ok := resolveSecret(ref)
	if !ok {
		return "", fmt.Errorf("admin.token refers to %s, which is not set in the environment: set it (e.g. to the output of `openssl rand -hex 32`) or remove admin.token", ref)
	}
	if err := checkAdminToken(tok); err != nil {
		return "", fmt.Errorf("admin.token (%s): %w", storeRef(ref), err)
	}
	return tok, nil
}

// storeRef is what reaches disk for a credential: references as written, literal secrets never.
func storeRef(ref string) string {
	if ref == "" || envRef.MatchString(ref) {
		return ref
	}
	return "(inline secret)"
}

// Catalog is the config's providers, models and routes as store records.
func (c *Config) Catalog() (store.Catalog, error) {
	var cat store.Catalog
	var errs []error
	for _, p := range c.Providers {
		cat.Providers = append(cat.Providers, store.Provider{Name: p.Name, Type: p.Type, BaseURL: p.BaseURL, APIKeyRef: storeRef(p.APIKey), CAFile: p.CAFile,
			AccessKeyRef: storeRef(p.AccessKey), SecretKeyRef: storeRef(p.SecretKey)})
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
		cat.Models = append(cat.Models, m.StoreModel(raw))
	}
	for _, r := range c.Routes {
		cat.Routes = append(cat.Routes, r.StoreRoute())
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
		if p.AccessKey != "" && !envRef.MatchString(p.AccessKey) {
			out[p.Name+"/access_key"] = p.AccessKey
		}
		if p.SecretKey != "" && !envRef.MatchString(p.SecretKey) {
			out[p.Name+"/secret_key"] = p.SecretKey
		}
	}
	return out
}

func (c *Config) catalogIR() (*ir.Gateway, error) {
	cat, err := c.Catalog()
	if err != nil {
		return nil, err
	}
	return catalog.Build(c.Listen.Public, cat, c.BuildEnv(checkOnly))
}

// checkOnly stands in for the demo server when a configuration is only checked: nothing is
// started, and the address is never dialled.
func checkOnly() (string, error) { return "127.0.0.1:9", nil }

// BuildEnv is how this configuration's records resolve when they become IR: literal api_key
// values from memory, ${VAR} references from the environment, the system CA bundle, and demo
// providers at the in-process demo model server (started by demo on first use).
func (c *Config) BuildEnv(demo func() (string, error)) catalog.Env {
	inline := c.inlineSecrets()
	return catalog.Env{
		SystemCA: catalog.SystemCABundle(),
		Demo:     demo,
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
		KeyPair: func(p store.Provider) (string, string) {
			one := func(field, ref string) string {
				if s, ok := inline[p.Name+"/"+field]; ok {
					return s
				}
				if envRef.MatchString(ref) {
					s, _ := resolveSecret(ref)
					return s
				}
				return ""
			}
			return one("access_key", p.AccessKeyRef), one("secret_key", p.SecretKeyRef)
		},
	}
}

// KeyRateDefaults is keys.rate_limits as the IR takes it (0: no default for a rate).
func (c *Config) KeyRateDefaults() ir.RateLimits {
	return ir.RateLimitsOf(c.Keys.RateLimits.RequestsPerMinute, c.Keys.RateLimits.TokensPerMinute)
}

// IRLimits is the limits: section as the IR takes it (Validate bounded it).
func (c *Config) IRLimits() ir.Limits {
	return ir.Limits{MaxConcurrentRequests: uint32(c.Limits.MaxConcurrentRequests)}
}

// CallbackAllow parses callbacks.allow_private: IPs (one address each) or CIDRs.
func (c *Config) CallbackAllow() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range c.Callbacks.AllowPrivate {
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("callbacks.allow_private: %q is neither an IP address nor a CIDR (e.g. 127.0.0.1 or 10.0.0.0/8): %w", v, ir.ErrInvalid)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
