package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// A Gemini provider that answers each stream with a body as Google sent it in recorded traffic
// (CRLF framing), chosen by the prompt: the failures of issue 10 seen through the real Envoy.
var geminiBodies = map[string]string{
	// A failure written after the last event as bare JSON, inside the 200.
	"cancel": `data: {"candidates":[{"content":{"parts":[{"text":"Okay"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6},"modelVersion":"gemini-2.0-flash"}` + "\r\n\r\n" +
		`{"error":{"code":499,"message":"The operation was cancelled.","status":"CANCELLED"}}` + "\r\n",
	// A whole answer without usageMetadata.
	"nousage": `data: {"candidates":[{"content":{"parts":[{"text":"Hello there, "}],"role":"model"}}],"modelVersion":"gemini-2.0-flash"}` + "\r\n\r\n" +
		`data: {"candidates":[{"content":{"parts":[{"text":"my friend"}],"role":"model"},"finishReason":"STOP"}],"modelVersion":"gemini-2.0-flash"}` + "\r\n\r\n",
}

func startRecordedGemini(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Contents []struct {
				Parts []struct{ Text string }
			}
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		prompt := ""
		if len(req.Contents) > 0 && len(req.Contents[0].Parts) > 0 {
			prompt = req.Contents[0].Parts[0].Text
		}
		body, ok := geminiBodies[prompt]
		if !ok || !strings.Contains(r.URL.Path, ":streamGenerateContent") {
			http.Error(w, `{"error":{"code":400,"message":"unknown prompt","status":"INVALID_ARGUMENT"}}`, 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range strings.SplitAfter(body, "\r\n\r\n") { // one write per event
			_, _ = w.Write([]byte(ev))
			w.(http.Flusher).Flush()
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/v1beta"
}

// streamEvents reads a stream's data lines, whatever it ended with.
func streamEvents(t *testing.T, resp *http.Response) []string {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, d)
		}
	}
	return events
}

// TestProviderFailuresInsideStreams: a Gemini failure written into a 200 stream reaches the
// client as an error event in the spec's shape with the request id, after the text and with no
// finish_reason or [DONE], and is billed from what was sent; a stream without usageMetadata
// gives a client that asked for usage an estimated usage chunk, billed exactly as it says.
func TestProviderFailuresInsideStreams(t *testing.T) {
	t.Parallel()
	base := startRecordedGemini(t)
	g := startGateway(t, fmt.Sprintf(`providers:
  - {name: google, type: gemini, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: flash
    providers: [{provider: google, model: gemini-2.0-flash}]
    pricing: {prompt: "0.000001", completion: "0.000002"}
`, base), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := g.NewAccount(ctx, "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")

	resp := g.chat(ctx, key, `{"model":"flash","stream":true,"messages":[{"role":"user","content":"cancel"}]}`)
	rid := resp.Header.Get("x-request-id")
	events := streamEvents(t, resp)
	joined := strings.Join(events, "\n")
	var last struct {
		Error struct {
			Message, Code string
			RequestID     string `json:"request_id"`
		}
	}
	if len(events) == 0 || json.Unmarshal([]byte(events[len(events)-1]), &last) != nil {
		t.Fatalf("cancelled stream: %v", events)
	}
	if !strings.Contains(joined, `"content":"Okay"`) || strings.Contains(joined, "finish_reason\":\"") || strings.Contains(joined, "[DONE]") ||
		last.Error.Code != "cancelled" || rid == "" || last.Error.RequestID != rid || !strings.Contains(last.Error.Message, "cancelled") {
		t.Fatalf("cancelled stream (request id %q):\n%s", rid, joined)
	}

	resp = g.chat(ctx, key, `{"model":"flash","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"nousage"}]}`)
	events = streamEvents(t, resp)
	var usage struct {
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			Estimated        bool
		}
	}
	if n := len(events); n < 2 || events[n-1] != "[DONE]" || json.Unmarshal([]byte(events[n-2]), &usage) != nil || usage.Usage == nil ||
		!usage.Usage.Estimated || usage.Usage.CompletionTokens == 0 || usage.Usage.PromptTokens == 0 {
		t.Fatalf("stream without usageMetadata, client asked for usage:\n%s", strings.Join(events, "\n"))
	}

	recs := g.waitRecords("acme", 2)
	var matched bool
	for _, r := range recs {
		if !r.Estimated || r.CompletionTokens == 0 || !r.Cost.IsPositive() {
			t.Fatalf("record %+v: want an estimate of what was sent", r)
		}
		matched = matched || (r.PromptTokens == usage.Usage.PromptTokens && r.CompletionTokens == usage.Usage.CompletionTokens)
	}
	if !matched {
		t.Fatalf("no record bills what the estimated usage chunk said (%+v): %+v", *usage.Usage, recs)
	}
}
