package ir

// Fuzz target of catalog pricing: parsing (from YAML as the config gives it, from JSON as the
// store and the admin API give it), the round trip through the store, and what a request costs.

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"

	"github.com/tollway/tollway/test/fuzzcheck"
)

// FuzzPricing parses arbitrary pricing, as YAML (asYAML) or JSON, and prices a fuzzed usage.
// A refusal has no Go vocabulary. Accepted pricing survives marshal -> parse unchanged and
// marshals to the same bytes again; every price is exactly the decimal text written (a YAML
// float, already rounded by the decoder, is never accepted); a cost is never negative, never
// falls when the answer grows, and never exceeds the worst case the hold was taken for.
func FuzzPricing(f *testing.F) {
	for _, s := range []string{
		`{prompt: "0.00000015", completion: "0.0000006", input_cache_read: "0.000000075", request: 0, image: 1}`,
		longContext,
		`[{range_start: 0, range_end: 10, prompt: "1"}, {range_start: 10, prompt: "2", input_cache_read: "3"}]`,
		`{prompt: 0.5}`,
		`{prompt: "1e-7"}`,
		`[{range_start: 0, range_end: 1.5}, {range_start: 1.5}]`,
	} {
		f.Add([]byte(s), true, int64(1000), int64(500), int64(400), int64(0))
	}
	for _, s := range []string{
		`{"prompt":"0.000003","completion":"0.000015","input_cache_read":"0.0000003"}`,
		`[{"range_start":0,"range_end":128000,"prompt":"0.000001"},{"range_start":128000,"range_end":null,"prompt":"0.000002"}]`,
		`{"prompt":0.25,"request":3}`,
		`null`,
	} {
		f.Add([]byte(s), false, int64(200000), int64(10), int64(-3), int64(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, asYAML bool, prompt, completion, cached, images int64) {
		var v any
		var p Pricing
		var err error
		if asYAML {
			if yaml.Unmarshal(in, &v) != nil {
				return
			}
			p, err = ParsePricing(v)
		} else {
			err = p.UnmarshalJSON(in)
			dec := json.NewDecoder(bytes.NewReader(in))
			dec.UseNumber()
			_ = dec.Decode(&v)
		}
		if err != nil {
			if leak := fuzzcheck.Leak(err.Error()); leak != "" {
				t.Fatalf("refusal shows Go vocabulary %q: %v", leak, err)
			}
			return
		}
		checkExact(t, v, p)
		checkRoundTrip(t, p)
		checkCost(t, p, Usage{PromptTokens: prompt, CompletionTokens: completion, CachedTokens: cached, Images: images})
	})
}

// checkExact: every price field of the input is accepted only as its exact decimal text.
func checkExact(t *testing.T, v any, p Pricing) {
	t.Helper()
	tiers, isList := v.([]any)
	if !isList {
		tiers = []any{v}
	}
	for i, tier := range tiers {
		m, _ := stringMap(tier, "")
		for _, name := range priceFields {
			raw, ok := m[name]
			if !ok {
				continue
			}
			var text string
			switch x := raw.(type) {
			case float32, float64:
				t.Fatalf("tier %d %s: the float %v was accepted as money", i, name, x)
			case json.Number:
				text = x.String()
			case string:
				text = x
			default:
				text = decimal.NewFromInt(toInt64(t, raw)).String()
			}
			if want, got := decimal.RequireFromString(text), *p.Tiers[i].field(name); !got.Equal(want) {
				t.Fatalf("tier %d %s: %s was written, %s parsed", i, name, text, got)
			}
		}
	}
}

func toInt64(t *testing.T, v any) int64 {
	n, err := tokenCount(v, "")
	if err != nil {
		t.Fatalf("a price %v (%T) was accepted that is neither text nor an integer", v, v)
	}
	return n
}

// checkRoundTrip: what the store keeps (MarshalJSON) parses back to the same pricing, in the
// same shape, and marshals to the same bytes.
func checkRoundTrip(t *testing.T, p Pricing) {
	t.Helper()
	b1, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var p2 Pricing
	if err := p2.UnmarshalJSON(b1); err != nil {
		t.Fatalf("stored pricing %s does not parse back: %v", b1, err)
	}
	b2, _ := json.Marshal(p2)
	if !bytes.Equal(b1, b2) || p2.Tiered() != p.Tiered() || len(p2.Tiers) != len(p.Tiers) {
		t.Fatalf("round trip changed the pricing:\n%s\n%s", b1, b2)
	}
	for i := range p.Tiers {
		a, b := p.Tiers[i], p2.Tiers[i]
		if a.RangeStart != b.RangeStart || (a.RangeEnd == nil) != (b.RangeEnd == nil) || (a.RangeEnd != nil && *a.RangeEnd != *b.RangeEnd) {
			t.Fatalf("tier %d range changed: %s", i, b1)
		}
		for _, name := range priceFields {
			if !a.field(name).Equal(*b.field(name)) {
				t.Fatalf("tier %d %s changed: %s -> %s", i, name, a.field(name), b.field(name))
			}
		}
	}
}

// checkCost: a bill is never negative, grows with the answer, and stays within the hold taken
// for the prompt and the most the answer may be.
func checkCost(t *testing.T, p Pricing, u Usage) {
	t.Helper()
	cost := p.Cost(u)
	if cost.IsNegative() {
		t.Fatalf("Cost(%+v) = %s", u, cost)
	}
	more := u
	more.CompletionTokens = max(u.CompletionTokens, 0) + 1
	if p.Cost(more).LessThan(cost) {
		t.Fatalf("one more completion token costs less: %s < %s", p.Cost(more), cost)
	}
	if u.Images == 0 {
		worst := p.WorstCase(max(u.PromptTokens, 0), max(u.CompletionTokens, 0))
		if cost.GreaterThan(worst) {
			t.Fatalf("Cost(%+v) = %s exceeds WorstCase = %s: the hold does not cover the bill", u, cost, worst)
		}
	}
}

// TestWorstCaseCoversCacheReads: the hold covers the bill whatever part of the prompt is read
// from cache, also when the catalog prices cache reads above fresh input or prices only them
// (the hold was 0 and the bill 8). Found by FuzzPricing.
func TestWorstCaseCoversCacheReads(t *testing.T) {
	for _, v := range []any{
		map[string]any{"input_cache_read": "01"},
		map[string]any{"prompt": "0.000001", "input_cache_read": "0.000002", "completion": "0.000004"},
	} {
		p := mustParse(t, v)
		for _, cached := range []int64{0, 8, 600, 1000} {
			u := Usage{PromptTokens: 1000, CompletionTokens: 10, CachedTokens: cached}
			if cost, worst := p.Cost(u), p.WorstCase(1000, 10); cost.GreaterThan(worst) {
				t.Errorf("%v: Cost(%d cached) = %s > WorstCase %s", v, cached, cost, worst)
			}
		}
	}
}
