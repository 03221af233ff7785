package x402

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// briefConfig is the config contract's example with real addresses, as viper hands it over:
// every key lower-cased (facilitatorAddress arrives as facilitatoraddress).
func briefConfig() Config {
	return Config{
		PayURL:         "http://127.0.0.1:8080/",
		FacilitatorURL: "http://127.0.0.1:4020",
		Endpoints: []Endpoint{{
			Slug: "chat-mini", Target: ChatTarget, Models: []string{"gpt-4o-mini"},
			Accepts: []Accept{
				{Scheme: "exact", Network: "eip155:84532", Asset: testToken, PayTo: testPayTo, Price: "0.01", AssetDecimals: six,
					Extra: map[string]any{"name": "USDC", "version": "2"}, MaxTimeoutSeconds: 60},
				{Scheme: "upto", Network: "eip155:84532", Asset: strings.ToLower(testToken), PayTo: testPayTo, MaxPrice: "0.05", AssetDecimals: six,
					Extra: map[string]any{"name": "USDC", "version": "2", "facilitatoraddress": testFacilitator}},
			},
		}},
	}
}

func TestOfferRequirements(t *testing.T) {
	c := briefConfig()
	offers, err := c.NewOffers()
	if err != nil {
		t.Fatal(err)
	}
	o := offers["chat-mini"]
	if o.NeedsQuote() {
		t.Error("NeedsQuote with every price given")
	}
	reqs, err := o.Requirements(decimal.Zero)
	if err != nil {
		t.Fatal(err)
	}
	if o.Resource.URL != "http://127.0.0.1:8080/x402/chat-mini" {
		t.Errorf("resource.url %q", o.Resource.URL)
	}
	h, err := EncodePaymentRequired(o.PaymentRequired(reqs, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := `"accepts":[{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"` + testToken + `","payTo":"` + testPayTo +
		`","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},` +
		`{"scheme":"upto","network":"eip155:84532","amount":"50000","asset":"` + testToken + `","payTo":"` + testPayTo +
		`","maxTimeoutSeconds":120,"extra":{"facilitatorAddress":"` + testFacilitator + `","name":"USDC","version":"2"}}]`
	if got := mustB64(t, h); !strings.Contains(got, want) {
		t.Fatalf("PAYMENT-REQUIRED\n got %s\nwant ...%s...", got, want)
	}
}

func TestAtomicExact(t *testing.T) {
	for _, c := range []struct {
		usd  string
		dec  int
		want string // "" = refused
	}{
		{"0.01", 6, "10000"}, {"1", 6, "1000000"}, {"0.000001", 6, "1"}, {"12.5", 0, ""}, {"12", 0, "12"},
		{"0.010", 2, "1"}, {"0.0000001", 6, ""}, {"0.015", 2, ""}, {"1.5", 18, "1500000000000000000"},
		{"0", 6, ""}, {"0.000", 6, ""}, {"-1", 6, ""}, {"1e-2", 6, ""}, {".5", 6, ""}, {"01", 6, ""}, {" 1", 6, ""}, {"1.", 6, ""}, {"", 6, ""},
	} {
		got, err := atomicExact(c.usd, c.dec)
		if (c.want == "") != (err != nil) || (err == nil && got.String() != c.want) {
			t.Errorf("atomicExact(%q, %d) = %v, %v; want %q", c.usd, c.dec, got, err, c.want)
		}
	}
}

func TestOfferQuotedPerRequest(t *testing.T) {
	c := briefConfig()
	c.Endpoints[0].Accepts[0].Price = ""
	offers, err := c.NewOffers()
	if err != nil {
		t.Fatal(err)
	}
	o := offers["chat-mini"]
	if !o.NeedsQuote() {
		t.Fatal("an exact option without price needs the quote")
	}
	reqs, err := o.Requirements(decimal.RequireFromString("0.0123450001"))
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Amount != "12346" || reqs[1].Amount != "50000" {
		t.Errorf("amounts %s, %s; want the quote rounded up (12346) and the cap", reqs[0].Amount, reqs[1].Amount)
	}
	if reqs, _ := o.Requirements(decimal.RequireFromString("0.012345")); reqs[0].Amount != "12345" {
		t.Errorf("an exact quote is not rounded: %s", reqs[0].Amount)
	}
	for _, q := range []string{"0", "-0.01"} {
		if _, err := o.Requirements(decimal.RequireFromString(q)); !errors.Is(err, ErrQuote) {
			t.Errorf("quote %s: %v, want ErrQuote", q, err)
		}
	}
	// Only chat has a worst-case cost to quote.
	c.Endpoints[0].Target = "/v1/videos"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "x402.endpoints[0].accepts[0].price: required for exact on /v1/videos") {
		t.Errorf("exact without price on videos: %v", err)
	}
}

func TestOfferCharge(t *testing.T) {
	c := briefConfig()
	offers, err := c.NewOffers()
	if err != nil {
		t.Fatal(err)
	}
	o := offers["chat-mini"]
	for _, tc := range []struct {
		cost, want string
		capped     bool
	}{
		{"0.0123451", "12346", false}, {"0.05", "50000", false}, {"0.0500001", "50000", true}, {"3", "50000", true}, {"0", "0", false},
	} {
		r, capped, err := o.Charge(1, decimal.RequireFromString(tc.cost))
		if err != nil || r.Amount != tc.want || capped != tc.capped || r.Scheme != "upto" || r.PayTo != testPayTo {
			t.Errorf("Charge(%s) = %+v, %v, %v; want amount %s capped %v", tc.cost, r, capped, err, tc.want, tc.capped)
		}
	}
	if _, _, err := o.Charge(0, decimal.NewFromInt(1)); err == nil {
		t.Error("Charge of an exact option")
	}
	if _, _, err := o.Charge(1, decimal.NewFromInt(-1)); err == nil {
		t.Error("Charge of a negative cost")
	}
}

func TestConfigValidateReportsEverything(t *testing.T) {
	c := Config{
		PayURL:         "ftp://x",
		FacilitatorURL: "",
		Endpoints: []Endpoint{
			{Slug: "Chat Mini", Target: "chat", Models: []string{"a", "a"}, Accepts: []Accept{
				{Scheme: "stream", Network: "eip155:0", Asset: "0x123", PayTo: "0x0000000000000000000000000000000000000000", Price: "0.001", AssetDecimals: ptr(2), MaxTimeoutSeconds: 5},
				{Scheme: "exact", Network: "base", Asset: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0513", PayTo: testPayTo, Price: "1e-2", MaxPrice: "1", AssetDecimals: six,
					Extra: map[string]any{"name": "USDC", "version": 2, "assetTransferMethod": "permit2"}},
				{Scheme: "upto", Network: "eip155:8453", Asset: testToken, PayTo: testPayTo, Price: "0.01", AssetDecimals: six},
				{Scheme: "upto", Network: "eip155:8453", Asset: testToken, PayTo: testPayTo, MaxPrice: "0.0000001", AssetDecimals: six,
					Extra: map[string]any{"facilitatorAddress": "0xnothex"}},
			}},
			{Slug: "chat-mini", Target: ChatTarget, RateLimits: RateLimits{RequestsPerMinute: ptr64(0), TokensPerMinute: ptr64(-1)}},
			{Slug: "chat-mini", Target: ChatTarget, Accepts: []Accept{{Scheme: "exact", Network: "eip155:1", Asset: testToken, PayTo: testPayTo, AssetDecimals: ptr(99),
				Extra: map[string]any{"name": "USDC", "version": "2"}},
				{Scheme: "exact", Network: "eip155:1", Asset: testToken, PayTo: testPayTo, Price: "1", Extra: map[string]any{"name": "USDC", "version": "2"}}}},
		},
	}
	err := c.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate = %v, want ErrConfig", err)
	}
	for _, want := range []string{
		`x402.pay_url "ftp://x": is not an http(s) URL`,
		`x402.facilitator_url "": is required`,
		`x402.endpoints[0].slug "Chat Mini"`,
		`x402.endpoints[0].target "chat"`,
		`x402.endpoints[0].models[1] "a"`,
		`x402.endpoints[0].accepts[0].scheme "stream"`,
		`x402.endpoints[0].accepts[0].network "eip155:0"`,
		`x402.endpoints[0].accepts[0].asset "0x123": is not an address`,
		`x402.endpoints[0].accepts[0].pay_to "0x0000000000000000000000000000000000000000": is the zero address`,
		`x402.endpoints[0].accepts[0].max_timeout_seconds 5`,
		`x402.endpoints[0].accepts[1].network "base"`,
		`x402.endpoints[0].accepts[1].asset "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0513": has a wrong EIP-55 checksum`,
		`x402.endpoints[0].accepts[1].max_price: only upto options have a cap`,
		`x402.endpoints[0].accepts[1].price "1e-2": write a plain decimal number`,
		`x402.endpoints[0].accepts[1].extra.version: exact needs the token's EIP-712 domain version as text`,
		`x402.endpoints[0].accepts[1].extra.assetTransferMethod permit2`,
		`x402.endpoints[0].accepts[2].price: upto settles the actual cost`,
		`x402.endpoints[0].accepts[2].max_price: required for upto`,
		`x402.endpoints[0].accepts[2].extra.facilitatorAddress: required for upto`,
		`x402.endpoints[0].accepts[3].max_price "0.0000001": has more decimal places than the asset's 6`,
		`x402.endpoints[0].accepts[3].extra.facilitatorAddress "0xnothex"`,
		`x402.endpoints[1].accepts: list at least one payment option`,
		`x402.endpoints[1].rate_limits.requests_per_minute 0: give a whole number from 1`,
		`x402.endpoints[1].rate_limits.tokens_per_minute -1`,
		`x402.endpoints[2].slug "chat-mini": endpoints[1] has it too`,
		`x402.endpoints[2].accepts[0].asset_decimals 99`,
		`x402.endpoints[2].accepts[1].asset_decimals: required`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not report %q", want)
		}
	}
	if t.Failed() {
		t.Logf("Validate:\n%v", err)
	}
	if (&Config{}).Validate() != nil {
		t.Error("no endpoints: x402 is off, nothing to validate")
	}
	if _, err := c.NewOffers(); !errors.Is(err, ErrConfig) {
		t.Error("NewOffers of an invalid config")
	}
}

var six = ptr(6)

func ptr(n int) *int { return &n }

// TestShortWindows: an option whose credentials expire before a timed-out settlement could be
// asked again is named; the default window (120 s) fits the default timeout (60 s).
func TestShortWindows(t *testing.T) {
	c := Config{Endpoints: []Endpoint{{Slug: "a", Accepts: []Accept{{}, {MaxTimeoutSeconds: 76}, {MaxTimeoutSeconds: 60}}}}}
	if got := c.ShortWindows(); len(got) != 1 || !strings.Contains(got[0], "accepts[2]: max_timeout_seconds 60 is under facilitator_timeout 1m0s + 16s") {
		t.Errorf("default timeout: %q", got)
	}
	c.FacilitatorTimeout = 3 * time.Second
	if got := c.ShortWindows(); len(got) != 0 {
		t.Errorf("3s: %q", got)
	}
}

func ptr64(v int64) *int64 { return &v }
