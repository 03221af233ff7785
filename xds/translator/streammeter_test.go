package translator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/translator"
)

// The stream meter in the real Envoy: what the client gets (compared byte for byte with what
// extproc/chat/answer.go writes for the same stream) and what the access log reads of
// tollway.meter.

const (
	providerModel = "gpt-4o-2024-08-06"
	catalogModel  = "catalog-model"
	requestID     = "req-1"
)

// The lanes every case can pick: the gateway asked for usage (drop), the client did (keep), the
// stream is not in the fast lane (off) or has no lane at all (absent).
var meterLanes = []meterLane{
	{name: "drop", lane: map[string]any{"fast": true, "model": catalogModel, "drop_usage": true, "request_id": requestID}, lua: "-"},
	{name: "keep", lane: map[string]any{"fast": true, "model": catalogModel, "drop_usage": false, "request_id": requestID}, lua: "-"},
	{name: "noid", lane: map[string]any{"fast": true, "model": catalogModel, "drop_usage": true}, lua: "-"},
	{name: "off", lane: map[string]any{"fast": false, "model": catalogModel, "drop_usage": true, "request_id": requestID}, lua: "-"},
	{name: "absent", lua: "-"},
	// The script failing (on an event that says BOOM) must lose no byte.
	{name: "faulty", lane: map[string]any{"fast": true, "model": catalogModel, "drop_usage": true, "request_id": requestID}, lua: faultyScript()},
}

func faultyScript() string {
	script := translator.StreamMeter().GetDefaultSourceCode().GetInlineString()
	anchor := "local function on_event(st, ev)\n"
	if !strings.Contains(script, anchor) {
		panic("the script has no on_event to break")
	}
	return strings.Replace(script, anchor, anchor+"  if find(ev, \"BOOM\", 1, true) then error(\"injected\") end\n", 1)
}

// event is one SSE event of data.
func event(data string) string { return "data: " + data + "\n\n" }

func chunk(model, delta, finish string) string {
	return event(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"` + model +
		`","system_fingerprint":"fp_1","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]}`)
}

func usageChunk(model string) string {
	return event(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"` + model +
		`","system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,` +
		`"prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"image_tokens":1}}}`)
}

const done = "data: [DONE]\n\n"

// answer is an OpenAI stream as the provider sends it (model the provider's) or as the client
// must get it (model the catalog's, usage dropped or kept).
func answer(model string, usage bool) []string {
	out := []string{
		chunk(model, `{"role":"assistant","content":""}`, "null"),
		chunk(model, `{"content":"Hello"}`, "null"),
		chunk(model, `{"content":" world"}`, "null"),
		chunk(model, `{}`, `"stop"`),
	}
	if usage {
		out = append(out, usageChunk(model))
	}
	return append(out, done)
}

var usageMeter = map[string]any{"text_bytes": 11.0, "finished": true, "done": true, "ended": true, "usage": true,
	"prompt_tokens": 9.0, "completion_tokens": 2.0, "cached_tokens": 3.0, "image_tokens": 1.0}

// errorEventWant is what answer.go makes of a stream event, by extproc's own functions: the
// spec's error event when data is an error event, else nil.
func errorEventWant(data, id string) []byte {
	if !strings.Contains(data, `"error"`) || strings.Contains(data, `"choices"`) {
		return nil
	}
	var ev struct {
		Error jsontext.Value `json:"error"`
	}
	if jsonv2.Unmarshal([]byte(data), &ev, provider.Lenient) != nil || len(ev.Error) == 0 || string(ev.Error) == "null" {
		return nil
	}
	e := &core.APIError{Code: "upstream_error", Message: "the provider failed mid-stream"}
	core.ReadProviderError(json.RawMessage(ev.Error), e)
	return e.Body(id)
}

// cutWant is the error event answer.go appends to a stream that ended before it finished.
func cutWant(id string) string {
	e := core.Errorf(http.StatusBadGateway, "upstream_error", "the provider's stream ended before the answer finished (no finish_reason and no [DONE]): the answer is incomplete")
	return "data: " + string(e.Body(id)) + "\n\n"
}

// errorData are provider error events and events that look like one, each data of one event.
var errorData = []string{
	`{"error":{"message":"Rate limit reached for <model> & \"org\" in 1s","type":"rate_limit_error","code":"rate_limit_exceeded","param":null}}`,
	`{"error":{"message":"boom","type":"server_error","code":null}}`,
	`{"error":{"message":"d\u00e9j\u00e0 vu 😀 \ud83d\ude00 lone \ud83d then \udc00, \u2028 line\ttab\u0001 \u007f é","code":503}}`,
	`{"error":"a plain string"}`,
	`{"error":""}`,
	`{"error":{"code":"no_message"}}`,
	`{"error":{"message":5,"type":"t"}}`,
	`{"error":{"Message":"cased","STATUS":"UNAVAILABLE"}}`,
	`{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}`,
	`{"error":{"message":"first"},"error":{"message":"second","type":"t2"}}`,
	`{"error":{"message":"m","type":null,"status":"S"}}`,
	`{"error":[1,2]}`,
	`{"error" : { "message" : "spaced" , "type" : "t" } , "id" : 1 }`,
	"{\"error\":{\"message\":\"bad \xff byte and \xe2\x82 cut\"}}",
	`{"error":{"message":"m"},"choices":[]}`,
	`{"error":null,"n":1}`,
	`{"error":{"message":"trailing"}} x`,
	`{"error":{"message":"nested \"quote\" \\ back\/slash"}}`,
}

// meterCase is one answer through one lane: what the provider writes, piece by piece, and what
// the client and the access log must get.
type meterCase struct {
	name    string
	lane    string
	pieces  []string
	delay   time.Duration
	want    string
	meter   map[string]any // nil: no tollway.meter at all
	status  int
	ctype   string
	trailer bool
	sized   bool
}

func joined(s []string) string { return strings.Join(s, "") }

// bytewise cuts s into pieces of one byte.
func bytewise(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

// randomCuts cuts s at n random points (a fixed seed: the same cuts each run).
func randomCuts(s string, n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed))
	cuts := map[int]bool{}
	for len(cuts) < n {
		cuts[1+r.IntN(len(s)-1)] = true
	}
	var out []string
	last := 0
	for i := 1; i < len(s); i++ {
		if cuts[i] {
			out = append(out, s[last:i])
			last = i
		}
	}
	return append(out, s[last:])
}

// unicodeAnswer's text has escapes, surrogate pairs and one lone, and raw multi-byte UTF-8.
var unicodeAnswer = []string{
	chunk(catalogModel, `{"content":"h\u00e9llo \u65e5\u672c \ud83d\ude00 \ud83d alone"}`, "null"),
	chunk(catalogModel, `{"content":"日本語 😀 déjà"}`, "null"),
	chunk(catalogModel, `{"content":"a\nb\"c\\d\/e\tf\u0000"}`, "null"),
	chunk(catalogModel, `{}`, `"stop"`),
}

// toolAnswer streams a tool call as OpenAI does: the name first, the arguments in pieces.
var toolAnswer = []string{
	chunk(catalogModel, `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "null"),
	chunk(catalogModel, `{"tool_calls":[{"index":0,"function":{"arguments":"{\"locat"}}]}`, "null"),
	chunk(catalogModel, `{"tool_calls":[{"index":0,"function":{"arguments":"ion\": \"Par\u00eds\"}"}}]}`, "null"),
	chunk(catalogModel, `{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"now","arguments":"{}"}}]}`, "null"),
	chunk(catalogModel, `{}`, `"tool_calls"`),
	done,
}

// reasoningAnswer is a reasoning model's stream cut before its answer finished, its reasoning
// under each name OpenAI-compatible servers use: reasoning_content (DeepSeek, vLLM), reasoning
// (OpenRouter, with the same text again in reasoning_details, and Ollama), both at once (a
// server sending the old name beside the new: the text once). Escapes and multi-byte UTF-8.
var reasoningAnswer = []string{
	chunk(catalogModel, `{"role":"assistant","content":null,"reasoning_content":""}`, "null"),
	chunk(catalogModel, `{"content":null,"reasoning_content":"Let me think: \u00e9t\u00e9 \"quoted\" \ud83d\ude00"}`, "null"),
	chunk(catalogModel, `{"content":null,"reasoning_content":"日本語 then more"}`, "null"),
	chunk(catalogModel, `{"content":"","reasoning":"OpenRouter's \\ way","reasoning_details":[{"type":"reasoning.text","text":"OpenRouter's \\ way","format":"unknown","index":0}]}`, "null"),
	chunk(catalogModel, `{"reasoning_content":"twice over","reasoning":"twice over"}`, "null"),
	chunk(catalogModel, `{"reasoning":null,"reasoning_content":null,"content":"The answer"}`, "null"),
}

// textBytes is what the meter must count of events: the UTF-8 bytes of their content, their
// reasoning (the longer of its two names) and tool calls' names and arguments, decoded by Go.
func textBytes(t *testing.T, events []string) int {
	n := 0
	for _, ev := range events {
		data, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content          *string
					ReasoningContent string `json:"reasoning_content"`
					Reasoning        string
					ToolCalls        []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				n += len(*ch.Delta.Content)
			}
			n += max(len(ch.Delta.ReasoningContent), len(ch.Delta.Reasoning))
			for _, tc := range ch.Delta.ToolCalls {
				n += len(tc.Function.Name) + len(tc.Function.Arguments)
			}
		}
	}
	return n
}

// huge is one event over the filter's 1 MiB bound, by so much that some chunk always ends inside it past the
// bound (the bound is on what is held between chunks).
var huge = chunk(providerModel, `{"content":"`+strings.Repeat("x", 3<<20)+`"}`, "null")

// bytesPieces cuts s into pieces of n bytes.
func bytesPieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		out, s = append(out, s[:n]), s[n:]
	}
	return append(out, s)
}

func meterCases(t *testing.T) []meterCase {
	in := joined(answer(providerModel, true))
	dropped := joined(answer(catalogModel, false))
	kept := joined(answer(catalogModel, true))
	crlf := strings.ReplaceAll(in, "\n", "\r\n")
	var errIn, errOut strings.Builder
	for _, d := range errorData {
		errIn.WriteString(event(d))
		if w := errorEventWant(d, requestID); w != nil {
			errOut.WriteString(event(string(w)))
		} else {
			errOut.WriteString(event(d)) // no model member: untouched
		}
	}
	errIn.WriteString(done)
	errOut.WriteString(done)
	cut := []string{chunk(providerModel, `{"content":"Hel"}`, "null"), chunk(providerModel, `{"content":"lo"}`, "null")}
	cutTail := strings.TrimSuffix(chunk(providerModel, `{"content":"!"}`, "null"), "\n\n")
	return []meterCase{
		{name: "usage read and dropped", lane: "drop", pieces: answer(providerModel, true), delay: 5 * time.Millisecond, want: dropped, meter: usageMeter},
		{name: "usage read and kept", lane: "keep", pieces: answer(providerModel, true), delay: 5 * time.Millisecond, want: kept, meter: usageMeter},
		{name: "model already the catalog's", lane: "keep", pieces: answer(catalogModel, true), want: kept, meter: usageMeter},
		{name: "one byte a chunk", lane: "drop", pieces: bytewise(in), delay: time.Millisecond, want: dropped, meter: usageMeter},
		{name: "random cuts", lane: "drop", pieces: randomCuts(in, 40, 7), delay: 2 * time.Millisecond, want: dropped, meter: usageMeter},
		{name: "every event in one chunk", lane: "drop", pieces: []string{in}, want: dropped, meter: usageMeter},
		{name: "a provider's content-length", lane: "drop", sized: true, pieces: answer(providerModel, true), delay: 2 * time.Millisecond, want: dropped, meter: usageMeter},
		{name: "CRLF line ends", lane: "drop", pieces: randomCuts(crlf, 30, 3), delay: 2 * time.Millisecond,
			want: strings.ReplaceAll(dropped, "\n", "\r\n"), meter: usageMeter},
		{name: "error events rewritten", lane: "drop", pieces: []string{errIn.String()}, want: errOut.String(),
			meter: map[string]any{"text_bytes": 0.0, "error": true, "done": true, "ended": true}},
		{name: "error event without request id", lane: "noid", pieces: []string{event(errorData[0])},
			want: event(string(errorEventWant(errorData[0], ""))), meter: map[string]any{"text_bytes": 0.0, "error": true, "ended": true}},
		{name: "ended before finishing", lane: "drop", pieces: cut, delay: 5 * time.Millisecond,
			want:  chunk(catalogModel, `{"content":"Hel"}`, "null") + chunk(catalogModel, `{"content":"lo"}`, "null") + cutWant(requestID),
			meter: map[string]any{"text_bytes": 5.0, "error": true, "ended": true}},
		{name: "ended inside an event", lane: "drop", pieces: append(append([]string{}, cut...), cutTail), delay: 5 * time.Millisecond,
			want: chunk(catalogModel, `{"content":"Hel"}`, "null") + chunk(catalogModel, `{"content":"lo"}`, "null") +
				strings.TrimSuffix(chunk(catalogModel, `{"content":"!"}`, "null"), "\n\n") + cutWant(requestID),
			meter: map[string]any{"text_bytes": 6.0, "error": true, "ended": true}},
		{name: "not in the fast lane", lane: "off", pieces: append(answer(providerModel, true), event(errorData[0])), want: in + event(errorData[0])},
		{name: "no lane", lane: "absent", pieces: append(cut, event(errorData[0])), want: joined(cut) + event(errorData[0])},
		{name: "model member nested and after the choices", lane: "drop",
			pieces: []string{event(`{"id":"x","meta":{"model":"inner","n":[1,{"model":"deep"}]},"choices":[{"delta":{"content":"say \"model\": \"x\" {["}}],"model":"` + providerModel + `"}`), done},
			want:   event(`{"id":"x","meta":{"model":"inner","n":[1,{"model":"deep"}]},"choices":[{"delta":{"content":"say \"model\": \"x\" {["}}],"model":"`+catalogModel+`"}`) + done,
			meter:  map[string]any{"text_bytes": 19.0, "done": true, "ended": true}}, // say "model": "x" {[
		{name: "bytes of text counted as decoded", lane: "drop", pieces: randomCuts(joined(unicodeAnswer), 25, 11), delay: 2 * time.Millisecond,
			want: joined(unicodeAnswer), meter: map[string]any{"text_bytes": float64(textBytes(t, unicodeAnswer)), "finished": true, "ended": true}},
		{name: "tool call names and arguments counted", lane: "drop", pieces: toolAnswer, delay: 2 * time.Millisecond,
			want: joined(toolAnswer), meter: map[string]any{"text_bytes": float64(textBytes(t, toolAnswer)), "finished": true, "done": true, "ended": true}},
		{name: "reasoning counted as text", lane: "drop", pieces: randomCuts(joined(reasoningAnswer), 30, 5), delay: 2 * time.Millisecond,
			want: joined(reasoningAnswer) + cutWant(requestID), meter: map[string]any{"text_bytes": float64(textBytes(t, reasoningAnswer)), "error": true, "ended": true}},
		{name: "other SSE lines", lane: "drop",
			pieces: []string{": keep-alive\n\n", "event: message\nid: 7\n" + strings.TrimPrefix(chunk(providerModel, `{"content":"a"}`, "null"), ""),
				"\n\n\ndata:" + strings.TrimPrefix(chunk(providerModel, `{"content":"b"}`, "null"), "data: "),
				"data: {\"error\":\ndata: {\"message\":\"two lines\"}}\nid: 8\n\n"},
			want: ": keep-alive\n\n" + "event: message\nid: 7\n" + chunk(catalogModel, `{"content":"a"}`, "null") + "\n\n\n" + chunk(catalogModel, `{"content":"b"}`, "null") +
				"data: " + string(errorEventWant("{\"error\":\n{\"message\":\"two lines\"}}", requestID)) + "\nid: 8\n\n",
			meter: map[string]any{"text_bytes": 2.0, "error": true, "ended": true}},
		{name: "done without a finish reason", lane: "drop", pieces: []string{cut[0], done}, want: chunk(catalogModel, `{"content":"Hel"}`, "null") + done,
			meter: map[string]any{"text_bytes": 3.0, "done": true, "ended": true}},
		{name: "usage events that are not usage", lane: "drop", pieces: []string{
			event(`{"model":"` + providerModel + `","choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0}}`),
			event(`{"model":"` + providerModel + `","choices":[],"usage":{"prompt_tokens":5.0,"completion_tokens":1}}`),
			// counts no int64 holds: Go's decoder refuses the usage whole
			event(`{"model":"` + providerModel + `","choices":[],"usage":{"prompt_tokens":100000000000000000000,"completion_tokens":1}}`),
			event(`{"model":"` + providerModel + `","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":-9223372036854775809}}`),
			event(`{"model":"` + providerModel + `","usage":{"prompt_tokens":4,"completion_tokens":2}}`), done},
			want: event(`{"model":"`+catalogModel+`","choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0}}`) +
				event(`{"model":"`+catalogModel+`","choices":[],"usage":{"prompt_tokens":5.0,"completion_tokens":1}}`) +
				event(`{"model":"`+catalogModel+`","choices":[],"usage":{"prompt_tokens":100000000000000000000,"completion_tokens":1}}`) +
				event(`{"model":"`+catalogModel+`","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":-9223372036854775809}}`) + done,
			meter: map[string]any{"text_bytes": 0.0, "done": true, "ended": true, "usage": true, "prompt_tokens": 4.0, "completion_tokens": 2.0, "cached_tokens": 0.0, "image_tokens": 0.0}},
		{name: "an event over the bound", lane: "drop", pieces: append(bytesPieces(huge, 64<<10), answer(providerModel, true)...), delay: time.Millisecond,
			want: huge + dropped, meter: map[string]any{"text_bytes": 11.0, "finished": true, "done": true, "ended": true, "usage": true, "oversized": true,
				"prompt_tokens": 9.0, "completion_tokens": 2.0, "cached_tokens": 3.0, "image_tokens": 1.0}},
		// Lua cannot add a body once the provider's trailers came: the held tail and the error
		// event are not sent (the filter logs it), the metadata still says what happened.
		{name: "ended with trailers", lane: "drop", trailer: true, pieces: append(append([]string{}, cut...), cutTail), delay: 5 * time.Millisecond,
			want:  chunk(catalogModel, `{"content":"Hel"}`, "null") + chunk(catalogModel, `{"content":"lo"}`, "null"),
			meter: map[string]any{"text_bytes": 6.0, "error": true, "ended": true}},
		{name: "the script failing", lane: "faulty", pieces: []string{cut[0], cut[1][:20], cut[1][20:] + event(`{"x":"BOOM"}`) + cut[1], usageChunk(providerModel)},
			delay: 5 * time.Millisecond,
			want:  chunk(catalogModel, `{"content":"Hel"}`, "null") + cut[1] + event(`{"x":"BOOM"}`) + cut[1] + usageChunk(providerModel),
			// "lo" was counted before BOOM failed the chunk, which then went on as it came.
			meter: map[string]any{"text_bytes": 5.0, "failed": true, "ended": true}},
		{name: "an error answer", lane: "drop", status: http.StatusTooManyRequests, ctype: "application/json",
			pieces: []string{errorData[0]}, want: errorData[0]},
		{name: "a whole JSON answer", lane: "drop", ctype: "application/json",
			pieces: []string{`{"model":"` + providerModel + `","choices":[]}`}, want: `{"model":"` + providerModel + `","choices":[]}`},
	}
}

func TestStreamMeter(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the real Envoy (make test runs it)")
	}
	e := startMeterEnvoy(t, meterLanes, 2)
	t.Run("cases", func(t *testing.T) {
		for i, c := range meterCases(t) {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				id := fmt.Sprintf("case-%d", i)
				e.provider.add(id, &sseAnswer{status: c.status, ctype: c.ctype, pieces: c.pieces, delay: c.delay, trailer: c.trailer, sized: c.sized})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := e.get(ctx, c.lane, id)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != c.want {
					t.Errorf("the client got\n%q\nwant\n%q", got, c.want)
				}
				if l := e.logLine(t, id); !reflect.DeepEqual(l.Meter, c.meter) {
					t.Errorf("tollway.meter = %v, want %v", l.Meter, c.meter)
				}
			})
		}
	})
	if n := e.luaErrors(t, meterLanes); n != 0 {
		t.Errorf("the filter failed %d times:\n%s", n, e.logs.String())
	}
}

// A client that goes away mid-stream: Envoy does not resume the script after the reset, so the
// access log has what the filter published by then: the bytes of text that reached the client
// but fewer than StreamMeterLagBytes.
func TestStreamMeterClientGone(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the real Envoy (make test runs it)")
	}
	e := startMeterEnvoy(t, meterLanes[:1], 1)
	sent := []string{chunk(providerModel, `{"role":"assistant","content":""}`, "null")}
	for _, text := range []string{strings.Repeat("abcdefghij", 3), strings.Repeat("d\u00e9f", 10), strings.Repeat("x", 30), "0123456789"} {
		sent = append(sent, chunk(providerModel, `{"content":"`+text+`"}`, "null"))
	}
	const total = 110 // bytes of text sent (é is two)
	hold := make(chan struct{})
	a := &sseAnswer{pieces: append(sent, chunk(providerModel, `{"content":"never"}`, "null"), chunk(providerModel, `{}`, `"stop"`), done),
		delay: 5 * time.Millisecond, holdAt: len(sent), hold: hold}
	e.provider.add("gone", a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reqCtx, cut := context.WithCancel(ctx)
	res, err := e.get(reqCtx, "drop", "gone")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(res.Body)
	var got strings.Builder
	for events := 0; events < len(sent); {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", got.String(), err)
		}
		got.WriteString(line)
		if line == "\n" {
			events++
		}
	}
	cut() // the client leaves with the provider still streaming
	res.Body.Close()
	l := e.logLine(t, "gone")
	close(hold)
	n, _ := l.Meter["text_bytes"].(float64)
	if len(l.Meter) != 1 || n > total || n <= total-translator.StreamMeterLagBytes || !strings.Contains(l.Flags, "DC") {
		t.Errorf("access log after the client left: meter %v flags %q; want text_bytes in (%d, %d] alone and DC (the client got %q)",
			l.Meter, l.Flags, total-translator.StreamMeterLagBytes, total, got.String())
	}
	if textBytes(t, sent) != total {
		t.Fatalf("the test sends %d bytes of text, not %d", textBytes(t, sent), total)
	}
	select {
	case <-a.stopped:
	case <-ctx.Done():
		t.Fatal("the provider's stream was not ended after the client left")
	}
}

// The Go side's constants are the script's.
func TestStreamMeterConstants(t *testing.T) {
	script := translator.StreamMeter().GetDefaultSourceCode().GetInlineString()
	for _, want := range []string{
		fmt.Sprintf("local LAG_BYTES = %d\n", translator.StreamMeterLagBytes),
		fmt.Sprintf("local LANE, METER = %q, %q\n", translator.StreamMeterLaneNamespace, translator.StreamMeterNamespace),
	} {
		if !strings.Contains(script, want) {
			t.Errorf("the script has no %q", want)
		}
	}
	if translator.StreamMeter().GetStatPrefix() != "stream_meter" {
		t.Errorf("stat prefix %q: the error counter tests read http.<hcm>.lua.stream_meter.errors", translator.StreamMeter().GetStatPrefix())
	}
}
