package extproc

import (
	"slices"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/xds/ir"
)

// paramsGateway is fuzzGateway with a chat model on Anthropic alone and a model of every media
// family.
func paramsGateway() *ir.Gateway {
	g := fuzzGateway()
	g.Providers = append(g.Providers,
		ir.Provider{Name: "mm", Type: ir.ProviderTypeMiniMax, Host: "api.minimax.io", Port: 443, TLS: true, NeedsKey: true, APIKey: "m"},
		ir.Provider{Name: "ds", Type: ir.ProviderTypeDashScope, Host: "dashscope-intl.aliyuncs.com", Port: 443, TLS: true, NeedsKey: true, APIKey: "d"},
		ir.Provider{Name: "kl", Type: ir.ProviderTypeKling, Host: "api-singapore.klingai.com", Port: 443, TLS: true, AccessKey: "ak", SecretKey: "sk"},
	)
	g.Models = append(g.Models,
		ir.Model{ID: "claude-m", Targets: []ir.Target{{Provider: "anthropic", Model: "claude-sonnet-4-5"}}},
		ir.Model{ID: "v1", Family: "V1", Targets: []ir.Target{{Provider: "mm", Model: "MiniMax-Hailuo-02"}}},
		ir.Model{ID: "v2", Family: "V2", Variant: "t2v", Targets: []ir.Target{{Provider: "ds", Model: "wan2.2-t2v-plus"}}},
		ir.Model{ID: "v3", Family: "V3", Targets: []ir.Target{{Provider: "kl", Model: "kling-v2-master"}}},
		ir.Model{ID: "i1", Family: "I1", Targets: []ir.Target{{Provider: "kl", Model: "kling-v2-1"}}},
		ir.Model{ID: "i2", Family: "I2", Variant: "standard", Targets: []ir.Target{{Provider: "ds", Model: "qwen-image-plus"}}},
		ir.Model{ID: "i2b", Family: "I2b", Variant: "pro", Targets: []ir.Target{{Provider: "ds", Model: "wan2.7-image-pro"}}},
	)
	return g
}

// openAISamples are a valid value of each OpenAI chat parameter that is not its default (n 2,
// not 1), with what it needs beside it.
var openAISamples = map[string]string{
	"frequency_penalty": `0.5`, "logit_bias": `{"50256":-100}`, "logprobs": `true`, "max_completion_tokens": `100`,
	"max_tokens": `100`, "n": `2`, "parallel_tool_calls": `false`, "presence_penalty": `0.5`, "reasoning_effort": `"low"`,
	"response_format": `{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"}}}`, "seed": `7`, "stop": `["END"]`, "temperature": `0.5`,
	"tool_choice":  `"required","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`,
	"tools":        `[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`,
	"top_logprobs": `2,"logprobs":true`, "top_p": `0.5`, "user": `"end-user-1"`,
}

// TestCatalogListsWhatIsAccepted: a model's supported_sampling_parameters are what its requests
// may carry with any valid value: every OpenAI parameter the catalog lists for a chat model (an
// I3 image model too) is taken with a value other than its default and reaches the provider;
// one the model refuses (n 2 on one-answer providers) is not listed. A media model lists its
// family's fields, the list its validator refuses other fields with.
func TestCatalogListsWhatIsAccepted(t *testing.T) {
	rt := core.Compile(paramsGateway(), nil)
	for _, id := range []string{"gpt", "free", "claude", "claude-m", "flash", "nb"} {
		m := rt.Models[id]
		listed := entry(m, true).SupportedSamplingParameters
		for p, v := range openAISamples {
			body := `{"model":"` + id + `","messages":[{"role":"user","content":"hi"}],"` + p + `":` + v + `}`
			if e := chat.Check([]byte(body)); e != nil {
				t.Fatalf("%s: the sample is not a valid chat request: %s", body, e.Message)
			}
			accepted := true
			for _, tg := range m.Targets {
				up, removed, err := chat.AttemptRequest(rt, []byte(body), m, rt.Providers[tg.Provider])
				accepted = accepted && err == nil && up != nil && !slices.Contains(removed, p)
			}
			if slices.Contains(listed, p) && !accepted {
				t.Errorf("%s lists %s, but %s = %s is refused or removed", id, p, p, v)
			}
		}
	}
	if got := strings.Join(entry(rt.Models["nb"], true).SupportedSamplingParameters, ","); got != "frequency_penalty,max_completion_tokens,max_tokens,presence_penalty,seed,stop,temperature,top_p" {
		t.Errorf("I3 lists %s", got)
	}
	for _, id := range []string{"v1", "v2", "v3", "i1", "i2", "i2b"} {
		m := rt.Models[id]
		want := task.FieldsOf(&m.Model)
		if got := entry(m, true).SupportedSamplingParameters; len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s (%s) lists %v, want its family's fields %v", id, m.Family, got, want)
		}
	}
}
