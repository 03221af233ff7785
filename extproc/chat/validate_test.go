package chat

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/billing"
)

// TestValidationRefusesEveryField: each field of docs/api.md#request-validation and the common OpenAI ones, wrong by
// type or range, is refused with a message naming the field; none of them used to be (the
// first three were forwarded to providers, tools:"x" was called invalid_messages).
func TestValidationRefusesEveryField(t *testing.T) {
	rt := testRuntime()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	req := func(extra string) string { return `{"model":"gpt",` + msgs + `,` + extra + `}` }
	msg := func(m string) string { return `{"model":"gpt","messages":[` + m + `]}` }
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	var many []string
	for i := 0; i < maxFields; i++ {
		many = append(many, fmt.Sprintf(`"f%d":1`, i))
	}
	cases := []struct {
		body, code string
		want       []string // in the message
	}{
		{req(strings.Join(many, ",")), "invalid_request", []string{"more than 128 fields"}},
		// the reproductions
		{req(`"temperature":"hot"`), "invalid_request", []string{"temperature", "a number from 0 to 2", "not a string"}},
		{req(`"user":5`), "invalid_request", []string{"user must be a string"}},
		{req(`"tool_choice":"sometimes"`), "invalid_request", []string{"tool_choice", `"auto"`}},
		{req(`"tools":"x"`), "invalid_request", []string{"tools must be an array"}},
		// field names travel in x-tollway-removed-params: a CRLF or 100 KB name must not
		{req(`"bad\r\nname":1`), "invalid_request", []string{"is not a parameter name"}},
		{req(`"` + strings.Repeat("k", 65) + `":1`), "invalid_request", []string{"is not a parameter name"}},
		// ranges and types
		{req(`"temperature":2.5`), "invalid_request", []string{"temperature", "(got 2.5)"}},
		{req(`"temperature":-0.1`), "invalid_request", []string{"temperature"}},
		{req(`"top_p":1.5`), "invalid_request", []string{"top_p must be a number from 0 to 1"}},
		{req(`"max_tokens":0`), "invalid_request", []string{"max_tokens must be a positive integer"}},
		{req(`"max_tokens":1.5`), "invalid_request", []string{"max_tokens"}},
		{req(`"max_completion_tokens":"10"`), "invalid_request", []string{"max_completion_tokens must be a positive integer, not a string"}},
		{req(`"stream":"yes"`), "invalid_request", []string{"stream must be true or false"}},
		{req(`"stream_options":[]`), "invalid_request", []string{"stream_options must be an object"}},
		{req(`"stream_options":{"include_usage":"yes"}`), "invalid_request", []string{"stream_options.include_usage"}},
		{req(`"n":0`), "invalid_request", []string{"n must be an integer from 1 to 128"}},
		{req(`"n":129`), "invalid_request", []string{"n"}},
		{req(`"seed":"x"`), "invalid_request", []string{"seed must be an integer"}},
		{req(`"presence_penalty":3`), "invalid_request", []string{"presence_penalty must be a number from -2 to 2"}},
		{req(`"frequency_penalty":true`), "invalid_request", []string{"frequency_penalty"}},
		{req(`"logit_bias":{"50256":-101}`), "invalid_request", []string{"logit_bias[50256]"}},
		{req(`"logprobs":1`), "invalid_request", []string{"logprobs must be true or false"}},
		{req(`"top_logprobs":21`), "invalid_request", []string{"top_logprobs"}},
		{req(`"parallel_tool_calls":"no"`), "invalid_request", []string{"parallel_tool_calls"}},
		{req(`"stop":5`), "invalid_request", []string{"stop must be a string or an array of strings"}},
		{req(`"stop":["a",1]`), "invalid_request", []string{"stop[1] must be a string"}},
		{req(`"response_format":{"type":"xml"}`), "invalid_request", []string{"response_format.type"}},
		{req(`"response_format":{"type":"json_schema"}`), "invalid_request", []string{"response_format.json_schema"}},
		{req(`"user":"` + strings.Repeat("u", 257) + `"`), "invalid_request", []string{"user is too long", "at most 256"}},
		{req(`"user":"a\nb"`), "invalid_request", []string{"user must not contain control characters"}},
		{req(`"route":{"provider":"` + strings.Repeat("p", 65) + `"}`), "invalid_request", []string{"route.provider is too long"}},
		{req(`"route_mode":5`), "invalid_route_mode", []string{"fast, balanced, deep"}},
		{`{"model":"` + strings.Repeat("m", 257) + `",` + msgs + `}`, "invalid_request", []string{"model is too long"}},
		// tools and tool_choice
		{req(`"tools":[{"type":"retrieval"}]`), "invalid_request", []string{"tools[0].type", `"function"`}},
		{req(`"tools":[{"type":"function","function":{"name":"has space"}}]`), "invalid_request", []string{"tools[0].function.name", "letters, digits"}},
		{req(`"tools":[{"type":"function","function":{"name":"` + strings.Repeat("f", 65) + `"}}]`), "invalid_request", []string{"tools[0].function.name is too long"}},
		{req(`"tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}]`), "invalid_request", []string{"tools[0].function.parameters must be a JSON Schema object"}},
		{req(`"tools":[{"type":"function","function":{"description":"no name"}}]`), "invalid_request", []string{"tools[0].function.name is required"}},
		{req(`"tool_choice":{"type":"function","function":{"name":"other"}},` + tools), "invalid_request", []string{"tool_choice.function.name", `"other"`}},
		{req(`"tool_choice":"required"`), "invalid_request", []string{"declares no tools"}},
		{req(`"tool_choice":{"type":"function"}`), "invalid_request", []string{"tool_choice must be"}},
		// messages
		{msg(`{"role":"user"}`), "invalid_messages", []string{"messages[0].content is required"}},
		{msg(`{"role":"user","content":5}`), "invalid_messages", []string{"messages[0].content must be a string or an array of content parts"}},
		{msg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":5}}]}`), "invalid_messages", []string{"messages[0].content[0].image_url.url must be a string"}},
		{msg(`{"role":"user","content":[{"type":"image_url","image_url":{}}]}`), "invalid_messages", []string{"messages[0].content[0].image_url.url is required"}},
		{msg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"x","detail":"max"}}]}`), "invalid_messages", []string{"image_url.detail"}},
		{msg(`{"role":"user","content":[{"type":"video"}]}`), "invalid_messages", []string{"messages[0].content[0].type"}},
		{msg(`{"role":"user","content":[{"text":"no type"}]}`), "invalid_messages", []string{"messages[0].content[0].type is required"}},
		{msg(`{"role":"user","content":[{"type":"text","text":{"a":1}}]}`), "invalid_messages", []string{"messages[0].content[0].text must be a string"}},
		{msg(`{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}`), "invalid_messages", []string{`"image_url" is not allowed in system messages`}},
		{msg(`{"role":"user","content":"a","name":"John Doe"}`), "invalid_messages", []string{"messages[0].name"}},
		{msg(`{"role":"tool","content":"42"}`), "invalid_messages", []string{"messages[0].tool_call_id is required"}},
		{msg(`{"role":"tool","content":"42","tool_call_id":"` + strings.Repeat("c", maxToolCallID+1) + `"}`), "invalid_messages", []string{"messages[0].tool_call_id is too long"}},
		{msg(`{"role":"user","content":"a","tool_calls":[]}`), "invalid_messages", []string{"messages[0].tool_calls is only allowed on assistant messages"}},
		{msg(`{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`), "invalid_messages", []string{"messages[0].tool_calls[0].id is required"}},
		{msg(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{}}}]}`), "invalid_messages", []string{"messages[0].tool_calls[0].function.arguments must be a string"}},
		{msg(`{"role":"assistant","content":null}`), "invalid_messages", []string{"messages[0].content is required"}},
		// JSON itself
		{`{"model":"gpt","model":"free",` + msgs + `}`, "invalid_json", []string{"duplicate"}},
		{`{"model":"gpt",` + msgs + `} {}`, "invalid_json", []string{"more after"}},
		{"{\"model\":\"gpt\"," + msgs + ",\"user\":\"\xff\"}", "invalid_json", []string{"UTF-8"}},
	}
	goType := regexp.MustCompile(`\b(billing|provider|extproc|json|jsontext)\.[A-Za-z]|\bstruct\b|\bmap\[|\[\]|chatPrompt|contentPart|float64|int64`)
	for _, c := range cases {
		_, e := planChat(rt, []byte(c.body))
		if e == nil {
			t.Errorf("%.120s: accepted", c.body)
			continue
		}
		if e.Status != http.StatusBadRequest || e.Code != c.code {
			t.Errorf("%.120s: got %d %s (%s), want 400 %s", c.body, e.Status, e.Code, e.Message, c.code)
		}
		for _, w := range c.want {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%.120s: message %q does not say %q", c.body, e.Message, w)
			}
		}
		if goType.MatchString(e.Message) {
			t.Errorf("%.120s: message %q shows a Go type", c.body, e.Message)
		}
	}
}

// TestValidationAcceptsOpenAIRequests: the request shapes OpenAI's SDKs send pass, null
// included wherever OpenAI takes it.
func TestValidationAcceptsOpenAIRequests(t *testing.T) {
	rt := testRuntime()
	bodies := []string{
		`{"model":"free","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi","name":"alice_1"}]}`,
		`{"model":"free","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"image_url":{"url":"data:image/png;base64,AAAA","detail":"low"},"type":"image_url"}]}]}`,
		`{"model":"free","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklGR","format":"wav"}},{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBER","filename":"a.pdf"}}]}]}`,
		`{"model":"free","messages":[{"role":"user","content":"weather?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"{\"temp\":21}"},
			{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}],
		 "tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{}},"strict":true}}],
		 "tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false}`,
		`{"model":"free","messages":[{"role":"user","content":"hi"}],"temperature":0,"top_p":1,"max_tokens":5,"max_completion_tokens":7,"stream":true,
		 "stream_options":{"include_usage":true},"n":2,"stop":["x","y"],"seed":-3,"presence_penalty":-2,"frequency_penalty":2,"logit_bias":{"1":100},
		 "logprobs":true,"top_logprobs":5,"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{}}},"user":"user-42",
		 "reasoning_effort":"low","metadata":{"k":"v"},"store":false,"service_tier":"auto","some_new_field":{"x":[1]}}`,
		`{"model":"free","messages":[{"role":"user","content":"hi"}],"temperature":null,"top_p":null,"max_tokens":null,"stream":null,"stop":null,
		 "tools":null,"tool_choice":null,"user":null,"route":null,"route_mode":null,"n":null,"response_format":null,"stream_options":null}`,
		`{"model":"free","messages":[{"role":"user","content":"hi"}],"tool_choice":"none","stop":"\n"}`,
	}
	for _, b := range bodies {
		if _, e := planChat(rt, []byte(b)); e != nil {
			t.Errorf("%.100s: refused: %d %s %s", b, e.Status, e.Code, e.Message)
		}
	}
}

func TestParseChatReadsTheFields(t *testing.T) {
	req, e := parseChat([]byte(`{"max_tokens":9,"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,
		"stream_options":{"include_usage":true},"n":3,"max_completion_tokens":4,"route":{"provider":"p"},"route_mode":"fast"}`))
	if e != nil {
		t.Fatal(e)
	}
	if req.model != "m" || !req.stream || !req.includeUsage || req.maxTokens != 4 || req.n != 3 || req.routeProvider != "p" || req.routeMode != "fast" {
		t.Fatalf("%+v", req)
	}
	if strings.Join(req.fields, ",") != "max_tokens,model,messages,stream,stream_options,n,max_completion_tokens,route,route_mode" {
		t.Fatalf("fields %v", req.fields)
	}
}

// TestValidationBoundsThePrompt: the bound added up while validating (the body is read once)
// is never below billing.PromptBound's, and equal to it for text without escapes.
func TestValidationBoundsThePrompt(t *testing.T) {
	bodies := []string{
		`{"model":"m","messages":[{"role":"user","content":"hello there","name":"bob"},{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"refusal","refusal":"no"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"ok \u00e9\n"}],
		  "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}, {"type": "function", "function": {"name": "g"}}]}`,
		// audio and file data count their bytes: they used to count nothing
		`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklGRgAAAABXQVZF","format":"wav"}},{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0x","filename":"a.pdf"}}]}]}`,
	}
	for i, b := range bodies {
		req, e := parseChat([]byte(b))
		if e != nil {
			t.Fatal(e)
		}
		want, err := billing.PromptBound([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if req.promptBound < int64(want) || (i != 2 && req.promptBound != int64(want)) {
			t.Errorf("body %d: bound %d, billing.PromptBound %d", i, req.promptBound, want)
		}
		if i == 3 && want < len("UklGRgAAAABXQVZF")+len("data:application/pdf;base64,JVBERi0x") {
			t.Errorf("audio and file data not in the bound: %d", want)
		}
	}
}
