package ir

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestModelIDsOfRealProviders(t *testing.T) {
	for _, id := range []string{
		"meta-llama/Llama-3.3-70B-Instruct", "claude-3-5-sonnet@20240620", "gemini-2.5-flash",
		"gpt-4o-mini", "openai/gpt-4o:free", "llama3.2", "accounts/fireworks/models/llama-v3p1-8b-instruct",
		"anthropic.claude-3-5-sonnet-20240620-v1:0", "Qwen2.5-72B+lora", strings.Repeat("a", MaxModelIDLength),
	} {
		if err := CheckModelID(id); err != nil {
			t.Errorf("CheckModelID(%q): %v", id, err)
		}
		if err := CheckModelRef(id); err != nil {
			t.Errorf("CheckModelRef(%q): %v", id, err)
		}
	}
	for _, ref := range []string{"route:support-bot", "route:a"} {
		if err := CheckModelRef(ref); err != nil {
			t.Errorf("CheckModelRef(%q): %v", ref, err)
		}
	}
}

func TestModelIDBounds(t *testing.T) {
	for id, want := range map[string]string{
		"":                                  "required",
		strings.Repeat("a", 257):            "longer than 256",
		"route:x":                           "route:",
		"gpt 4":                             "only letters",
		"gpt\r\nx-injected: 1":              "only letters",
		"-leading":                          "starting with a letter",
		"modèle":                            "only letters",
		"a\x00b":                            "only letters",
		"model\"}],\"x\":{\"y\":\"z":        "only letters",
		strings.Repeat("é", 40) + "\u202e1": "only letters",
	} {
		err := CheckModelID(id)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckModelID(%q) = %v, want an error saying %q", id, err, want)
		}
	}
	for _, ref := range []string{"route:", "route:Support Bot", "route:a--b-", "route:x\n"} {
		if err := CheckModelRef(ref); err == nil {
			t.Errorf("CheckModelRef(%q) accepted a malformed route id", ref)
		}
	}
}

func TestQuoteShortBoundsEchoes(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	if q := QuoteShort(long); len(q) > 100 || !strings.Contains(q, "1048576 bytes") {
		t.Errorf("QuoteShort of 1 MiB = %d bytes: %.120s", len(q), q)
	}
	if q := QuoteShort("gpt 4"); q != `"gpt 4"` {
		t.Errorf("QuoteShort(short) = %s", q)
	}
}

func TestValidateBoundsCatalogText(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(g *Gateway)
		want   string
	}{
		{"long id is not echoed whole", func(g *Gateway) { g.Models[0].ID = strings.Repeat("m", 5000) }, "longer than 256"},
		{"upstream name with a space", func(g *Gateway) { g.Models[0].Targets[0].Model = "gpt 4" }, "must not contain spaces"},
		{"upstream name with a newline", func(g *Gateway) { g.Models[0].Targets[0].Model = "gpt\n4" }, "control characters"},
		{"upstream name too long", func(g *Gateway) { g.Models[0].Targets[0].Model = strings.Repeat("u", 300) }, "longer than 256"},
		{"parameter with a newline", func(g *Gateway) { g.Models[0].SupportedParameters = []string{"temperature\r\nx: y"} }, "supported_sampling_parameters"},
		{"provider parameter list", func(g *Gateway) { g.Models[0].Targets[0].SupportedParameters = []string{""} }, `provider "openai": supported_sampling_parameters`},
		{"too many modalities", func(g *Gateway) { g.Models[0].InputModalities = make([]string, 65) }, "at most 64"},
		{"feature name", func(g *Gateway) { g.Models[0].SupportedFeatures = []string{"tools vision"} }, "supported_features"},
		{"display name with a control character", func(g *Gateway) { g.Models[0].Name = "GPT\x1b[31m" }, "control characters"},
		{"negative context length", func(g *Gateway) { g.Models[0].ContextLength = -1 }, "context_length"},
		{"too many providers", func(g *Gateway) {
			for range MaxListLength {
				g.Models[0].Targets = append(g.Models[0].Targets, g.Models[0].Targets[0])
			}
		}, "at most 64"},
		{"route name too long", func(g *Gateway) {
			g.Routes = []Route{{Name: strings.Repeat("r", 129), ID: "route:r", Rule: RulePriorityFallback, Models: []string{"gpt-4o-mini"}, Status: RouteActive}}
		}, "longer than 128"},
		{"route name with a newline", func(g *Gateway) {
			g.Routes = []Route{{Name: "support\nbot", ID: "route:support-bot", Rule: RulePriorityFallback, Models: []string{"gpt-4o-mini"}, Status: RouteActive}}
		}, "control characters"},
		{"route with too many models", func(g *Gateway) {
			g.Routes = []Route{{Name: "big", ID: "route:big", Rule: RulePriorityFallback, Models: make([]string, 65), Status: RouteActive}}
		}, "at most 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := validGateway()
			tt.mutate(g)
			err := g.Validate()
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an ErrInvalid saying %q", err, tt.want)
			}
			if len(err.Error()) > 4096 {
				t.Errorf("the message is %d bytes: values must not be echoed whole", len(err.Error()))
			}
		})
	}
	g := validGateway()
	g.Models[0].SupportedParameters = []string{"temperature", "top_p", "max_tokens", "stream_options"}
	g.Models[0].InputModalities = []string{"text", "image"}
	g.Models[0].Name = "GPT-4o mini (2024-07-18)"
	if err := g.Validate(); err != nil {
		t.Fatalf("a valid catalog: %v", err)
	}
}

// TestPricesAreBounded: a price of a million digits was accepted (and made every cost
// computation slow); a refused number was echoed whole.
func TestPricesAreBounded(t *testing.T) {
	for s, ok := range map[string]bool{
		"0": true, "5": true, "12.50": true, "0.00000015": true, "999999999999999": true,
		"0." + strings.Repeat("1", MaxAmountFractionDigits): true,
		"1000000000000000": false, "0." + strings.Repeat("1", MaxAmountFractionDigits+1): false,
		"": false, ".5": false, "5.": false, "1e3": false, "-1": false, "+1": false, "1.2.3": false, " 1": false,
	} {
		if PlainDecimal(s) != ok {
			t.Errorf("PlainDecimal(%q) = %v", s, !ok)
		}
	}
	huge := strings.Repeat("9", 1_000_000)
	for _, v := range []any{map[string]any{"prompt": huge}, []any{map[string]any{"range_start": 0, "range_end": json.Number(huge), "prompt": "1"}}} {
		_, err := ParsePricing(v)
		if err == nil || len(err.Error()) > 1000 {
			t.Errorf("a million-digit pricing: %.200v (%d bytes)", err, len(fmt.Sprint(err)))
		}
	}
}
