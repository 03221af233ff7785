package x402

// Config-side types (the x402: block, decoded by the app with mapstructure) and the offer they
// compile to: the Requirements an endpoint advertises, with USD prices converted exactly to the
// asset's atomic units. Prices are USD amounts of a USD stablecoin (1 token = 1 USD); an asset
// worth anything else is not supported.

import (
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/shopspring/decimal"
)

// Scheme names.
const (
	SchemeExact = "exact" // EIP-3009 transferWithAuthorization of the signed amount
	SchemeUpto  = "upto"  // Permit2 witness transfer of up to a signed cap
)

// DefaultMaxTimeoutSeconds is an option's maxTimeoutSeconds when the config omits it. Clients
// sign credentials valid for that long: a signature, a retry and a slow wallet, and a
// settlement whose answer took the whole default facilitator timeout (60 s) can still be asked
// again before the credential expires (see ShortWindows).
const DefaultMaxTimeoutSeconds = 120

// Bounds of max_timeout_seconds: the facilitator refuses a credential valid for less than 6 s
// more, and the gateway keeps each used credential until it expires.
const (
	minTimeoutSeconds = 10
	maxTimeoutSeconds = 3600
)

// ChatTarget is the business API whose requests have a worst-case cost (the quote an exact
// option without a price charges).
const ChatTarget = "/v1/chat/completions"

// Config is the x402: block.
type Config struct {
	// PayURL is the public prefix of the paid URLs: {pay_url}/x402/{slug} (resource.url).
	PayURL string `mapstructure:"pay_url"`
	// FacilitatorURL is the x402 facilitator's HTTP API (/verify, /settle, /supported).
	FacilitatorURL string `mapstructure:"facilitator_url"`
	// FacilitatorTimeout bounds each call to the facilitator (verify, settle, supported); zero
	// means DefaultTimeout (the app's config refuses an explicit 0).
	FacilitatorTimeout time.Duration `mapstructure:"facilitator_timeout"`
	Endpoints          []Endpoint    `mapstructure:"endpoints"`
}

// Bounds of facilitator_timeout: a client waits that long for its answer at most twice (verify,
// settle), and Envoy waits at most 3 minutes for one ext_proc answer.
const (
	MinFacilitatorTimeout = time.Second
	MaxFacilitatorTimeout = 150 * time.Second
)

// Endpoint is one paid endpoint.
type Endpoint struct {
	Slug   string `mapstructure:"slug"`
	Target string `mapstructure:"target"` // the business API it runs, e.g. /v1/chat/completions
	// Models the paid request may use; empty means any.
	Models []string `mapstructure:"models"`
	// RequireKey: an ale- key is needed as well (docs/x402.md: payment does not replace a key).
	RequireKey bool     `mapstructure:"require_key"`
	Accepts    []Accept `mapstructure:"accepts"`
	// RateLimits cap each payer's (address's) requests and tokens per minute on the endpoint,
	// checked before the facilitator verifies anything; unset: no limit.
	RateLimits RateLimits `mapstructure:"rate_limits"`
}

// RateLimits are an endpoint's rates per payer; nil is no limit.
type RateLimits struct {
	RequestsPerMinute *int64 `mapstructure:"requests_per_minute"`
	TokensPerMinute   *int64 `mapstructure:"tokens_per_minute"`
}

// MaxRate bounds a rate per minute (store.MaxRate).
const MaxRate = 1_000_000_000

// Accept is one payment option as configured.
type Accept struct {
	Scheme  string `mapstructure:"scheme"`
	Network string `mapstructure:"network"` // eip155:<chain id>
	Asset   string `mapstructure:"asset"`   // token contract
	PayTo   string `mapstructure:"pay_to"`
	// Price (exact) is the USD price; omitted on a chat endpoint, each request is quoted its
	// worst-case cost. MaxPrice (upto) is the USD cap the client signs; the actual cost is settled.
	Price    string `mapstructure:"price"`
	MaxPrice string `mapstructure:"max_price"`
	// AssetDecimals converts USD to atomic units (USDC: 6). Required: a forgotten 6 would
	// price USDC a million times too low.
	AssetDecimals *int `mapstructure:"asset_decimals"`
	// Extra is passed to clients as given: exact needs the token's EIP-712 domain {name,
	// version}; upto needs facilitatorAddress (the facilitator's signer).
	Extra map[string]any `mapstructure:"extra"`
	// MaxTimeoutSeconds is how long a credential may be valid (default 60).
	MaxTimeoutSeconds int `mapstructure:"max_timeout_seconds"`
}

// extraKeys are the extra members x402 defines, by their lower-case spelling: viper lower-cases
// every key it reads, and clients look for facilitatorAddress, not facilitatoraddress.
var extraKeys = map[string]string{
	"name": "name", "version": "version",
	"facilitatoraddress": "facilitatorAddress", "assettransfermethod": "assetTransferMethod",
}

var (
	slugRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$`)
	priceRE   = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})(\.[0-9]{1,36})?$`)
	networkRE = regexp.MustCompile(`^eip155:([1-9][0-9]{0,15})$`)
	targetRE  = regexp.MustCompile(`^/v1/[a-z0-9/_-]+$`)
)

// Validate reports every problem at once, each naming its YAML path under x402. A config with
// no endpoints is valid (x402 is off).
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, refuse(ErrConfig, "invalid_config", "x402."+format, args...))
	}
	if d := c.FacilitatorTimeout; d != 0 && (d < MinFacilitatorTimeout || d > MaxFacilitatorTimeout) {
		bad("facilitator_timeout is %v: use %v to %v (default %v); it bounds each call to the facilitator, and a paid request waits for up to two of them", d, MinFacilitatorTimeout, MaxFacilitatorTimeout, DefaultTimeout)
	}
	if len(c.Endpoints) == 0 {
		return errors.Join(errs...)
	}
	if err := checkURL(c.PayURL); err != nil {
		bad("pay_url %q: %v; write the public prefix clients call, e.g. http://127.0.0.1:8080", c.PayURL, err)
	}
	if err := checkURL(c.FacilitatorURL); err != nil {
		bad("facilitator_url %q: %v; write the facilitator's base URL, e.g. http://127.0.0.1:4020", c.FacilitatorURL, err)
	}
	seen := map[string]int{}
	for i, e := range c.Endpoints {
		if j, dup := seen[e.Slug]; dup && e.Slug != "" {
			bad("endpoints[%d].slug %q: endpoints[%d] has it too; each paid endpoint needs its own", i, e.Slug, j)
		}
		seen[e.Slug] = i
		errs = append(errs, e.validate(fmt.Sprintf("x402.endpoints[%d]", i))...)
	}
	return errors.Join(errs...)
}

// retryWindow is how long a credential must stay valid after a settlement that used the whole
// facilitator timeout for it to be asked again: a facilitator refuses a credential with less
// than 6 s left, and the gateway asks again after a pause.
const retryWindow = 16 * time.Second

// ShortWindows names the options (YAML paths) whose credentials expire too soon for a
// settlement whose answer timed out to be asked again: it would end unpaid even if it settled.
func (c *Config) ShortWindows() []string {
	timeout := c.FacilitatorTimeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	var out []string
	for i, e := range c.Endpoints {
		for j, a := range e.Accepts {
			window := a.MaxTimeoutSeconds
			if window == 0 {
				window = DefaultMaxTimeoutSeconds
			}
			if time.Duration(window)*time.Second < timeout+retryWindow {
				out = append(out, fmt.Sprintf("x402.endpoints[%d].accepts[%d]: max_timeout_seconds %d is under facilitator_timeout %v + %v", i, j, window, timeout, retryWindow))
			}
		}
	}
	return out
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return errors.New("is not an http(s) URL")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("must not have a query, fragment or user info")
	}
	return nil
}

// Validate reports every problem of the endpoint, paths under x402.endpoints[?].
func (e *Endpoint) Validate() error {
	return errors.Join(e.validate("x402.endpoints[" + e.Slug + "]")...)
}

func (e *Endpoint) validate(path string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, refuse(ErrConfig, "invalid_config", path+"."+format, args...))
	}
	if !slugRE.MatchString(e.Slug) {
		bad("slug %q: use 1 to 64 lower-case letters, digits and inner hyphens, e.g. chat-mini (served at {pay_url}/x402/{slug})", e.Slug)
	}
	if !targetRE.MatchString(e.Target) {
		bad("target %q: name the business API path this endpoint runs, e.g. %s", e.Target, ChatTarget)
	}
	for j, m := range e.Models {
		if strings.TrimSpace(m) == "" || contains(e.Models[:j], m) {
			bad("models[%d] %q: list each model id once, or omit models to allow any", j, m)
		}
	}
	if len(e.Accepts) == 0 {
		bad("accepts: list at least one payment option (scheme exact or upto)")
	}
	for j, a := range e.Accepts {
		errs = append(errs, a.validate(fmt.Sprintf("%s.accepts[%d]", path, j), e.Target)...)
	}
	for _, r := range []struct {
		name string
		v    *int64
	}{{"requests_per_minute", e.RateLimits.RequestsPerMinute}, {"tokens_per_minute", e.RateLimits.TokensPerMinute}} {
		if r.v != nil && (*r.v < 1 || *r.v > MaxRate) {
			bad("rate_limits.%s %d: give a whole number from 1 to %d per minute for each payer, or leave it out for no limit", r.name, *r.v, MaxRate)
		}
	}
	return errs
}

func (a *Accept) validate(path, target string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, refuse(ErrConfig, "invalid_config", path+"."+format, args...))
	}
	if a.Scheme != SchemeExact && a.Scheme != SchemeUpto {
		bad("scheme %q: use exact (EIP-3009, the signed amount) or upto (Permit2, the actual cost up to max_price)", a.Scheme)
	}
	if _, ok := chainID(a.Network); !ok {
		bad("network %q: write a CAIP-2 EVM network, eip155:<chain id>, e.g. eip155:8453 (Base) or eip155:84532 (Base Sepolia)", a.Network)
	}
	if err := checkAddress(a.Asset); err != nil {
		bad("asset %q: %v; write the token contract's address, e.g. USDC's", a.Asset, err)
	}
	if err := checkAddress(a.PayTo); err != nil {
		bad("pay_to %q: %v; write the address that receives payments", a.PayTo, err)
	}
	decimals := 0
	switch {
	case a.AssetDecimals == nil:
		bad("asset_decimals: required; write the token's decimals() (USDC: 6)")
	case *a.AssetDecimals < 0 || *a.AssetDecimals > 36:
		bad("asset_decimals %d: write the token's decimals() (USDC: 6), 0 to 36", *a.AssetDecimals)
	default:
		decimals = *a.AssetDecimals
	}
	if a.MaxTimeoutSeconds != 0 && (a.MaxTimeoutSeconds < minTimeoutSeconds || a.MaxTimeoutSeconds > maxTimeoutSeconds) {
		bad("max_timeout_seconds %d: use %d to %d (default %d)", a.MaxTimeoutSeconds, minTimeoutSeconds, maxTimeoutSeconds, DefaultMaxTimeoutSeconds)
	}
	checkPrice := func(key, p string) {
		d := decimals
		if a.AssetDecimals == nil {
			d = 36 // the format only
		}
		if _, err := atomicExact(p, d); err != nil {
			bad("%s %q: %v", key, p, err)
		}
	}
	extra := canonicalExtra(a.Extra)
	switch a.Scheme {
	case SchemeExact:
		if a.MaxPrice != "" {
			bad("max_price: only upto options have a cap; write price for exact")
		}
		if a.Price != "" {
			checkPrice("price", a.Price)
		} else if target != ChatTarget {
			bad("price: required for exact on %s (only a chat request has a worst-case cost to quote when price is omitted)", target)
		}
		for _, k := range []string{"name", "version"} {
			if s, ok := extra[k].(string); !ok || s == "" {
				bad("extra.%s: exact needs the token's EIP-712 domain %s as text (USDC: name USDC or \"USD Coin\", version \"2\"); read it from the token contract", k, k)
			}
		}
		if m, ok := extra["assetTransferMethod"]; ok && m != "eip3009" {
			bad("extra.assetTransferMethod %v: exact is accepted as EIP-3009 only; remove it or write eip3009", m)
		}
	case SchemeUpto:
		if a.Price != "" {
			bad("price: upto settles the actual cost up to max_price; write max_price instead")
		}
		if a.MaxPrice == "" {
			bad("max_price: required for upto (the most a request may cost, in USD)")
		} else {
			checkPrice("max_price", a.MaxPrice)
		}
		f, ok := extra["facilitatorAddress"].(string)
		if !ok {
			bad("extra.facilitatorAddress: required for upto; write the facilitator's signer address (its /supported lists it)")
		} else if err := checkAddress(f); err != nil {
			bad("extra.facilitatorAddress %q: %v", f, err)
		}
	}
	if _, err := json.Marshal(extra); err != nil {
		bad("extra: must be plain values (text, numbers, lists, mappings): %v", err)
	}
	return errs
}

// chainID reads eip155:<chain id>; chain ids are kept to JavaScript's safe integers, as clients
// require.
func chainID(network string) (*big.Int, bool) {
	m := networkRE.FindStringSubmatch(network)
	if m == nil {
		return nil, false
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil || n > 1<<53-1 {
		return nil, false
	}
	return new(big.Int).SetUint64(n), true
}

// canonicalExtra restores x402's spelling of the keys it defines (see extraKeys); other keys
// pass as given.
func canonicalExtra(extra map[string]any) map[string]any {
	out := make(map[string]any, len(extra))
	for k, v := range extra {
		if c, ok := extraKeys[strings.ToLower(k)]; ok {
			k = c
		}
		out[k] = v
	}
	return out
}

// atomicExact converts a USD decimal to atomic units exactly: it refuses a price with more
// decimal places than the asset has, never rounding money.
func atomicExact(usd string, decimals int) (*big.Int, error) {
	if !priceRE.MatchString(usd) {
		return nil, errors.New("write a plain decimal number of USD in quotes, e.g. \"0.01\"")
	}
	d := decimal.RequireFromString(usd)
	if d.Sign() <= 0 {
		return nil, errors.New("must be more than 0 (a free endpoint needs no payment)")
	}
	a := d.Shift(int32(decimals))
	if !a.IsInteger() {
		return nil, fmt.Errorf("has more decimal places than the asset's %d (asset_decimals): it would have to be rounded", decimals)
	}
	return a.BigInt(), nil
}

// AtomicCeil converts a USD amount to atomic units rounded up to the next unit (a per-request
// quote or an actual cost never undercharges by a fraction of a unit). Negative is an error.
func AtomicCeil(usd decimal.Decimal, decimals int) (*big.Int, error) {
	if usd.Sign() < 0 {
		return nil, fmt.Errorf("x402: amount %s USD is negative: %w", usd, ErrQuote)
	}
	return usd.Shift(int32(decimals)).Ceil().BigInt(), nil
}

// Offer is an endpoint compiled once per config: every option's requirement with its amount in
// atomic units, or priced per request. It is immutable and safe for concurrent use.
type Offer struct {
	Endpoint Endpoint
	Resource Resource // resource.url = {pay_url}/x402/{slug}
	options  []option
}

type option struct {
	req      Requirements // Amount "" when quoted per request
	decimals int
}

// NewOffers validates c and compiles each endpoint, by slug.
func (c *Config) NewOffers() (map[string]*Offer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	out := make(map[string]*Offer, len(c.Endpoints))
	for _, e := range c.Endpoints {
		o, err := newOffer(strings.TrimRight(c.PayURL, "/"), e)
		if err != nil {
			return nil, err
		}
		out[e.Slug] = o
	}
	return out, nil
}

func newOffer(payURL string, e Endpoint) (*Offer, error) {
	o := &Offer{
		Endpoint: e,
		Resource: Resource{URL: payURL + "/x402/" + e.Slug, Description: "Tollway " + e.Target + " (x402 endpoint " + e.Slug + ")"},
	}
	for _, a := range e.Accepts {
		extra, err := json.Marshal(canonicalExtra(a.Extra), json.Deterministic(true))
		if err != nil {
			return nil, fmt.Errorf("x402: endpoint %s: extra: %v: %w", e.Slug, err, ErrConfig)
		}
		timeout := a.MaxTimeoutSeconds
		if timeout == 0 {
			timeout = DefaultMaxTimeoutSeconds
		}
		r := Requirements{Scheme: a.Scheme, Network: a.Network, Asset: checksum(a.Asset), PayTo: checksum(a.PayTo),
			MaxTimeoutSeconds: int64(timeout), Extra: jsontext.Value(extra)}
		price := a.Price
		if a.Scheme == SchemeUpto {
			price = a.MaxPrice
		}
		if price != "" {
			amt, err := atomicExact(price, *a.AssetDecimals)
			if err != nil {
				return nil, fmt.Errorf("x402: endpoint %s: %v: %w", e.Slug, err, ErrConfig)
			}
			r.Amount = amt.String()
		}
		o.options = append(o.options, option{req: r, decimals: *a.AssetDecimals})
	}
	return o, nil
}

// Decimals is the asset decimals of option i (what converts its atomic amounts to USD).
func (o *Offer) Decimals(i int) int { return o.options[i].decimals }

// NeedsQuote reports whether Requirements needs the request's worst-case cost (an exact option
// without a price), so the gateway computes it only then.
func (o *Offer) NeedsQuote() bool {
	for _, op := range o.options {
		if op.req.Amount == "" {
			return true
		}
	}
	return false
}

// Requirements are the options this request is offered, in config order (Match's index is an
// index into them and into the config's accepts). quoteUSD, the request's worst-case cost, prices
// the exact options without a price, rounded up to the next atomic unit; it is ignored when
// NeedsQuote is false and must then be more than 0.
func (o *Offer) Requirements(quoteUSD decimal.Decimal) ([]Requirements, error) {
	out := make([]Requirements, len(o.options))
	for i, op := range o.options {
		out[i] = op.req
		if op.req.Amount != "" {
			continue
		}
		amt, err := AtomicCeil(quoteUSD, op.decimals)
		if err != nil {
			return nil, err
		}
		if amt.Sign() == 0 {
			return nil, fmt.Errorf("x402: endpoint %s prices accepts[%d] per request and this request's quote is 0: %w", o.Endpoint.Slug, i, ErrQuote)
		}
		out[i].Amount = amt.String()
	}
	return out, nil
}

// PaymentRequired is the 402 for offered (from Requirements); reason, when not empty, says why
// the previous credential was refused.
func (o *Offer) PaymentRequired(offered []Requirements, reason string) PaymentRequired {
	return PaymentRequired{X402Version: Version, Error: reason, Resource: o.Resource, Accepts: offered}
}

// Charge is the requirement to settle upto option i for a request whose actual cost is costUSD:
// the offered requirement with amount = the cost in atomic units rounded up, at most the signed
// cap (capped reports that the cost was more). An amount of "0" must not be sent to /settle: the
// gateway keeps the credential burned locally instead. Exact settles the offered requirement
// itself and needs no Charge.
func (o *Offer) Charge(i int, costUSD decimal.Decimal) (settle Requirements, capped bool, err error) {
	if i < 0 || i >= len(o.options) || o.options[i].req.Scheme != SchemeUpto {
		return Requirements{}, false, fmt.Errorf("x402: Charge is for an upto option of endpoint %s, not option %d: %w", o.Endpoint.Slug, i, ErrQuote)
	}
	settle = o.options[i].req
	amt, err := AtomicCeil(costUSD, o.options[i].decimals)
	if err != nil {
		return Requirements{}, false, err
	}
	limit, _ := new(big.Int).SetString(settle.Amount, 10) // compiled from a checked price
	if amt.Cmp(limit) > 0 {
		amt, capped = limit, true
	}
	settle.Amount = amt.String()
	return settle, capped, nil
}
