// Package fuzzcheck holds the properties the fuzz targets (and the provider goldens) assert
// across packages: messages a client or operator reads carry no Go vocabulary, streams are cut
// at fuzzed offsets, and an OpenAI chat-completion stream is well formed. Test code only.
package fuzzcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// goWords are fragments of Go's own error text and type syntax: encoding/json's messages name
// the Go struct a value did not fit (cannot unmarshal string into Go struct field x of type
// struct {...}), mapstructure's the Go type it wanted, jsontext's its package.
var goWords = regexp.MustCompile(`json: |jsontext: |cannot unmarshal|Go struct field|Go value of type|struct ?\{|map\[|interface ?\{\}|\[\][a-z*]|` +
	`\b(?:provider|billing|extproc|ir|json|app|store|catalog|decimal|time)\.[A-Z]\w*|` +
	`\b(?:chat|anth|gem)[A-Z]\w*\.`)

// Leak returns the first fragment of msg that is Go's vocabulary rather than the reader's, or "".
func Leak(msg string) string { return goWords.FindString(msg) }

// Pieces cuts b into consecutive pieces whose lengths come from cuts (1 to 16 bytes each, the
// byte's low four bits, cycling through cuts); with no cuts every byte is its own piece. Small
// pieces land inside CRLF pairs, multi-byte UTF-8 sequences and "data:" prefixes.
func Pieces(b, cuts []byte) [][]byte {
	var out [][]byte
	for i, k := 0, 0; i < len(b); k++ {
		n := 1
		if len(cuts) > 0 {
			n = int(cuts[k%len(cuts)]&15) + 1
		}
		n = min(n, len(b)-i)
		out = append(out, b[i:i+n])
		i += n
	}
	return out
}

// Call is one tool call of a stream, assembled by index.
type Call struct{ ID, Name, Args string }

// Usage is the usage chunk's counts.
type Usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// AddsUp reports whether the counts are not negative and total is their sum (or, past the
// largest count, saturated at it).
func (u Usage) AddsUp() bool {
	sum := u.PromptTokens + u.CompletionTokens
	return u.PromptTokens >= 0 && u.CompletionTokens >= 0 && (u.TotalTokens == sum || (sum < 0 && u.TotalTokens == math.MaxInt64))
}

// Stream is what an OpenAI chunk stream told the client, assembled as the OpenAI SDKs do.
type Stream struct {
	Text   string
	Calls  []Call
	Finish string
	Usage  *Usage
	Error  string // the message of an error event
	Done   bool   // data: [DONE] arrived
	chunks int
}

var finishReasons = map[string]bool{"stop": true, "length": true, "tool_calls": true, "content_filter": true}

// CheckStream reads a chat.completion.chunk stream as a client would and reports the first
// rule it breaks: whole "data: <json>\n\n" events; one id and model; the role on the first
// chunk only; at most one finish_reason of OpenAI's; tool-call fragments by consecutive index,
// the first with id, type and arguments, later ones without id or name; nothing after the
// usage-only chunk but [DONE], nothing after [DONE] or an error event
// (which has a message and a code); [DONE] only after a finish_reason, and then every tool
// call's arguments parse as JSON unless the answer was cut at its length limit; no content
// after the finish_reason. The usage-only chunk is not required here: a translator whose
// provider reported none leaves it to the router, which adds an estimated one.
func CheckStream(out []byte) (Stream, error) {
	var s Stream
	if len(out) == 0 {
		return s, nil
	}
	if !bytes.HasSuffix(out, []byte("\n\n")) {
		return s, fmt.Errorf("the stream does not end with a whole event: %q", tail(out))
	}
	var id, model string
	for i, ev := range strings.Split(string(out[:len(out)-2]), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.ContainsAny(data, "\r\n") {
			return s, fmt.Errorf("event %d is not one data line: %q", i, ev)
		}
		if s.Done || s.Error != "" {
			return s, fmt.Errorf("event %d comes after the end of the stream: %q", i, ev)
		}
		if data == "[DONE]" {
			if s.Finish == "" {
				return s, fmt.Errorf("[DONE] without a finish_reason before it")
			}
			for n, c := range s.Calls {
				if s.Finish != "length" && !json.Valid([]byte(c.Args)) { // OpenAI cuts arguments at the length limit
					return s, fmt.Errorf("the stream ended and tool call %d (%s) has arguments %q, which are not JSON", n, c.Name, c.Args)
				}
			}
			s.Done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return s, fmt.Errorf("event %d is not a JSON object: %v: %s", i, err, data)
		}
		if c.Error != nil {
			if c.Error.Message == "" || c.Error.Code == "" {
				return s, fmt.Errorf("event %d: an error event needs a message and a code: %s", i, data)
			}
			s.Error = c.Error.Message
			continue
		}
		if id == "" {
			id, model = c.ID, c.Model
		}
		if c.ID == "" || c.ID != id || c.Model == "" || c.Model != model || c.Object != "chat.completion.chunk" || c.Created == 0 {
			return s, fmt.Errorf("event %d: bad envelope (the first said id %q, model %q): %s", i, id, model, data)
		}
		if s.Usage != nil {
			return s, fmt.Errorf("event %d comes after the usage chunk: %s", i, data)
		}
		if role := len(c.Choices) == 1 && c.Choices[0].Delta.Role == "assistant"; role != (s.chunks == 0) {
			return s, fmt.Errorf("event %d: the role comes with the first chunk, and only there: %s", i, data)
		}
		s.chunks++
		if err := s.add(c); err != nil {
			return s, fmt.Errorf("event %d: %w: %s", i, err, data)
		}
	}
	return s, nil
}

type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string  `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Code    string `json:"code"`
	} `json:"error"`
}

func (s *Stream) add(c chunk) error {
	if c.Choices == nil {
		return errors.New("choices is missing")
	}
	if len(c.Choices) == 0 {
		u := c.Usage
		switch {
		case u == nil:
			return errors.New("neither choices nor usage")
		case !u.AddsUp():
			return fmt.Errorf("usage counts are negative or do not add up: %+v", *u)
		}
		s.Usage = u
		return nil
	}
	if len(c.Choices) != 1 || c.Usage != nil {
		return errors.New("a content chunk has one choice and no usage")
	}
	if s.Finish != "" {
		return errors.New("a content chunk after the finish_reason (it goes on the last one)")
	}
	ch := c.Choices[0]
	if ch.Delta.Content != nil {
		s.Text += *ch.Delta.Content
	}
	for _, tc := range ch.Delta.ToolCalls {
		switch {
		case tc.Index == nil || *tc.Index < 0 || *tc.Index > len(s.Calls):
			return errors.New("a tool call fragment's index is missing or skips ahead")
		case *tc.Index == len(s.Calls):
			if tc.ID == "" || tc.Type != "function" || tc.Function.Arguments == nil {
				return errors.New("the first fragment of a tool call lacks its id, type or arguments")
			}
			s.Calls = append(s.Calls, Call{ID: tc.ID, Name: tc.Function.Name})
		case tc.ID != "" || tc.Function.Name != "":
			return errors.New("a later tool call fragment repeats the id or name")
		}
		if tc.Function.Arguments != nil {
			s.Calls[*tc.Index].Args += *tc.Function.Arguments
		}
	}
	if ch.FinishReason != nil {
		if s.Finish != "" || !finishReasons[*ch.FinishReason] {
			return fmt.Errorf("finish_reason %q after %q", *ch.FinishReason, s.Finish)
		}
		s.Finish = *ch.FinishReason
	}
	return nil
}

func tail(b []byte) []byte { return b[max(0, len(b)-80):] }
