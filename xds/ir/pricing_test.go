package ir

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func mustParse(t *testing.T, v any) Pricing {
	t.Helper()
	p, err := ParsePricing(v)
	if err != nil {
		t.Fatalf("ParsePricing: %v", err)
	}
	return p
}

func fromYAML(t *testing.T, src string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func wantCost(t *testing.T, p Pricing, u Usage, want string) {
	t.Helper()
	if got := p.Cost(u); !got.Equal(dec(want)) {
		t.Errorf("Cost(%+v) = %s, want %s", u, got, want)
	}
}

func TestParseObject(t *testing.T) {
	p := mustParse(t, fromYAML(t, `
prompt: "0.00000015"
completion: "0.0000006"
input_cache_read: "0.000000075"
request: 0
image: 1
duration: "0"`))
	if p.Tiered() || len(p.Tiers) != 1 || p.Tiers[0].RangeStart != 0 || p.Tiers[0].RangeEnd != nil {
		t.Fatalf("object pricing = %+v, want one unbounded tier from 0", p)
	}
	got := p.Tiers[0].Price
	if got.Prompt.String() != "0.00000015" || got.Completion.String() != "0.0000006" ||
		got.InputCacheRead.String() != "0.000000075" || !got.Request.IsZero() || got.Image.String() != "1" {
		t.Errorf("prices = %+v", got)
	}
	// json.Number is taken by its text, int64 and uint64 as integers.
	p = mustParse(t, map[string]any{"prompt": json.Number("0.1"), "request": int64(2), "image": uint64(3)})
	if pr := p.Tiers[0].Price; pr.Prompt.String() != "0.1" || pr.Request.String() != "2" || pr.Image.String() != "3" {
		t.Errorf("prices = %+v", pr)
	}
}

func TestParseErrors(t *testing.T) {
	tiers := func(extra string) string {
		return `[{range_start: 0, range_end: 1000, prompt: "1"}, ` + extra + `]`
	}
	for _, tc := range []struct {
		name string
		v    any
		want string // a fragment of the message, which must say the fix
	}{
		{"yaml float", fromYAML(t, `prompt: 0.00000015`), `write them as strings in quotes, e.g. prompt: "0.00000015"`},
		{"json float", jsonAny(t, `{"completion": 0.5}`), "in quotes"},
		{"float zero", map[string]any{"prompt": float64(0)}, "in quotes"},
		{"float in tier", fromYAML(t, tiers(`{range_start: 1000, prompt: 0.1}`)), "pricing[1].prompt is the number 0.1"},
		{"negative string", map[string]any{"prompt": "-0.1"}, "cannot be negative"},
		{"negative int", map[string]any{"request": -1}, "cannot be negative"},
		{"negative json.Number", map[string]any{"image": json.Number("-2")}, "cannot be negative"},
		{"exponent", map[string]any{"prompt": "1.5e-7"}, "no exponent"},
		{"not a number", map[string]any{"prompt": "cheap"}, "plain decimal"},
		{"empty string", map[string]any{"prompt": ""}, "plain decimal"},
		{"trailing point", map[string]any{"prompt": "1."}, "plain decimal"},
		{"spaces", map[string]any{"prompt": " 1"}, "plain decimal"},
		{"null price", fromYAML(t, `prompt: null`), `write "0"`},
		{"bool price", map[string]any{"prompt": true}, "a boolean"},
		{"unknown field", map[string]any{"prompt": "1", "output": "2"}, `unknown field "output": allowed fields are prompt, completion, input_cache_read, request, image, duration`},
		{"unknown tier field", fromYAML(t, `[{range_start: 0, cost: "1"}]`), `pricing[0] has unknown field "cost": allowed fields are range_start, range_end, prompt`},
		{"range in object", map[string]any{"range_start": 0}, "only valid in a tier array"},
		{"not an object", "0.1", "must be an object"},
		{"tier not an object", []any{"0.1"}, "pricing[0] must be an object"},
		{"empty array", []any{}, "give at least one tier"},
		{"missing range_start", fromYAML(t, `[{prompt: "1"}]`), "range_start is missing"},
		{"first not at 0", fromYAML(t, `[{range_start: 10, prompt: "1"}]`), "the first tier must start at 0"},
		{"gap", fromYAML(t, tiers(`{range_start: 1001, prompt: "2"}`)), "must be 1000 (pricing[0].range_end)"},
		{"overlap", fromYAML(t, tiers(`{range_start: 999, prompt: "2"}`)), "must be 1000"},
		{"null end in middle", fromYAML(t, `[{range_start: 0, range_end: null}, {range_start: 0}]`), "only the last tier may be unbounded"},
		{"bounded last", fromYAML(t, `[{range_start: 0, range_end: 1000}]`), "the last tier must have range_end null"},
		{"empty range", fromYAML(t, tiers(`{range_start: 1000, range_end: 1000}, {range_start: 1000}`)), "must be greater than range_start 1000"},
		{"negative range", fromYAML(t, `[{range_start: -1}]`), "cannot be negative"},
		{"fractional range", jsonAny(t, `[{"range_start": 0, "range_end": 1.5}, {"range_start": 1.5}]`), "integer token count"},
		{"string range", fromYAML(t, `[{range_start: "0"}]`), "integer token count"},
	} {
		_, err := ParsePricing(tc.v)
		if err == nil {
			t.Errorf("%s: no error, want one containing %q", tc.name, tc.want)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not contain %q", tc.name, err, tc.want)
		}
	}
}

func jsonAny(t *testing.T, src string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(src), &v); err != nil { // no UseNumber: floats, as careless callers get
		t.Fatal(err)
	}
	return v
}

var longContext = `
- {range_start: 0, range_end: 128000, prompt: "0.000001", completion: "0.000004", input_cache_read: "0.00000025", request: "0.001"}
- {range_start: 128000, range_end: null, prompt: "0.000002", completion: "0.000008", input_cache_read: "0.0000005", request: "0.002"}
`

func TestTierBoundaries(t *testing.T) {
	p := mustParse(t, fromYAML(t, longContext))
	if !p.Tiered() || len(p.Tiers) != 2 {
		t.Fatalf("pricing = %+v", p)
	}
	// The whole request is priced at the chosen tier, completion included.
	wantCost(t, p, Usage{PromptTokens: 0}, "0.001")
	wantCost(t, p, Usage{PromptTokens: 127999, CompletionTokens: 1000}, "0.132999") // 0.127999 + 0.004 + 0.001
	wantCost(t, p, Usage{PromptTokens: 128000, CompletionTokens: 1000}, "0.266")    // 0.256 + 0.008 + 0.002
	wantCost(t, p, Usage{PromptTokens: 1_000_000}, "2.002")
	// The last tier may also omit range_end.
	p2 := mustParse(t, fromYAML(t, `[{range_start: 0, range_end: 10, prompt: "1"}, {range_start: 10, prompt: "2"}]`))
	if p2.Tiers[1].RangeEnd != nil || p2.TierFor(10).Prompt.String() != "2" || p2.TierFor(9).Prompt.String() != "1" {
		t.Errorf("tiers = %+v", p2.Tiers)
	}
}

func TestCostCacheReads(t *testing.T) {
	withCache := mustParse(t, map[string]any{"prompt": "0.000001", "completion": "0.000002", "input_cache_read": "0.0000001"})
	// 600 uncached × 0.000001 + 400 cached × 0.0000001 + 10 × 0.000002
	wantCost(t, withCache, Usage{PromptTokens: 1000, CachedTokens: 400, CompletionTokens: 10}, "0.00066")
	// More cached than prompt tokens (a bad usage block) is capped: never a negative prompt charge.
	wantCost(t, withCache, Usage{PromptTokens: 1000, CachedTokens: 5000}, "0.0001")
	// input_cache_read 0: the model has no cache pricing, cached tokens are ordinary prompt tokens.
	noCache := mustParse(t, map[string]any{"prompt": "0.000001", "completion": "0.000002"})
	wantCost(t, noCache, Usage{PromptTokens: 1000, CachedTokens: 400, CompletionTokens: 10}, "0.00102")
	// Negative counts count as 0.
	wantCost(t, noCache, Usage{PromptTokens: -5, CompletionTokens: -5, CachedTokens: -5, Images: -5}, "0")
}

func TestCostRequestAndImages(t *testing.T) {
	p := mustParse(t, map[string]any{"request": "0.005", "image": "0.04", "prompt": "0.000001"})
	wantCost(t, p, Usage{}, "0.005")
	wantCost(t, p, Usage{PromptTokens: 100, Images: 3}, "0.1251") // 0.005 + 0.12 + 0.0001
	if p.IsFree() {
		t.Error("IsFree() = true for a priced model")
	}
}

// TestCostImageTokens: output tokens that were images are billed per image when the model has
// an image price, and at the completion price like all other output when it has none; never
// both (issue 26 item 12).
func TestCostImageTokens(t *testing.T) {
	perImage := mustParse(t, map[string]any{"request": "0.01", "image": "0.039", "prompt": "0.0000003", "completion": "0.0000025"})
	// A real gemini-2.5-flash-image answer: 1,336 output tokens of which 1,290 are the image.
	// 0.01 + 0.039 + 17 x 0.0000003 + 46 x 0.0000025
	wantCost(t, perImage, Usage{PromptTokens: 17, CompletionTokens: 1336, ImageTokens: 1290, Images: 1}, "0.0491201")
	// No image billed (none came back): its tokens are output like the rest.
	wantCost(t, perImage, Usage{PromptTokens: 17, CompletionTokens: 1336, ImageTokens: 1290}, "0.0133451")
	// More image tokens than output (a bogus report) never credits the text.
	wantCost(t, perImage, Usage{CompletionTokens: 10, ImageTokens: 99, Images: 1}, "0.049")
	// No image price: every output token at the completion price, the image tokens included.
	tokensOnly := mustParse(t, map[string]any{"prompt": "0.0000003", "completion": "0.00003"})
	wantCost(t, tokensOnly, Usage{PromptTokens: 17, CompletionTokens: 1336, ImageTokens: 1290, Images: 1}, "0.0400851")
	// TokenCost leaves out the request and image prices, not the split.
	if got := perImage.TokenCost(Usage{PromptTokens: 17, CompletionTokens: 1336, ImageTokens: 1290, Images: 1}); !got.Equal(dec("0.0001201")) {
		t.Errorf("TokenCost = %s, want 0.0001201", got)
	}
}

func TestFree(t *testing.T) {
	for name, v := range map[string]any{
		"nil":       nil,
		"empty":     map[string]any{},
		"zeros":     fromYAML(t, `{prompt: "0", completion: "0.000", input_cache_read: 0, request: "0", image: "0", duration: "0"}`),
		"zero tier": fromYAML(t, `[{range_start: 0, range_end: 10, prompt: "0"}, {range_start: 10, completion: "0"}]`),
	} {
		p := mustParse(t, v)
		if !p.IsFree() {
			t.Errorf("%s: IsFree() = false", name)
		}
		wantCost(t, p, Usage{PromptTokens: 1e6, CompletionTokens: 1e6, CachedTokens: 10, Images: 4}, "0")
		if w := p.WorstCase(1e6, 1e6); !w.IsZero() {
			t.Errorf("%s: WorstCase = %s", name, w)
		}
	}
	if (Pricing{}).IsFree() != true || !(Pricing{}).Cost(Usage{PromptTokens: 5}).IsZero() {
		t.Error("the zero Pricing must be free")
	}
	// Any one non-zero unit, in any tier, makes it paid.
	for _, v := range []any{
		map[string]any{"duration": "0.01"},
		fromYAML(t, `[{range_start: 0, range_end: 10}, {range_start: 10, input_cache_read: "0.1"}]`),
	} {
		if mustParse(t, v).IsFree() {
			t.Errorf("IsFree() = true for %v", v)
		}
	}
}

func TestWorstCase(t *testing.T) {
	p := mustParse(t, fromYAML(t, longContext))
	// No cache discount, full completion budget, the tier of the known prompt size.
	if got := p.WorstCase(1000, 500); !got.Equal(dec("0.004")) { // 0.001 + 0.002 + 0.001
		t.Errorf("WorstCase(1000, 500) = %s", got)
	}
	if got := p.WorstCase(128000, 500); !got.Equal(dec("0.262")) { // 0.256 + 0.004 + 0.002
		t.Errorf("WorstCase(128000, 500) = %s", got)
	}
	if w, c := p.WorstCase(1000, 500), p.Cost(Usage{PromptTokens: 1000, CachedTokens: 900, CompletionTokens: 20}); !c.LessThan(w) {
		t.Errorf("actual cost %s is not below the worst case %s", c, w)
	}
}

func TestExactDecimal(t *testing.T) {
	p := mustParse(t, map[string]any{"prompt": "0.00000015", "completion": "0.1", "request": "0.1"})
	if got := p.Cost(Usage{PromptTokens: 1_000_000}); got.String() != "0.25" { // 0.15 + request 0.1
		t.Errorf("1,000,000 × 0.00000015 + 0.1 = %s, want 0.25", got)
	}
	if got := p.TierFor(0).Prompt.Mul(decimal.NewFromInt(1_000_000)); got.String() != "0.15" {
		t.Errorf("1,000,000 × 0.00000015 = %s, want exactly 0.15", got)
	}
	if got := p.Cost(Usage{CompletionTokens: 2}); got.String() != "0.3" { // 2 × 0.1 + 0.1
		t.Errorf("3 × 0.1 = %s, want exactly 0.3", got)
	}
	// A price with more digits than a float64 holds survives parsing and printing.
	p = mustParse(t, map[string]any{"prompt": "0.000000123456789012345678901"})
	if got := p.Cost(Usage{PromptTokens: 1000}); got.String() != "0.000123456789012345678901" {
		t.Errorf("got %s", got)
	}
}

func TestMarshalJSON(t *testing.T) {
	obj := mustParse(t, map[string]any{"prompt": "0.00000015", "completion": json.Number("0.0000006"), "request": 0})
	assertJSON(t, obj, `{"prompt":"0.00000015","completion":"0.0000006","input_cache_read":"0","request":"0","image":"0","duration":"0"}`)
	assertJSON(t, mustParse(t, nil), `{"prompt":"0","completion":"0","input_cache_read":"0","request":"0","image":"0","duration":"0"}`)
	tiers := mustParse(t, fromYAML(t, longContext))
	assertJSON(t, tiers, `[`+
		`{"range_start":0,"range_end":128000,"prompt":"0.000001","completion":"0.000004","input_cache_read":"0.00000025","request":"0.001","image":"0","duration":"0"},`+
		`{"range_start":128000,"range_end":null,"prompt":"0.000002","completion":"0.000008","input_cache_read":"0.0000005","request":"0.002","image":"0","duration":"0"}]`)
	// A single tier in an array stays an array.
	assertJSON(t, mustParse(t, fromYAML(t, `[{range_start: 0, prompt: "1"}]`)),
		`[{"range_start":0,"range_end":null,"prompt":"1","completion":"0","input_cache_read":"0","request":"0","image":"0","duration":"0"}]`)

	// Round trip: the same JSON and the same costs, both shapes.
	for _, p := range []Pricing{obj, tiers} {
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back Pricing
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", data, err)
		}
		again, _ := json.Marshal(back)
		if string(again) != string(data) || back.Tiered() != p.Tiered() {
			t.Errorf("round trip changed %s into %s", data, again)
		}
		u := Usage{PromptTokens: 200000, CompletionTokens: 77, CachedTokens: 3}
		if !back.Cost(u).Equal(p.Cost(u)) {
			t.Errorf("round trip changed the cost: %s vs %s", back.Cost(u), p.Cost(u))
		}
	}
	// Inside a catalog entry, and with decimal's global quoting switch flipped by someone else.
	decimal.MarshalJSONWithoutQuotes = true
	defer func() { decimal.MarshalJSONWithoutQuotes = false }()
	entry, _ := json.Marshal(map[string]any{"pricing": obj})
	if !strings.Contains(string(entry), `"prompt":"0.00000015"`) {
		t.Errorf("catalog entry %s does not carry the price as a string", entry)
	}
	// UnmarshalJSON keeps numbers as their text (json.Number), so an unquoted JSON price is still
	// exact there; the exponent form is refused like everywhere else.
	var fromJSON Pricing
	if err := json.Unmarshal([]byte(`{"prompt": 0.00000015}`), &fromJSON); err != nil || fromJSON.TierFor(0).Prompt.String() != "0.00000015" {
		t.Errorf("Unmarshal of a JSON number: %v, %+v", err, fromJSON)
	}
	if err := json.Unmarshal([]byte(`{"prompt": 1.5e-7}`), &fromJSON); err == nil {
		t.Error("Unmarshal accepted 1.5e-7")
	}
}

func assertJSON(t *testing.T, p Pricing, want string) {
	t.Helper()
	got, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("json = %s\nwant   %s", got, want)
	}
}
