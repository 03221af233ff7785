package ir

// Catalog pricing (docs/money.md#prices) and what a request costs under it. Money is exact decimal
// (shopspring/decimal) end to end: prices are parsed from their decimal text and never pass
// through float64, so 1,000,000 × "0.00000015" is exactly "0.15".

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/shopspring/decimal"
)

// Price is one set of catalog prices in USD per unit (docs/money.md#prices). Zero means the model
// does not use that unit.
type Price struct {
	Prompt         decimal.Decimal // per input token
	Completion     decimal.Decimal // per output token
	InputCacheRead decimal.Decimal // per cached input token read
	Request        decimal.Decimal // per request
	Image          decimal.Decimal // per image
	Duration       decimal.Decimal // duration-based price (routes); not part of chat Cost
}

// Tier is one element of a tier-array pricing: it covers prompt token counts in
// [RangeStart, RangeEnd); RangeEnd nil means no upper bound.
type Tier struct {
	RangeStart int64
	RangeEnd   *int64
	Price
}

// Pricing is a model's parsed catalog pricing. It always holds at least one tier; a single-object
// config is one unbounded tier starting at 0.
//
// Tier rule: the tier is chosen by the request's prompt tokens (cached ones included). Tier i covers
// [range_start, range_end): start inclusive, end exclusive. The first tier starts at 0, each next
// tier starts where the previous one ended, and only the last tier has range_end null (it must:
// there is always a tier for any prompt size). The whole request is priced at the chosen tier's
// rates, as providers with long-context pricing do.
type Pricing struct {
	Tiers []Tier
	// tiered records that config used the array shape, so MarshalJSON gives back the shape it got.
	tiered bool
}

// Usage is what one request consumed. CachedTokens is the part of PromptTokens read from cache;
// ImageTokens the part of CompletionTokens that were images (Gemini's image models), which Cost
// bills per image instead when the model has an image price.
type Usage struct {
	PromptTokens, CompletionTokens, CachedTokens, Images, ImageTokens int64
}

var priceFields = []string{"prompt", "completion", "input_cache_read", "request", "image", "duration"}

func (p *Price) field(name string) *decimal.Decimal {
	switch name {
	case "prompt":
		return &p.Prompt
	case "completion":
		return &p.Completion
	case "input_cache_read":
		return &p.InputCacheRead
	case "request":
		return &p.Request
	case "image":
		return &p.Image
	case "duration":
		return &p.Duration
	}
	return nil
}

// ParsePricing reads pricing as a YAML or JSON decoder produced it: nil (free), a map (single
// object) or a slice of maps (tiers). Prices must be decimal strings or integers; floats are
// rejected because the decoder has already rounded them.
func ParsePricing(v any) (Pricing, error) {
	switch t := v.(type) {
	case nil:
		return Pricing{Tiers: []Tier{{}}}, nil
	case map[string]any, map[any]any:
		m, err := stringMap(t, "pricing")
		if err != nil {
			return Pricing{}, err
		}
		price, err := parsePrice(m, "pricing", false)
		if err != nil {
			return Pricing{}, err
		}
		return Pricing{Tiers: []Tier{{Price: price}}}, nil
	case []any:
		return parseTiers(t)
	default:
		return Pricing{}, fmt.Errorf("pricing must be an object {prompt: \"0.00000015\", ...} or an array of tiers, not %s", kind(v))
	}
}

func parseTiers(items []any) (Pricing, error) {
	if len(items) == 0 {
		return Pricing{}, errors.New("pricing is an empty array: give at least one tier, or a single object")
	}
	p := Pricing{Tiers: make([]Tier, len(items)), tiered: true}
	for i, item := range items {
		where := fmt.Sprintf("pricing[%d]", i)
		m, err := stringMap(item, where)
		if err != nil {
			return Pricing{}, err
		}
		tier := &p.Tiers[i]
		if tier.Price, err = parsePrice(m, where, true); err != nil {
			return Pricing{}, err
		}
		rs, ok := m["range_start"]
		if !ok {
			return Pricing{}, fmt.Errorf("%s.range_start is missing: every tier needs range_start (the first one 0)", where)
		}
		if tier.RangeStart, err = tokenCount(rs, where+".range_start"); err != nil {
			return Pricing{}, err
		}
		// A missing range_end reads as null, so the last tier can omit it.
		if re := m["range_end"]; re != nil {
			end, err := tokenCount(re, where+".range_end")
			if err != nil {
				return Pricing{}, err
			}
			tier.RangeEnd = &end
		}
	}
	return p, p.checkTiers()
}

func (p Pricing) checkTiers() error {
	next := int64(0)
	for i, t := range p.Tiers {
		where := fmt.Sprintf("pricing[%d]", i)
		if t.RangeStart != next {
			if i == 0 {
				return fmt.Errorf("%s.range_start is %d: the first tier must start at 0", where, t.RangeStart)
			}
			return fmt.Errorf("%s.range_start is %d: tiers must not overlap or leave gaps, so it must be %d (pricing[%d].range_end)",
				where, t.RangeStart, next, i-1)
		}
		last := i == len(p.Tiers)-1
		switch {
		case t.RangeEnd == nil && !last:
			return fmt.Errorf("%s.range_end is null but only the last tier may be unbounded: set range_end", where)
		case t.RangeEnd != nil && last:
			return fmt.Errorf("%s.range_end is %d: the last tier must have range_end null so every prompt size has a price", where, *t.RangeEnd)
		case t.RangeEnd != nil && *t.RangeEnd <= t.RangeStart:
			return fmt.Errorf("%s.range_end is %d: it must be greater than range_start %d", where, *t.RangeEnd, t.RangeStart)
		}
		if t.RangeEnd != nil {
			next = *t.RangeEnd
		}
	}
	return nil
}

func parsePrice(m map[string]any, where string, tier bool) (Price, error) {
	var price Price
	for _, name := range sortedKeys(m) {
		if tier && (name == "range_start" || name == "range_end") {
			continue
		}
		dst := price.field(name)
		if dst == nil {
			allowed := strings.Join(priceFields, ", ")
			if tier {
				allowed = "range_start, range_end, " + allowed
			} else if name == "range_start" || name == "range_end" {
				return Price{}, fmt.Errorf("%s.%s is only valid in a tier array: write pricing as [{range_start: 0, range_end: ..., prompt: ...}, ...]", where, name)
			}
			return Price{}, fmt.Errorf("%s has unknown field %s: allowed fields are %s", where, QuoteShort(name), allowed)
		}
		d, err := parseMoney(m[name], where+"."+name)
		if err != nil {
			return Price{}, err
		}
		*dst = d
	}
	return price, nil
}

// parseMoney accepts plain decimal text (digits, optionally one point) and integers. No exponent
// form: it would allow "1e999999999", which renders as a billion digits.
func parseMoney(v any, where string) (decimal.Decimal, error) {
	var text string
	switch t := v.(type) {
	case string:
		text = t
	case json.Number:
		text = t.String()
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		text = fmt.Sprint(t) // integer formatting is exact
	case float32, float64:
		return decimal.Decimal{}, fmt.Errorf("%s is the number %v: prices are exact decimals, so write them as strings in quotes, e.g. prompt: \"0.00000015\" (a YAML/JSON float has already lost precision)", where, t)
	case nil:
		return decimal.Decimal{}, fmt.Errorf("%s is null: write \"0\" if the model does not use this unit", where)
	default:
		return decimal.Decimal{}, fmt.Errorf("%s is %s: write a decimal string such as \"0.00000015\"", where, kind(v))
	}
	if strings.HasPrefix(text, "-") {
		return decimal.Decimal{}, fmt.Errorf("%s is %s: prices cannot be negative", where, QuoteShort(text))
	}
	if !PlainDecimal(text) {
		return decimal.Decimal{}, fmt.Errorf("%s is %s: write a plain decimal such as \"0.00000015\" (digits and at most one point, no exponent, at most %d digits before the point and %d after)",
			where, QuoteShort(text), MaxAmountIntegerDigits, MaxAmountFractionDigits)
	}
	d, err := decimal.NewFromString(text)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%s: %w", where, err)
	}
	return d, nil
}

// Bounds of an amount as written (prices, credits, limits): room for any price per unit and any
// balance, while arithmetic on a hostile value (a million digits) stays cheap.
const (
	MaxAmountIntegerDigits  = 15
	MaxAmountFractionDigits = 30
)

// PlainDecimal reports whether s is an amount as operators write it: digits with at most one
// point, no sign, no exponent, within the digit bounds.
func PlainDecimal(s string) bool {
	whole, frac, point := strings.Cut(s, ".")
	return whole != "" && len(whole) <= MaxAmountIntegerDigits && len(frac) <= MaxAmountFractionDigits &&
		(!point || frac != "") && allDigits(whole) && allDigits(frac)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// tokenCount reads a range bound. Token counts are not money, so a float is accepted when it is an
// exact integer (what encoding/json gives for 128000 without UseNumber).
func tokenCount(v any, where string) (int64, error) {
	var n int64
	switch t := v.(type) {
	case int:
		n = int64(t)
	case int8:
		n = int64(t)
	case int16:
		n = int64(t)
	case int32:
		n = int64(t)
	case int64:
		n = t
	case uint:
		return tokenCount(uint64(t), where)
	case uint8:
		n = int64(t)
	case uint16:
		n = int64(t)
	case uint32:
		n = int64(t)
	case uint64:
		if t > math.MaxInt64 {
			return 0, fmt.Errorf("%s is %d: too large", where, t)
		}
		n = int64(t)
	case json.Number:
		i, err := t.Int64()
		if err != nil {
			return 0, fmt.Errorf("%s is %s: it must be an integer token count", where, QuoteShort(t.String()))
		}
		n = i
	case float64:
		if t != math.Trunc(t) || math.Abs(t) > 1<<53 {
			return 0, fmt.Errorf("%s is %v: it must be an integer token count", where, t)
		}
		n = int64(t)
	default:
		return 0, fmt.Errorf("%s is %s: it must be an integer token count", where, kind(v))
	}
	if n < 0 {
		return 0, fmt.Errorf("%s is %d: token counts cannot be negative", where, n)
	}
	return n, nil
}

func stringMap(v any, where string) (map[string]any, error) {
	switch t := v.(type) {
	case map[string]any:
		return t, nil
	case map[any]any: // yaml.v2-style decoders
		m := make(map[string]any, len(t))
		for k, val := range t {
			s, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s has a non-string key %v", where, k)
			}
			m[s] = val
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s must be an object with price fields, not %s", where, kind(v))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic: the first bad field is always the same one
	return keys
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any, map[any]any:
		return "an object"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, json.Number:
		return "a number"
	}
	return "a value of another kind" // the decoder's own types have no name in the config
}

// Tiered reports whether the pricing was configured as a tier array.
func (p Pricing) Tiered() bool { return p.tiered }

// TierFor returns the tier that prices a request with this many prompt tokens.
func (p Pricing) TierFor(promptTokens int64) Tier {
	if len(p.Tiers) == 0 { // zero Pricing: free
		return Tier{}
	}
	// Tiers are contiguous from 0 and the last is unbounded, so the first tier whose end is past
	// promptTokens is the one.
	for _, t := range p.Tiers {
		if t.RangeEnd == nil || promptTokens < *t.RangeEnd {
			return t
		}
	}
	return p.Tiers[len(p.Tiers)-1]
}

// Cost prices a finished request. Cached tokens are billed at input_cache_read; when that price is
// 0 the model has no cache pricing (docs/money.md#prices: 0 means the unit is not used), so they
// are billed as ordinary prompt tokens. Output tokens that were images are billed per image when
// the model has an image price and images were billed (the two units differ, so the tokens are
// split off); otherwise they are output like the rest, at the completion price: never both.
// Negative counts are treated as 0, CachedTokens is capped at PromptTokens and ImageTokens at
// CompletionTokens, so a bogus upstream usage block can never produce a negative or credited cost.
func (p Pricing) Cost(u Usage) decimal.Decimal {
	t := p.TierFor(max(u.PromptTokens, 0))
	return p.TokenCost(u).Add(t.Request).Add(t.Image.Mul(decimal.NewFromInt(max(u.Images, 0))))
}

// TokenCost is the tokens' part of Cost: prompt, cached and completion tokens at their prices,
// without the request and image prices (what usage a request ran on another model costs: an
// Anthropic advisor's iterations are not requests of their own).
func (p Pricing) TokenCost(u Usage) decimal.Decimal {
	prompt := max(u.PromptTokens, 0)
	cached := min(max(u.CachedTokens, 0), prompt)
	t := p.TierFor(prompt)
	if t.InputCacheRead.IsZero() {
		cached = 0
	}
	completion := max(u.CompletionTokens, 0)
	if !t.Image.IsZero() && u.Images > 0 {
		completion -= min(max(u.ImageTokens, 0), completion)
	}
	return t.Prompt.Mul(decimal.NewFromInt(prompt - cached)).
		Add(t.InputCacheRead.Mul(decimal.NewFromInt(cached))).
		Add(t.Completion.Mul(decimal.NewFromInt(completion)))
}

// WorstCase is the most a chat request can cost before it runs: the full completion budget,
// and no cache hits or all of the prompt read from cache, whichever costs more (cache reads are
// usually cheaper, but a catalog may price them higher or price only them; the cost is linear
// in the cached count, so the two ends bound every mix). The tier is known because the prompt
// size is.
func (p Pricing) WorstCase(promptTokens, maxCompletion int64) decimal.Decimal {
	u := Usage{PromptTokens: promptTokens, CompletionTokens: maxCompletion}
	none := p.Cost(u)
	u.CachedTokens = promptTokens
	return decimal.Max(none, p.Cost(u))
}

// TaskCost prices a finished media task: Cost (tokens, images, the request) plus duration for
// every second of video produced.
func (p Pricing) TaskCost(u Usage, seconds decimal.Decimal) decimal.Decimal {
	if seconds.IsNegative() {
		seconds = decimal.Zero
	}
	return p.Cost(u).Add(p.TierFor(max(u.PromptTokens, 0)).Duration.Mul(seconds))
}

// TaskWorstCase is the most a media task can cost before it runs: WorstCase of its tokens
// (zero for families not billed by tokens), every image it may produce and the longest video
// it may last.
func (p Pricing) TaskWorstCase(promptTokens, maxCompletion, maxImages, maxSeconds int64) decimal.Decimal {
	t := p.TierFor(promptTokens)
	return p.WorstCase(promptTokens, maxCompletion).
		Add(t.Image.Mul(decimal.NewFromInt(max(maxImages, 0)))).
		Add(t.Duration.Mul(decimal.NewFromInt(max(maxSeconds, 0))))
}

// IsFree reports whether every price of every tier is zero.
func (p Pricing) IsFree() bool {
	for _, t := range p.Tiers {
		for _, name := range priceFields {
			if !t.field(name).IsZero() {
				return false
			}
		}
	}
	return true
}

// MarshalJSON writes every field (prices as decimal strings, "0" when unused) in the shape the
// pricing was configured with: one object, or an array of tiers with range_end null when unbounded.
func (p Pricing) MarshalJSON() ([]byte, error) {
	if !p.tiered {
		return json.Marshal(p.TierFor(0).Price)
	}
	return json.Marshal(p.Tiers)
}

// UnmarshalJSON parses with the same rules as ParsePricing; numbers are kept as their text.
func (p *Pricing) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	parsed, err := ParsePricing(v)
	if err != nil {
		return err
	}
	*p = parsed
	return nil
}

// MarshalJSON renders every price through String rather than decimal's own MarshalJSON, whose
// quoting depends on the package-global decimal.MarshalJSONWithoutQuotes.
func (p Price) MarshalJSON() ([]byte, error) { return json.Marshal(p.wire()) }

// MarshalJSON flattens the prices into the tier object. Without it Tier would inherit Price's
// MarshalJSON and lose its range.
func (t Tier) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		RangeStart int64  `json:"range_start"`
		RangeEnd   *int64 `json:"range_end"`
		priceWire
	}{t.RangeStart, t.RangeEnd, t.Price.wire()})
}

type priceWire struct {
	Prompt         string `json:"prompt"`
	Completion     string `json:"completion"`
	InputCacheRead string `json:"input_cache_read"`
	Request        string `json:"request"`
	Image          string `json:"image"`
	Duration       string `json:"duration"`
}

func (p Price) wire() priceWire {
	return priceWire{
		Prompt: p.Prompt.String(), Completion: p.Completion.String(), InputCacheRead: p.InputCacheRead.String(),
		Request: p.Request.String(), Image: p.Image.String(), Duration: p.Duration.String(),
	}
}
