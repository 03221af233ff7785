package fakeupstream

import (
	"io"
	"testing"
)

// TestReplay: a scripted recorded answer comes back verbatim (CRLF framing kept, status and
// content type as recorded) on both native routes, once; the next request is answered as usual.
func TestReplay(t *testing.T) {
	s := Start(t, Options{})
	stream := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\r\n\r\ndata: {\"candidates\":[{\"finishReason\":\"STOP\"}]}\r\n\r\n"
	s.Replay(0, "text/event-stream", []byte(stream))
	resp := postGemini(t, s, "", "gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || string(body) != stream {
		t.Fatalf("replayed %d %q %q, want 200 text/event-stream %q", resp.StatusCode, resp.Header.Get("Content-Type"), body, stream)
	}
	rec := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	s.Replay(529, "application/json", []byte(rec))
	resp = postAnthropic(t, s, "", `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 529 || string(body) != rec {
		t.Fatalf("replayed %d %q, want 529 %q", resp.StatusCode, body, rec)
	}
	resp = postAnthropic(t, s, "", `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || s.PendingFaults() != 0 {
		t.Fatalf("after the replay: status %d, %d faults pending", resp.StatusCode, s.PendingFaults())
	}
}
