package fakeupstream

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// reply is one chat completion answer, rendered whole or as a stream.
type reply struct {
	id, model        string
	created          int64
	toks             []string // content pieces, or tool-call argument pieces
	finish           string
	usage            usage
	toolName, toolID string // set for a tool-call reply
}

type completion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	Choices           []choice `json:"choices"`
	Usage             usage    `json:"usage"`
	ServiceTier       string   `json:"service_tier"`
	SystemFingerprint string   `json:"system_fingerprint"`
}

type choice struct {
	Index        int       `json:"index"`
	Message      outMsg    `json:"message"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

type outMsg struct {
	Role        string     `json:"role"`
	Content     *string    `json:"content"`
	Refusal     *string    `json:"refusal"`
	ToolCalls   []toolCall `json:"tool_calls,omitempty"`
	Annotations []struct{} `json:"annotations"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// writeCompletion sends a chat.completion object. cut >= 0 sends only half
// the body, then drops the connection.
func (rp *reply) writeCompletion(w http.ResponseWriter, cut int) {
	msg := outMsg{Role: "assistant", Annotations: []struct{}{}}
	if rp.toolName != "" {
		tc := toolCall{ID: rp.toolID, Type: "function"}
		tc.Function.Name, tc.Function.Arguments = rp.toolName, toolArgs
		msg.ToolCalls = []toolCall{tc}
	} else {
		content := strings.Join(rp.toks, "")
		msg.Content = &content
	}
	b, _ := json.Marshal(completion{
		ID: rp.id, Object: "chat.completion", Created: rp.created, Model: rp.model,
		Choices:     []choice{{Message: msg, FinishReason: rp.finish}},
		Usage:       rp.usage,
		ServiceTier: "default", SystemFingerprint: "fp_fake",
	})
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if cut >= 0 {
		w.Write(b[:len(b)/2])
		abort(w)
	}
	w.Write(b)
}

// abort flushes what was written and drops the connection (HTTP/2: resets
// the stream) without ending the body properly.
func abort(w http.ResponseWriter) {
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

// stream sends the reply as server-sent chat.completion.chunk events, each
// flushed on its own, OpenAI's way: a role chunk, one chunk per piece, an
// empty-delta chunk with finish_reason, an optional usage chunk, [DONE].
// cut >= 0 drops the connection after that many events.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rp *reply, includeUsage bool, cut int) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	// Everything before the choices is the same in every chunk.
	head := []byte(`data: {"id":"` + rp.id + `","object":"chat.completion.chunk","created":` +
		strconv.FormatInt(rp.created, 10) + `,"model":`)
	head = appendQuoted(head, rp.model)
	head = append(head, `,"service_tier":"default","system_fingerprint":"fp_fake","choices":[`...)
	usageNull := ""
	if includeUsage {
		usageNull = `,"usage":null` // as OpenAI does on every chunk but the last
	}

	var buf []byte
	sent := 0
	send := func(event []byte) bool {
		if sent == cut {
			abort(w)
		}
		if sent > 0 && !sleep(r.Context(), s.opts.ChunkDelay) {
			return false
		}
		if sent == 1 && s.opts.Hold != nil {
			select {
			case <-s.opts.Hold:
			case <-r.Context().Done():
				return false
			}
		}
		sent++
		if _, err := w.Write(event); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// chunk sends one choice with the given delta JSON.
	chunk := func(delta []byte, finish string) bool {
		buf = append(buf[:0], head...)
		buf = append(buf, `{"index":0,"delta":`...)
		buf = append(buf, delta...)
		buf = append(buf, `,"logprobs":null,"finish_reason":`...)
		if finish == "" {
			buf = append(buf, "null"...)
		} else {
			buf = appendQuoted(buf, finish)
		}
		buf = append(buf, "}]"+usageNull+"}\n\n"...)
		return send(buf)
	}

	var delta []byte
	if rp.toolName != "" {
		delta = append(delta, `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"`+rp.toolID+`","type":"function","function":{"name":`...)
		delta = appendQuoted(delta, rp.toolName)
		delta = append(delta, `,"arguments":""}}],"refusal":null}`...)
	} else {
		delta = append(delta, `{"role":"assistant","content":"","refusal":null}`...)
	}
	if !chunk(delta, "") {
		return
	}
	for _, t := range rp.toks {
		if rp.toolName != "" {
			delta = append(delta[:0], `{"tool_calls":[{"index":0,"function":{"arguments":`...)
			delta = appendQuoted(delta, t)
			delta = append(delta, "}}]}"...)
		} else {
			delta = append(delta[:0], `{"content":`...)
			delta = appendQuoted(delta, t)
			delta = append(delta, '}')
		}
		if !chunk(delta, "") {
			return
		}
	}
	if !chunk([]byte("{}"), rp.finish) {
		return
	}
	if includeUsage {
		u, _ := json.Marshal(rp.usage)
		buf = append(buf[:0], head...)
		buf = append(buf, "],\"usage\":"...)
		buf = append(buf, u...)
		buf = append(buf, "}\n\n"...)
		if !send(buf) {
			return
		}
	}
	send([]byte("data: [DONE]\n\n"))
}

func appendQuoted(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
