package chat

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// upstreamJSON decodes an upstream body for lookups by path.
func upstreamJSON(t *testing.T, up *provider.Upstream) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(up.Body, &m); err != nil {
		t.Fatalf("body %s: %v", up.Body, err)
	}
	return m
}

// at follows a path of object keys and array indexes ("generationConfig.seed",
// "messages.0.content.0.source.media_type"); nil when absent.
func at(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i := 0
			for _, c := range k {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

const userHi = `"messages":[{"role":"user","content":"hi"}]`

// TestRequestFieldFates: every OpenAI request field either reaches the provider in its own
// terms, is refused as the client's fault (ErrBadRequest, a 400 naming the field and the fix)
// or, nested where the top-level removal cannot reach, is listed in Upstream.Removed. Before,
// response_format, n, seed, penalties, reasoning_effort, strict, names and image detail were
// dropped without a word, and temperature 1.5, image/jpg and six stop sequences went upstream
// to fail there.
func TestRequestFieldFates(t *testing.T) {
	const (
		A = ir.ProviderTypeAnthropic
		G = ir.ProviderTypeGemini
	)
	img := func(mt, detail string) string {
		return `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:` + mt + `;base64,AAAA","detail":"` + detail + `"}}]}]`
	}
	tool := `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{},"additionalProperties":false},"strict":true}}]`
	schema := `"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":{"type":"object","properties":{"x":{"type":"string"}}}}}`
	cases := []struct {
		kind, model, body string
		refused           []string       // substrings of the refusal; nil: accepted
		want              map[string]any // path -> value in the upstream body (nil value: absent)
		removed           []string
	}{
		// temperature: Anthropic's range is 0 to 1
		{A, "", `"temperature":1.5,` + userHi, []string{"temperature 1.5", "Anthropic", "0 to 1"}, nil, nil},
		{A, "", `"temperature":1,` + userHi, nil, map[string]any{"temperature": 1.0}, nil},
		{G, "", `"temperature":1.5,` + userHi, nil, map[string]any{"generationConfig.temperature": 1.5}, nil},
		// n: one answer per request
		{A, "", `"n":2,` + userHi, []string{"n=2", "Anthropic", "n=1"}, nil, nil},
		{G, "", `"n":3,` + userHi, []string{"n=3", "Gemini"}, nil, nil},
		{A, "", `"n":1,` + userHi, nil, map[string]any{"n": nil}, nil},
		{G, "", `"n":1,` + userHi, nil, map[string]any{"generationConfig": nil}, nil},
		// response_format
		{A, "", schema + `,` + userHi, nil, map[string]any{"output_config.format.type": "json_schema", "output_config.format.schema.properties.x.type": "string"}, nil},
		{A, "", `"response_format":{"type":"json_object"},` + userHi, []string{"json_object", "json_schema"}, nil, nil},
		{A, "", `"response_format":{"type":"text"},` + userHi, nil, map[string]any{"output_config": nil}, nil},
		{G, "", schema + `,` + userHi, nil, map[string]any{"generationConfig.responseMimeType": "application/json", "generationConfig.responseJsonSchema.properties.x.type": "string"}, nil},
		{G, "", `"response_format":{"type":"json_object"},` + userHi, nil, map[string]any{"generationConfig.responseMimeType": "application/json", "generationConfig.responseJsonSchema": nil}, nil},
		// seed, penalties (Gemini only; Anthropic never sees them: Parameters leaves them out)
		{G, "", `"seed":42,` + userHi, nil, map[string]any{"generationConfig.seed": 42.0}, nil},
		{G, "", `"seed":4294967296,` + userHi, []string{"seed", "2147483647"}, nil, nil},
		{G, "", `"presence_penalty":0.5,"frequency_penalty":-1,` + userHi, nil, map[string]any{"generationConfig.presencePenalty": 0.5, "generationConfig.frequencyPenalty": -1.0}, nil},
		{G, "", `"presence_penalty":0,"frequency_penalty":0,` + userHi, nil, map[string]any{"generationConfig": nil}, nil},
		// reasoning_effort: Gemini's thinking budget
		{G, "", `"reasoning_effort":"high",` + userHi, nil, map[string]any{"generationConfig.thinkingConfig.thinkingBudget": 24576.0}, nil},
		{G, "", `"reasoning_effort":"none",` + userHi, nil, map[string]any{"generationConfig.thinkingConfig.thinkingBudget": 0.0}, nil},
		{G, "", `"reasoning_effort":"xhigh",` + userHi, []string{"reasoning_effort", "none, minimal, low, medium or high"}, nil, nil},
		// stop: Gemini takes at most 5
		{G, "", `"stop":["a","b","c","d","e","f"],` + userHi, []string{"stop has 6", "at most 5"}, nil, nil},
		{G, "", `"stop":["a","b","c","d","e"],` + userHi, nil, map[string]any{"generationConfig.stopSequences.4": "e"}, nil},
		// tools[].function.strict: Anthropic has strict tools, Gemini none
		{A, "", tool + `,` + userHi, nil, map[string]any{"tools.0.strict": true}, nil},
		{G, "", tool + `,` + userHi, nil, map[string]any{"tools.0.functionDeclarations.0.name": "f"}, []string{"tools[].function.strict"}},
		// messages[].name: no place in either API
		{A, "", `"messages":[{"role":"system","content":"s","name":"boss"},{"role":"user","content":"hi","name":"alice"}]`, nil, map[string]any{"messages.0.content.0.text": "hi"}, []string{"messages[].name"}},
		{G, "", `"messages":[{"role":"user","content":"hi","name":"alice"}]`, nil, map[string]any{"contents.0.parts.0.text": "hi"}, []string{"messages[].name"}},
		// images: image/jpg normalised, detail other than auto dropped openly, other types refused
		{A, "", img("image/jpg", "low"), nil, map[string]any{"messages.0.content.0.source.media_type": "image/jpeg"}, []string{"messages[].content[].image_url.detail"}},
		{G, "", img("IMAGE/JPG", "high"), nil, map[string]any{"contents.0.parts.0.inlineData.mimeType": "image/jpeg"}, []string{"messages[].content[].image_url.detail"}},
		{A, "", img("image/gif", "auto"), nil, map[string]any{"messages.0.content.0.source.media_type": "image/gif"}, nil},
		{G, "", img("image/gif", "auto"), []string{`"image/gif"`, "image/png, image/jpeg, image/webp, image/heic, image/heif"}, nil, nil},
		{G, "", `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.example/a.GIF"}}]}]`, []string{`"image/gif"`}, nil, nil},
		{G, "", `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.example/a.jpg?s=1"}}]}]`, nil, map[string]any{"contents.0.parts.0.fileData.mimeType": "image/jpeg"}, nil},
		{A, "", img("image/svg+xml", ""), []string{"Anthropic takes images as image/jpeg, image/png, image/gif, image/webp"}, nil, nil},
		// tool call ids Anthropic would refuse are rewritten the same way on both ends
		{A, "", `"messages":[{"role":"assistant","tool_calls":[{"id":"functions.f:0","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"functions.f:0","content":"ok"}]`,
			nil, map[string]any{"messages.0.content.0.id": anthToolID("functions.f:0"), "messages.1.content.0.tool_use_id": anthToolID("functions.f:0")}, nil},
	}
	for _, c := range cases {
		model := cmpModel(c.kind, c.model)
		up, err := chat(t, c.kind, model, "{"+c.body+"}")
		if c.refused != nil {
			if !errors.Is(err, provider.ErrBadRequest) {
				t.Errorf("%s %s: err %v, want a refusal", c.kind, c.body, err)
				continue
			}
			for _, w := range c.refused {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s %s: refusal %q lacks %q", c.kind, c.body, err, w)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", c.kind, c.body, err)
			continue
		}
		body := upstreamJSON(t, up)
		for path, want := range c.want {
			if got := at(body, path); !equalJSON(got, want) {
				t.Errorf("%s %s: %s = %v, want %v (body %s)", c.kind, c.body, path, got, want, up.Body)
			}
		}
		if !slices.Equal(up.Removed, c.removed) {
			t.Errorf("%s %s: Removed %v, want %v", c.kind, c.body, up.Removed, c.removed)
		}
	}
}

func cmpModel(kind, model string) string {
	if model != "" {
		return model
	}
	if kind == ir.ProviderTypeGemini {
		return "gemini-2.5-flash"
	}
	return "claude-sonnet-4-5"
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestAnthToolIDsValidAndDistinct: every id Anthropic gets matches its rule, ids already in
// it are kept, and distinct ids stay distinct.
func TestAnthToolIDsValidAndDistinct(t *testing.T) {
	ids := []string{"call_abc", "toolu_01A-b", "functions.f:0", "functions_f_0", "functions.f:1", "a b", "a+b", geminiCallID("", 0, "c2lnbmF0dXJl+/==")}
	seen := map[string]string{}
	for _, id := range ids {
		got := anthToolID(id)
		for _, c := range got {
			if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				t.Errorf("anthToolID(%q) = %q has %q", id, got, c)
			}
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%q and %q both became %q", prev, id, got)
		}
		seen[got] = id
	}
	if got := anthToolID("call_abc"); got != "call_abc" {
		t.Errorf("a valid id changed: %q", got)
	}
}

// TestGeminiThoughtSignatureRoundTrip: the thoughtSignature of a Gemini function call reaches
// the client inside the tool call id (plain answer and stream), and comes back onto the
// functionCall part when the client replays the call, the tool result still finding its
// function by that id. Before, the signature was dropped and Gemini 3 refused the next turn.
func TestGeminiThoughtSignatureRoundTrip(t *testing.T) {
	sig := base64.StdEncoding.EncodeToString([]byte("opaque reasoning state \xff\xfe with bytes"))
	up, err := chat(t, ir.ProviderTypeGemini, "gemini-3-pro-preview", `{`+userHi+`}`)
	if err != nil {
		t.Fatal(err)
	}
	answer := `{"candidates":[{"content":{"role":"model","parts":[` +
		`{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"` + sig + `"},` +
		`{"functionCall":{"name":"get_time","args":{}}}]},"finishReason":"STOP"}]}`
	out, err := up.Response.Body([]byte(answer))
	if err != nil {
		t.Fatal(err)
	}
	msg, _, _ := completion(t, out)
	if len(msg.ToolCalls) != 2 {
		t.Fatalf("tool calls %+v", msg.ToolCalls)
	}
	signed, plain := msg.ToolCalls[0].ID, msg.ToolCalls[1].ID
	if !strings.Contains(signed, callSignatureMark) || plain != "call_1" {
		t.Fatalf("ids %q, %q: want the signature in the first only", signed, plain)
	}
	if len(signed) > MaxToolCallID || anthToolID(signed) != signed {
		t.Errorf("id %q: longer than clients may send back, or refused by Anthropic", signed)
	}

	// The stream gives the same id.
	sup, _ := chat(t, ir.ProviderTypeGemini, "gemini-3-pro-preview", `{"stream":true,`+userHi+`}`)
	chunks, err := sup.Response.Chunk([]byte("data: "+answer+"\n\n"), true)
	if err != nil || !strings.Contains(string(chunks), `"id":"`+signed+`"`) {
		t.Errorf("stream %s (%v) lacks id %q", chunks, err, signed)
	}

	// The client replays both calls and answers them.
	replay := `{"messages":[{"role":"user","content":"weather and time?"},` +
		`{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"` + signed + `","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},` +
		`{"id":"` + plain + `","type":"function","function":{"name":"get_time","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"` + signed + `","content":"sunny"},` +
		`{"role":"tool","tool_call_id":"` + plain + `","content":"noon"}]}`
	next, err := chat(t, ir.ProviderTypeGemini, "gemini-3-pro-preview", replay)
	if err != nil {
		t.Fatal(err)
	}
	body := upstreamJSON(t, next)
	if got := at(body, "contents.1.parts.0.thoughtSignature"); got != sig {
		t.Errorf("replayed call's thoughtSignature = %v, want %q (body %s)", got, sig, next.Body)
	}
	if got := at(body, "contents.1.parts.1.thoughtSignature"); got != nil {
		t.Errorf("the second parallel call got a signature: %v", got)
	}
	if at(body, "contents.2.parts.0.functionResponse.name") != "get_weather" || at(body, "contents.2.parts.1.functionResponse.name") != "get_time" {
		t.Errorf("function responses lost their names: %s", next.Body)
	}
	if strings.Contains(string(next.Body), callSignatureMark) {
		t.Errorf("the id's signature mark reached Gemini: %s", next.Body)
	}
}

// TestGeminiUnsignedCallsGetThePlaceholder: a replayed call without a signature (made by
// another provider of a route, or before the gateway carried them) gets Google's documented
// placeholder on the first call of its turn for Gemini 3 and names the gateway cannot date;
// Gemini 2.x, which does not check, gets nothing.
func TestGeminiUnsignedCallsGetThePlaceholder(t *testing.T) {
	replay := `{"messages":[{"role":"user","content":"go"},` +
		`{"role":"assistant","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"a","arguments":"{}"}},{"id":"toolu_2","type":"function","function":{"name":"b","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"toolu_1","content":"1"},{"role":"tool","tool_call_id":"toolu_2","content":"2"}]}`
	for model, want := range map[string]any{"gemini-3-flash-preview": skipSignature, "models/gemini-flash-latest": skipSignature, "gemini-2.5-pro": nil, "models/gemini-2.0-flash": nil} {
		up, err := chat(t, ir.ProviderTypeGemini, model, replay)
		if err != nil {
			t.Fatal(err)
		}
		body := upstreamJSON(t, up)
		if got := at(body, "contents.1.parts.0.thoughtSignature"); got != want {
			t.Errorf("%s: first call's signature %v, want %v", model, got, want)
		}
		if got := at(body, "contents.1.parts.1.thoughtSignature"); got != nil {
			t.Errorf("%s: second call's signature %v, want none", model, got)
		}
	}
}

// TestGeminiCallIDBounds: a signature that is not base64 or would make the id too long is
// left out (the id stays usable); an id that merely looks signed is kept whole.
func TestGeminiCallIDBounds(t *testing.T) {
	if got := geminiCallID("", 2, "not base64!"); got != "call_2" {
		t.Errorf("bad signature: id %q", got)
	}
	huge := base64.StdEncoding.EncodeToString(make([]byte, MaxToolCallID))
	if got := geminiCallID("g1", 0, huge); got != "g1" {
		t.Errorf("oversized signature: id of %d bytes", len(got))
	}
	for _, id := range []string{"call_1__ts_", "call_1__ts_!!", "__ts_c2ln"} {
		if base, sig := splitGeminiCallID(id); base != id || sig != "" {
			t.Errorf("splitGeminiCallID(%q) = %q, %q; want the id whole", id, base, sig)
		}
	}
	sig := base64.StdEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe, 1})
	if base, got := splitGeminiCallID(geminiCallID("abc", 0, sig)); base != "abc" || got != sig {
		t.Errorf("round trip: %q, %q; want abc, %q", base, got, sig)
	}
}
