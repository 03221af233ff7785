package chat

import (
	"regexp"
	"strings"
	"testing"

	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

// Issue 10's answer-side defects, each on the shape of the recording that showed it (the
// recorded corpus in testdata/recorded runs them all whole). Every stream is fed whole and in
// small pieces: what the client sees must not depend on where Envoy cut the body.

var randomID = regexp.MustCompile(`"id":"chatcmpl-[A-Z0-9]+"`)

// clientSees translates a provider stream the way the upstream ext_proc does and reads it as
// an OpenAI client would.
func clientSees(t *testing.T, kind, in string) fuzzcheck.Stream {
	t.Helper()
	// Gemini ids are random without a responseId.
	sameID := func(b []byte) string { return randomID.ReplaceAllString(string(b), `"id":"chatcmpl-X"`) }
	whole := feedStream(t, kind, []byte(in), 0, false)
	for _, size := range []int{1, 3, 17} {
		if got := feedStream(t, kind, []byte(in), size, true); sameID(got) != sameID(whole) {
			t.Fatalf("fed in %d-byte pieces the output differs:\n%s\nwhole:\n%s", size, got, whole)
		}
	}
	s, err := fuzzcheck.CheckStream(whole)
	if err != nil {
		t.Fatalf("%v\n%s", err, whole)
	}
	return s
}

// TestAnthropicToolCallWithoutArguments: content_block_start with input {} and one
// input_json_delta of "" reached the client as "arguments": "" (not JSON). Item 1.
func TestAnthropicToolCallWithoutArguments(t *testing.T) {
	in := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_time\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":20}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	s := clientSees(t, ir.ProviderTypeAnthropic, in)
	if len(s.Calls) != 1 || s.Calls[0].Args != "{}" || s.Finish != "tool_calls" || !s.Done {
		t.Fatalf("client saw %+v; want one call with arguments {}", s)
	}
}

// TestGeminiErrorInsideA200Stream: Gemini writes a failure after its last event as bare JSON
// (no "data:"). It was dropped: the stream ended after "Okay" as if complete, or, when the
// chunks had repeated finishReason STOP, with finish_reason stop and [DONE]. Item 2.
func TestGeminiErrorInsideA200Stream(t *testing.T) {
	okay := `data: {"candidates":[{"content":{"parts":[{"text":"Okay"}],"role":"model"}%s}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6},"modelVersion":"gemini-2.0-flash"}` + "\r\n\r\n"
	cancelled := `{"error":{"code":499,"message":"The operation was cancelled.","status":"CANCELLED"}}` + "\r\n"
	for name, in := range map[string]string{
		"no finish":      strings.ReplaceAll(okay, "%s", "") + cancelled,
		"repeated STOP":  strings.ReplaceAll(okay, "%s", `,"finishReason":"STOP"`) + cancelled,
		"as array":       strings.ReplaceAll(okay, "%s", `,"finishReason":"STOP"`) + "[" + strings.TrimSpace(cancelled) + "]\r\n",
		"as data":        strings.ReplaceAll(okay, "%s", `,"finishReason":"STOP"`) + "data: " + cancelled + "\r\n",
		"pretty printed": strings.ReplaceAll(okay, "%s", "") + "{\n  \"error\": {\n    \"code\": 499,\n    \"message\": \"The operation was cancelled.\",\n    \"status\": \"CANCELLED\"\n  }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			s := clientSees(t, ir.ProviderTypeGemini, in)
			if s.Text != "Okay" || !strings.Contains(s.Error, "cancelled") || s.Done || s.Finish != "" {
				t.Fatalf("client saw %+v; want Okay, then the error, no finish and no [DONE]", s)
			}
		})
	}
}

// TestStreamsThatEndUnfinishedFail: a 200 stream that ends before the provider finished must
// not look like success. Item 2.
func TestStreamsThatEndUnfinishedFail(t *testing.T) {
	for kind, in := range map[string]string{
		ir.ProviderTypeGemini: `data: {"candidates":[{"content":{"parts":[{"text":"Half an ans"}],"role":"model"}}]}` + "\r\n\r\n",
		ir.ProviderTypeAnthropic: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Half an ans\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n",
	} {
		s := clientSees(t, kind, in)
		if s.Text != "Half an ans" || !strings.Contains(s.Error, "incomplete") || s.Done || s.Finish != "" {
			t.Errorf("%s: client saw %+v; want the text, then an error, no finish and no [DONE]", kind, s)
		}
	}
}

// TestGeminiLastFinishReasonWins: older Vertex streams put STOP on every chunk; a later
// RECITATION was lost and content followed the first finish_reason. Item 3.
func TestGeminiLastFinishReasonWins(t *testing.T) {
	ev := func(text, reason string) string {
		return `data: {"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"},"finishReason":"` + reason + `"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":3,"totalTokenCount":7}}` + "\r\n\r\n"
	}
	s := clientSees(t, ir.ProviderTypeGemini, ev("One, ", "STOP")+ev("two, ", "STOP")+ev("three", "RECITATION"))
	if s.Text != "One, two, three" || s.Finish != "content_filter" || !s.Done {
		t.Fatalf("client saw %+v; want all the text and one finish_reason content_filter", s)
	}
}

// TestAnthropicUsageTakesTheLatestCountZeroIncluded: message_delta said output_tokens 0 after
// message_start said 1, and cache_read_input_tokens 0 at the end: the earlier values were
// billed. Item 4.
func TestAnthropicUsageTakesTheLatestCountZeroIncluded(t *testing.T) {
	in := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1,\"cache_read_input_tokens\":8}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":0,\"cache_read_input_tokens\":0}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	s := clientSees(t, ir.ProviderTypeAnthropic, in)
	if s.Usage == nil || s.Usage.CompletionTokens != 0 || s.Usage.PromptTokens != 10 || s.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("usage %+v; want prompt 10, completion 0, cached 0", s.Usage)
	}
}

// TestReasoningTokensReported: both providers bill thinking as output; the client sees how
// much of the completion it was. Item 6.
func TestReasoningTokensReported(t *testing.T) {
	gem := `data: {"candidates":[{"content":{"parts":[{"text":"Hmm","thought":true},{"text":"42"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":1,"thoughtsTokenCount":30,"totalTokenCount":35}}` + "\r\n\r\n"
	s := clientSees(t, ir.ProviderTypeGemini, gem)
	if s.Text != "42" || s.Usage == nil || s.Usage.CompletionTokens != 31 || s.Usage.CompletionTokensDetails.ReasoningTokens != 30 {
		t.Fatalf("gemini: client saw %+v usage %+v; want completion 31 of which reasoning 30", s, s.Usage)
	}
	anth := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me add two and two: that is four.\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"4\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	s = clientSees(t, ir.ProviderTypeAnthropic, anth)
	if r := s.Usage.CompletionTokensDetails.ReasoningTokens; s.Text != "4" || r < 5 || r > 15 || s.Usage.CompletionTokens != 15 {
		t.Fatalf("anthropic: client saw %+v usage %+v; want completion 15 with the thinking's ~10 tokens as reasoning", s, s.Usage)
	}
}

// TestGeminiStreamWithoutUsageHasNoMadeUpUsage: without usageMetadata the translator invents
// no counts (a zero usage chunk would bill nothing); the router adds an estimated one for
// clients that asked (extproc TestEstimatedUsageChunk). Item 5.
func TestGeminiStreamWithoutUsageHasNoMadeUpUsage(t *testing.T) {
	s := clientSees(t, ir.ProviderTypeGemini, `data: {"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"finishReason":"STOP"}]}`+"\r\n\r\n")
	if s.Text != "Hi" || !s.Done || s.Usage != nil {
		t.Fatalf("client saw %+v", s)
	}
}

// TestAnthropicWholeMessageInMessageStart: a resumed programmatic tool call arrives whole in
// message_start (content with the tool_use, stop_reason tool_use) followed by message_stop;
// the client got no tool call and finish_reason stop. Shape of vercel/ai's recorded
// anthropic-programmatic-tool-calling stream.
func TestAnthropicWholeMessageInMessageStart(t *testing.T) {
	in := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5-20250929\",\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\"," +
		"\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"rollDie\",\"input\":{\"player\":\"player2\"},\"caller\":{\"type\":\"code_execution_20250825\",\"tool_id\":\"srvtoolu_01\"}}]," +
		"\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	s := clientSees(t, ir.ProviderTypeAnthropic, in)
	if len(s.Calls) != 1 || s.Calls[0].Name != "rollDie" || s.Calls[0].Args != `{"player":"player2"}` || s.Finish != "tool_calls" || !s.Done {
		t.Fatalf("client saw %+v", s)
	}
}

// TestGeminiStreamedFunctionCallArguments: Gemini 3 streams a call's arguments as partialArgs
// (a value at a JSON path, strings in pieces) between a part with the name and willContinue
// and a part without willContinue; the client got several nameless calls. Shape of vercel/ai's
// recorded google stream-tool-call-arguments streams.
func TestGeminiStreamedFunctionCallArguments(t *testing.T) {
	ev := func(fc string) string {
		return `data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":` + fc + `}]}}],"responseId":"r1","modelVersion":"gemini-3-flash-preview"}` + "\r\n\r\n"
	}
	in := `data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"writeItems","willContinue":true},"thoughtSignature":"c2ln"}]}}],"responseId":"r1"}` + "\r\n\r\n" +
		ev(`{"partialArgs":[{"jsonPath":"$.operations[0].action","stringValue":"ad","willContinue":true}],"willContinue":true}`) +
		ev(`{"partialArgs":[{"jsonPath":"$.operations[0].action","stringValue":"d"}],"willContinue":true}`) +
		ev(`{"partialArgs":[{"jsonPath":"$.operations[0].price","numberValue":0.50000000000000001}],"willContinue":true}`) +
		ev(`{"partialArgs":[{"jsonPath":"$.operations[1]['item id']","stringValue":"banana"},{"jsonPath":"$.dry_run","boolValue":false}],"willContinue":true}`) +
		ev(`{}`) +
		ev(`{"name":"read_screen","willContinue":true}`) +
		ev(`{"partialArgs":[{"jsonPath":"$.id","stringValue":"C"}]}`) +
		`data: {"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":54,"candidatesTokenCount":74,"thoughtsTokenCount":121,"totalTokenCount":249},"responseId":"r1"}` + "\r\n\r\n"
	s := clientSees(t, ir.ProviderTypeGemini, in)
	want := []fuzzcheck.Call{
		{Name: "writeItems", Args: `{"operations":[{"action":"add","price":0.50000000000000001},{"item id":"banana"}],"dry_run":false}`},
		{Name: "read_screen", Args: `{"id":"C"}`},
	}
	if len(s.Calls) != 2 || s.Finish != "tool_calls" || !s.Done {
		t.Fatalf("client saw %+v", s)
	}
	for i, c := range s.Calls {
		if c.Name != want[i].Name || c.Args != want[i].Args {
			t.Errorf("call %d is %s(%s), want %s(%s)", i, c.Name, c.Args, want[i].Name, want[i].Args)
		}
	}
	if !strings.Contains(s.Calls[0].ID, "c2ln") {
		t.Errorf("the first call's id %q lost its thought signature", s.Calls[0].ID)
	}
}
