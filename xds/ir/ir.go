// Package ir is the intermediate representation between store records and Envoy protos: plain,
// validated structs that both the xDS translator and the ext_proc runtime compile from, so the
// two always agree on names.
package ir

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Names shared by the translator, the bootstrap and the ext_proc server.
const (
	ListenerName         = "public"
	InternalListenerName = "internal"
	RouteConfigName      = "public"
	ExtProcCluster       = "tollway_extproc"
	XDSCluster           = "tollway_xds"
	ProviderHeader       = "x-tollway-provider" // a response header: the provider that answered
	ClusterPrefix        = "provider."
	MaxBodyBytes         = 32 << 20 // spec: base64 images up to 20 MB, with room for JSON around them
	BufferLimitBytes     = MaxBodyBytes + 8<<20
	// MaxExtProcMessageTimeout is the longest ext_proc may ask Envoy to wait for one answer
	// (override_message_timeout): a media create that the provider answers with the finished
	// image takes tens of seconds.
	MaxExtProcMessageTimeout = 3 * time.Minute
	ProviderTypeOpenAI       = "openai"
	ProviderTypeAnthropic    = "anthropic"
	ProviderTypeGemini       = "gemini"
	// ProviderTypeDemo is the offline demo model (package demo), which `tollway run` serves
	// in-process; the provider's endpoint is that server's, never a configured URL.
	ProviderTypeDemo = "demo"
	// Media task providers (docs/media.md#video-families): MiniMax Hailuo (family V1), Alibaba
	// DashScope (V2) and Kling (V3), all asynchronous: create a task, then query it.
	ProviderTypeMiniMax   = "minimax"
	ProviderTypeDashScope = "dashscope"
	ProviderTypeKling     = "kling"
)

// ErrInvalid marks a configuration the IR refuses.
var ErrInvalid = errors.New("invalid configuration")

// DefaultAttemptTimeout is how long an attempt may stay silent when routing.attempt_timeout is
// not set.
const DefaultAttemptTimeout = 60 * time.Second

// AttemptIdle is how long an attempt may stay silent: AttemptTimeout, or its default.
func (g *Gateway) AttemptIdle() time.Duration {
	if g.AttemptTimeout <= 0 {
		return DefaultAttemptTimeout
	}
	return g.AttemptTimeout
}

// Gateway is everything Envoy and ext_proc need to serve traffic.
type Gateway struct {
	Listener  Listener   `json:"listener"`
	Providers []Provider `json:"providers"`
	Models    []Model    `json:"models"`
	Routes    []Route    `json:"routes,omitempty"`
	// AttemptTimeout is how long one attempt may stay silent (no byte from the provider) before
	// the next attempt of the chain is tried; 0 means the default (AttemptIdle).
	AttemptTimeout time.Duration `json:"attemptTimeout,omitempty"`
	Limits         Limits        `json:"limits,omitzero"`
	// Internal, when set, is the loopback listener the gateway's own task requests (creation,
	// status queries, file look-ups) reach providers through: a request naming a provider's
	// cluster in ClusterHeader goes to that cluster, anything else is 404.
	Internal *Listener `json:"internal,omitempty"`
	// AccessLog is where Envoy writes one JSON line per request (log.access); zero: stdout.
	AccessLog AccessLog `json:"accessLog,omitzero"`
	// FastLane splits each chat request's answer from its request (routing.fast_lane): an
	// OpenAI-shaped stream is metered in Envoy and billed from its access log, with no ext_proc
	// message per chunk; other answers pass ext_proc's answer filter chunk by chunk.
	FastLane bool `json:"fastLane,omitempty"`
	// Tracing sends traces over OTLP (the tracing: section); nil: off.
	Tracing *Tracing `json:"tracing,omitempty"`
	// KeyRateLimits is every key's default rates (keys.rate_limits), for each rate a key leaves
	// unset: ext_proc enforces them, Envoy does not see them.
	KeyRateLimits RateLimits `json:"keyRateLimits,omitzero"`
}

// RateLimits are requests and tokens per minute; 0 is no limit.
type RateLimits struct {
	RequestsPerMinute int64 `json:"requestsPerMinute,omitempty"`
	TokensPerMinute   int64 `json:"tokensPerMinute,omitempty"`
}

// Any reports whether r limits anything.
func (r RateLimits) Any() bool { return r.RequestsPerMinute > 0 || r.TokensPerMinute > 0 }

// RateLimitsOf is the rates a record keeps as pointers (nil: unset, 0 here).
func RateLimitsOf(rpm, tpm *int64) RateLimits {
	var r RateLimits
	if rpm != nil {
		r.RequestsPerMinute = *rpm
	}
	if tpm != nil {
		r.TokensPerMinute = *tpm
	}
	return r
}

// Or is r with each rate it leaves at 0 taken from def.
func (r RateLimits) Or(def RateLimits) RateLimits {
	if r.RequestsPerMinute == 0 {
		r.RequestsPerMinute = def.RequestsPerMinute
	}
	if r.TokensPerMinute == 0 {
		r.TokensPerMinute = def.TokensPerMinute
	}
	return r
}

// AccessLog is where the access log goes: Envoy's stdout (which Tollway prints on its own
// stdout) or stderr, a file, or nowhere.
type AccessLog struct {
	Off  bool   `json:"off,omitempty"`
	Path string `json:"path,omitempty"` // a file; "" is stdout, "/dev/stderr" stderr
	// Bills: billing is on, so a split gateway's line for a routed request without its bill
	// (an answer cut after the provider answered, billed once Envoy is past asking ext_proc) is
	// written by Tollway with the bill. With billing off no line has one, and Envoy writes them.
	Bills bool `json:"bills,omitempty"`
}

// Listener is the public HTTP listener ({base_url} = http://Address:Port/v1).
type Listener struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	// XFFTrustedHops is how many proxies in front of the gateway append to x-forwarded-for
	// (listen.xff_num_trusted_hops); 0 means clients connect directly and their own
	// x-forwarded-for is not believed.
	XFFTrustedHops uint32 `json:"xffTrustedHops,omitempty"`
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
	// AccessKey and SecretKey are Kling's credential pair (the gateway signs a JWT with them),
	// in place of APIKey. Secrets: never serialized, never logged.
	AccessKey string `json:"-"`
	SecretKey string `json:"-"`
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

// SpeaksOpenAI reports whether the provider answers in OpenAI's chat-completions shape, so its
// answers need no translation.
func (p *Provider) SpeaksOpenAI() bool {
	return p.Type == ProviderTypeOpenAI || p.Type == ProviderTypeDemo
}

// ChatPath is the client's chat-completions path, the gateway's own.
const ChatPath = "/v1/chat/completions"

// DirectChat reports whether a chat request for the provider needs no per-attempt rewrite:
// it speaks OpenAI's API at the client's own path, so the router-level ext_proc can set its
// credential and model on a request that has one attempt, and the provider's own cluster runs
// no per-attempt ext_proc (one gRPC stream per request instead of two). A base path of its own
// (/openai/v1) would show in the access log's path, so such providers keep the attempt filter.
func (p *Provider) DirectChat() bool {
	return p.SpeaksOpenAI() && p.BasePath+"/chat/completions" == ChatPath
}

// AttemptFilter reports whether the provider's own cluster runs the per-attempt ext_proc. Only
// chat requests that need their rewrite there do: a provider the router-level filter rewrites
// for itself (DirectChat) needs none, and neither does a media-only provider, whose requests
// are the gateway's own task requests, already in its API.
func (p *Provider) AttemptFilter() bool { return !p.DirectChat() && !isMediaType(p.Type) }

// Ready reports whether the provider has what it needs to take traffic.
func (p *Provider) Ready() bool {
	if p.Type == ProviderTypeKling {
		return p.AccessKey != "" && p.SecretKey != ""
	}
	return !p.NeedsKey || p.APIKey != ""
}

// Model is a catalog entry with its providers in preference order.
type Model struct {
	ID                  string   `json:"id"`
	Name                string   `json:"name,omitempty"`
	Targets             []Target `json:"targets"`
	SupportedParameters []string `json:"supportedParameters,omitempty"`
	// Catalog facts (docs/money.md#catalog); xDS does not use them.
	InputModalities   []string `json:"inputModalities,omitempty"`
	OutputModalities  []string `json:"outputModalities,omitempty"`
	ContextLength     int64    `json:"contextLength,omitempty"`
	MaxOutputLength   int64    `json:"maxOutputLength,omitempty"`
	SupportedFeatures []string `json:"supportedFeatures,omitempty"`
	Pricing           Pricing  `json:"-"`
	// Family names the request shape of a media model (docs/media.md: V1, V2, V3, I1, ...);
	// empty for chat models. Variant picks one of the family's variants (V2: t2v | i2v).
	Family  string `json:"family,omitempty"`
	Variant string `json:"variant,omitempty"`
}

// Target is one provider that serves a model, under that provider's model name.
type Target struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// SupportedParameters overrides the model's list for this provider (nil: the model's).
	SupportedParameters []string `json:"supportedParameters,omitempty"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// knownTypes are the provider types ext_proc has an adapter for, in the order messages list them.
var knownTypes = []string{ProviderTypeOpenAI, ProviderTypeAnthropic, ProviderTypeGemini, ProviderTypeDemo, ProviderTypeMiniMax, ProviderTypeDashScope, ProviderTypeKling}

// MediaFamily is what a media model family needs and shows.
type MediaFamily struct {
	ProviderType string   // the provider type that serves it
	Variants     []string // the variants a model must name one of (none: no variant)
	Kind         string   // the task it makes: "video" (POST /v1/videos) or "image" (POST /v1/images)
	Output       []string // the catalog's output modalities
	Input        []string // the catalog's input modalities
	Feature      string   // the catalog's supported feature
}

// Task kinds: the endpoint a family's tasks are created at, and the object they are; KindChat
// is a model answering chat completions.
const (
	KindChat = "chat"

	KindVideo = "video"
	KindImage = "image"

	// KindEmbeddings is a model answering POST /v1/embeddings: its catalog entry's
	// output_modalities name "embeddings".
	KindEmbeddings = "embeddings"
)

// EmbeddingsPath is the client's embeddings path, the gateway's own.
const EmbeddingsPath = "/v1/embeddings"

// embeddingTypes are the provider types that serve embeddings models: OpenAI's API (and the
// demo model, which speaks it) as is, Gemini's batchEmbedContents translated.
var embeddingTypes = []string{ProviderTypeOpenAI, ProviderTypeDemo, ProviderTypeGemini}

// MediaFamilies are the media families the gateway serves (docs/media.md).
var MediaFamilies = map[string]MediaFamily{
	"V1":  {ProviderType: ProviderTypeMiniMax, Kind: KindVideo, Output: []string{"video"}, Input: []string{"text", "image"}, Feature: "video_generation"},
	"V3":  {ProviderType: ProviderTypeKling, Kind: KindVideo, Output: []string{"video"}, Input: []string{"text"}, Feature: "video_generation"},
	"V2":  {ProviderType: ProviderTypeDashScope, Kind: KindVideo, Variants: []string{"t2v", "i2v"}, Output: []string{"video"}, Input: []string{"text", "image"}, Feature: "video_generation"},
	"I1":  {ProviderType: ProviderTypeKling, Kind: KindImage, Output: []string{"image"}, Input: []string{"text"}, Feature: "image_generation"},
	"I2":  {ProviderType: ProviderTypeDashScope, Kind: KindImage, Variants: []string{"standard", "pro"}, Output: []string{"image"}, Input: []string{"text", "image"}, Feature: "image_generation"},
	"I2b": {ProviderType: ProviderTypeDashScope, Kind: KindImage, Variants: []string{"standard", "pro"}, Output: []string{"image"}, Input: []string{"text", "image"}, Feature: "image_generation"},
	"I3":  {ProviderType: ProviderTypeGemini, Kind: KindImage, Variants: []string{"pro", "flash-3.1", "flash-2.5"}, Output: []string{"image", "text"}, Input: []string{"text", "image"}, Feature: "image_generation"},
}

// Kind is the endpoint that creates m's answers: KindChat, or its family's task kind.
func (m *Model) Kind() string {
	if f, ok := MediaFamilies[m.Family]; ok {
		return f.Kind
	}
	if slices.Contains(m.OutputModalities, KindEmbeddings) {
		return KindEmbeddings
	}
	return KindChat
}

// ChatImageFamily is the media family whose models also answer chat completions
// (docs/api.md#provider-apis): Gemini's image models, with their images in the message.
const ChatImageFamily = "I3"

// Chats reports whether m answers chat completions: a chat model, or an image model of
// ChatImageFamily.
func (m *Model) Chats() bool { return m.Kind() == KindChat || m.Family == ChatImageFamily }

// mediaOnlyTypes are the provider types that serve media families and no chat (a Gemini
// provider serves both).
var mediaOnlyTypes = []string{ProviderTypeMiniMax, ProviderTypeDashScope, ProviderTypeKling}

// ProviderTypes lists the provider types a configuration may name.
func ProviderTypes() []string { return slices.Clone(knownTypes) }

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

// Validate checks names, references and types, reporting every problem at once.
func (g *Gateway) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format+": %w", append(args, ErrInvalid)...))
	}
	if g.Listener.Port == 0 {
		bad("listen.public: a port is required")
	}
	if g.Listener.XFFTrustedHops > MaxXFFTrustedHops {
		bad("listen.xff_num_trusted_hops %d: at most %d (the proxies in front of the gateway that append to x-forwarded-for)", g.Listener.XFFTrustedHops, MaxXFFTrustedHops)
	}
	if err := g.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := g.Tracing.Validate(); err != nil {
		errs = append(errs, err)
	}
	providers := make(map[string]bool, len(g.Providers))
	for _, p := range g.Providers {
		switch {
		case CheckProviderName(p.Name) != nil:
			bad("provider %s: %v", QuoteShort(p.Name), CheckProviderName(p.Name))
		case providers[p.Name]:
			bad("provider %q: defined twice", p.Name)
		case !slices.Contains(knownTypes, p.Type):
			bad("provider %q: unknown type %q (supported: %s)", p.Name, p.Type, strings.Join(knownTypes, ", "))
		case p.Host == "" || p.Port == 0:
			bad("provider %q: base_url is required", p.Name)
		case p.TLS && p.CAFile == "":
			bad("provider %q: no CA bundle to verify %s with; set ca_file", p.Name, p.Host)
		}
		providers[p.Name] = true
	}
	models := make(map[string]bool, len(g.Models))
	byID := make(map[string]*Model, len(g.Models))
	for i, m := range g.Models {
		byID[m.ID] = &g.Models[i]
		id := QuoteShort(m.ID)
		in := func(err error) {
			if err != nil {
				bad("model %s: %v", id, err)
			}
		}
		in(CheckModelID(m.ID))
		if models[m.ID] {
			bad("model %s: defined twice", id)
		}
		models[m.ID] = true
		in(CheckText("name", m.Name, MaxNameLength))
		in(checkTokens("supported_sampling_parameters", m.SupportedParameters))
		in(checkTokens("input_modalities", m.InputModalities))
		in(checkTokens("output_modalities", m.OutputModalities))
		in(checkTokens("supported_features", m.SupportedFeatures))
		if m.ContextLength < 0 || m.MaxOutputLength < 0 {
			bad("model %s: context_length and max_output_length are token counts: 0 (unknown) or positive", id)
		}
		if len(m.Targets) == 0 {
			bad("model %s: needs at least one provider", id)
		}
		if len(m.Targets) > MaxListLength {
			bad("model %s: has %d providers, at most %d", id, len(m.Targets), MaxListLength)
			continue
		}
		in(g.checkFamily(m))
		for _, t := range m.Targets {
			if !providers[t.Provider] {
				bad("model %s: provider %s is not defined under providers", id, QuoteShort(t.Provider))
			}
			if t.Model == "" {
				bad("model %s: provider %s needs the upstream model name (model:)", id, QuoteShort(t.Provider))
			} else {
				in(checkUpstreamModel(t.Model))
			}
			in(checkTokens("provider "+QuoteShort(t.Provider)+": supported_sampling_parameters", t.SupportedParameters))
		}
	}
	g.validateRoutes(models, byID, bad)
	return errors.Join(errs...)
}

// checkFamily: a media model names a known family (and variant) and every provider of it is of
// the family's type; a chat model has no media provider.
func (g *Gateway) checkFamily(m Model) error {
	types := map[string]string{}
	for _, p := range g.Providers {
		types[p.Name] = p.Type
	}
	f, media := MediaFamilies[m.Family]
	switch {
	case m.Family != "" && !media:
		return fmt.Errorf("family %s is unknown (supported: %s)", QuoteShort(m.Family), strings.Join(slices.Sorted(maps.Keys(MediaFamilies)), ", "))
	case media && len(f.Variants) > 0 && !slices.Contains(f.Variants, m.Variant):
		return fmt.Errorf("family %s needs variant: one of %s", m.Family, strings.Join(f.Variants, ", "))
	case media && len(f.Variants) == 0 && m.Variant != "":
		return fmt.Errorf("family %s has no variants; remove variant", m.Family)
	case m.Family == "" && m.Variant != "":
		return fmt.Errorf("variant %s needs a family", QuoteShort(m.Variant))
	case media && m.Family != ChatImageFamily && listsParameters(m):
		// The family's rules decide its fields, and the catalog lists them.
		return fmt.Errorf("family %s takes its own fields, which the catalog lists; remove supported_sampling_parameters", m.Family)
	case media && slices.Contains(m.OutputModalities, KindEmbeddings):
		return fmt.Errorf("family %s makes media, not embeddings; remove embeddings from output_modalities", m.Family)
	}
	if m.Kind() == KindEmbeddings {
		for _, t := range m.Targets {
			if typ, ok := types[t.Provider]; ok && !slices.Contains(embeddingTypes, typ) {
				return fmt.Errorf("an embeddings model is served by providers of type %s; provider %s is of type %s", strings.Join(embeddingTypes, ", "), QuoteShort(t.Provider), typ)
			}
		}
	}
	for _, t := range m.Targets {
		typ, ok := types[t.Provider]
		switch {
		case !ok:
		case media && typ != f.ProviderType:
			return fmt.Errorf("family %s is served by providers of type %s; provider %s is of type %s", m.Family, f.ProviderType, QuoteShort(t.Provider), typ)
		case !media && isMediaType(typ):
			return fmt.Errorf("provider %s (type %s) serves media models only: give the model its family (family: V1), or use a chat provider", QuoteShort(t.Provider), typ)
		}
	}
	return nil
}

func isMediaType(typ string) bool { return slices.Contains(mediaOnlyTypes, typ) }

// listsParameters reports whether m, or one of its provider entries, has its own
// supported_sampling_parameters.
func listsParameters(m Model) bool {
	return len(m.SupportedParameters) > 0 || slices.ContainsFunc(m.Targets, func(t Target) bool { return len(t.SupportedParameters) > 0 })
}

// PipelinedLength matches the content-length of a request body that Tollway's own Envoys send
// ext_proc chunk by chunk behind its headers (the pipelined protocol): a declared length under
// 1,000,000 bytes. Larger bodies, and bodies without a length, are buffered by Envoy and sent
// whole after ext_proc answered the headers, as before the pipelined protocol: a 28 MB body
// streamed chunk by chunk crashed Envoy 1.40 once in CI. The translator's routes and
// extproc's pipeline decide with this one expression.
const PipelinedLength = `^[0-9]{1,6}$`

var pipelinedLengthRE = regexp.MustCompile(PipelinedLength)

// Pipelined reports whether a request body of this content-length ("" for none) is pipelined.
func Pipelined(contentLength string) bool { return pipelinedLengthRE.MatchString(contentLength) }
