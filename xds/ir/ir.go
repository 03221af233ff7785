// Package ir is the intermediate representation between store records and Envoy protos: plain,
// validated structs that both the xDS translator and the ext_proc runtime compile from, so the
// two always agree on names.
package ir

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Names shared by the translator, the bootstrap and the ext_proc server.
const (
	ListenerName          = "public"
	RouteConfigName       = "public"
	ExtProcCluster        = "tollway_extproc"
	XDSCluster            = "tollway_xds"
	ProviderHeader        = "x-tollway-provider" // a response header: the provider that answered
	ClusterPrefix         = "provider."
	MaxBodyBytes          = 32 << 20 // spec: base64 images up to 20 MB, with room for JSON around them
	BufferLimitBytes      = MaxBodyBytes + 8<<20
	ProviderTypeOpenAI    = "openai"
	ProviderTypeAnthropic = "anthropic"
	ProviderTypeGemini    = "gemini"
)

// ErrInvalid marks a configuration the IR refuses.
var ErrInvalid = errors.New("invalid configuration")

// Gateway is everything Envoy and ext_proc need to serve traffic.
type Gateway struct {
	Listener  Listener   `json:"listener"`
	Providers []Provider `json:"providers"`
	Models    []Model    `json:"models"`
	Routes    []Route    `json:"routes,omitempty"`
	// AttemptTimeout is how long one attempt may stay silent (no byte from the provider) before
	// the next attempt of the chain is tried; 0 means the default.
	AttemptTimeout time.Duration `json:"attemptTimeout,omitempty"`
}

// Listener is the public HTTP listener ({base_url} = http://Address:Port/v1).
type Listener struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
}

// Provider is one upstream API endpoint.
type Provider struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Host     string `json:"host"`
	Port     uint32 `json:"port"`
	TLS      bool   `json:"tls"`
	BasePath string `json:"basePath"` // path prefix that replaces /v1, e.g. "/v1" or "/openai/v1"
	// CAFile is the PEM bundle that verifies the provider's certificate (TLS only): the system
	// bundle by default, a private CA for in-mesh model servers.
	CAFile string `json:"caFile,omitempty"`
	// NeedsKey is true when the config names a credential; a provider whose credential did not
	// resolve cannot take traffic.
	NeedsKey bool   `json:"needsKey"`
	APIKey   string `json:"-"` // secret: never serialized, never logged
}

// ClusterName is the Envoy cluster that reaches this provider.
func (p *Provider) ClusterName() string { return ClusterPrefix + p.Name }

// Authority is the Host a request to the provider carries (the port only when not the default).
func (p *Provider) Authority() string {
	if (p.TLS && p.Port == 443) || (!p.TLS && p.Port == 80) {
		return p.Host
	}
	return p.Host + ":" + strconv.FormatUint(uint64(p.Port), 10)
}

// Ready reports whether the provider has what it needs to take traffic.
func (p *Provider) Ready() bool { return !p.NeedsKey || p.APIKey != "" }

// Model is a catalog entry with its providers in preference order.
type Model struct {
	ID                  string   `json:"id"`
	Name                string   `json:"name,omitempty"`
	Targets             []Target `json:"targets"`
	SupportedParameters []string `json:"supportedParameters,omitempty"`
	// Catalog facts (spec 2.4); xDS does not use them.
	InputModalities   []string `json:"inputModalities,omitempty"`
	OutputModalities  []string `json:"outputModalities,omitempty"`
	ContextLength     int64    `json:"contextLength,omitempty"`
	MaxOutputLength   int64    `json:"maxOutputLength,omitempty"`
	SupportedFeatures []string `json:"supportedFeatures,omitempty"`
	Pricing           Pricing  `json:"-"`
}

// Target is one provider that serves a model, under that provider's model name.
type Target struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// SupportedParameters overrides the model's list for this provider (nil: the model's).
	SupportedParameters []string `json:"supportedParameters,omitempty"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// knownTypes are the provider adapters ext_proc has.
var knownTypes = map[string]bool{ProviderTypeOpenAI: true, ProviderTypeAnthropic: true, ProviderTypeGemini: true}

// ParseListen turns "host:port" into a Listener.
func ParseListen(addr string) (Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Listener{}, fmt.Errorf("listen.public %q: want host:port, e.g. 127.0.0.1:8080: %w", addr, ErrInvalid)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return Listener{}, fmt.Errorf("listen.public %q: port must be 1-65535: %w", addr, ErrInvalid)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return Listener{Address: host, Port: uint32(n)}, nil
}

// ParseProviderURL fills the endpoint fields of p from a base URL such as https://api.openai.com/v1.
func ParseProviderURL(p *Provider, baseURL string) error {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("provider %q: base_url %q must be an absolute http(s) URL like https://api.openai.com/v1: %w", p.Name, baseURL, ErrInvalid)
	}
	if u.RawQuery != "" || u.ForceQuery || strings.Contains(baseURL, "#") || u.User != nil {
		return fmt.Errorf("provider %q: base_url %q must not carry a query, fragment or credentials (put the key in api_key): %w", p.Name, baseURL, ErrInvalid)
	}
	p.TLS = u.Scheme == "https"
	p.Host = u.Hostname()
	p.Port = 80
	if p.TLS {
		p.Port = 443
	}
	if s := u.Port(); s != "" {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("provider %q: base_url %q has a bad port: %w", p.Name, baseURL, ErrInvalid)
		}
		p.Port = uint32(n)
	}
	if clean := path.Clean("/" + u.EscapedPath()); clean != "/" {
		p.BasePath = clean
	} else {
		p.BasePath = ""
	}
	return nil
}

// maxModelID bounds a model id, which travels in request headers (x-tollway-model) and names
// Envoy clusters.
const maxModelID = 256

func validModelID(id string) bool {
	if id == "" || len(id) > maxModelID || strings.HasPrefix(id, RoutePrefix) {
		return false
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// Validate checks names, references and types, reporting every problem at once.
func (g *Gateway) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format+": %w", append(args, ErrInvalid)...))
	}
	if g.Listener.Port == 0 {
		bad("listen.public: a port is required")
	}
	providers := make(map[string]bool, len(g.Providers))
	for _, p := range g.Providers {
		switch {
		case !nameRE.MatchString(p.Name):
			bad("provider %q: name must be lowercase letters, digits, '-' or '_' (max 63)", p.Name)
		case providers[p.Name]:
			bad("provider %q: defined twice", p.Name)
		case !knownTypes[p.Type]:
			bad("provider %q: unknown type %q (supported: openai, anthropic, gemini)", p.Name, p.Type)
		case p.Host == "" || p.Port == 0:
			bad("provider %q: base_url is required", p.Name)
		case p.TLS && p.CAFile == "":
			bad("provider %q: no CA bundle to verify %s with; set ca_file", p.Name, p.Host)
		}
		providers[p.Name] = true
	}
	models := make(map[string]bool, len(g.Models))
	for _, m := range g.Models {
		if !validModelID(m.ID) {
			bad("model %q: id must be 1 to %d characters without spaces or control characters, and not start with route:", m.ID, maxModelID)
		}
		if models[m.ID] {
			bad("model %q: defined twice", m.ID)
		}
		models[m.ID] = true
		if len(m.Targets) == 0 {
			bad("model %q: needs at least one provider", m.ID)
		}
		for _, t := range m.Targets {
			if !providers[t.Provider] {
				bad("model %q: provider %q is not defined under providers", m.ID, t.Provider)
			}
			if t.Model == "" {
				bad("model %q: provider %q needs the upstream model name (model:)", m.ID, t.Provider)
			}
		}
	}
	g.validateRoutes(models, bad)
	return errors.Join(errs...)
}
