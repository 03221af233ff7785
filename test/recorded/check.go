package recorded

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// chatUsage is the OpenAI usage object as a client reads it.
type chatUsage struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	TotalTokens         *int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
		ImageTokens     int64  `json:"image_tokens"`
	} `json:"completion_tokens_details"`
	Estimated bool `json:"estimated"` // the gateway's estimate, where the provider reported none
	// OtherModels is the gateway's usage on models other than the one asked (an advisor).
	OtherModels []struct {
		Model               string `json:"model"`
		PromptTokens        int64  `json:"prompt_tokens"`
		CompletionTokens    int64  `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"other_models"`
}

type toolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

// CheckStream checks an OpenAI chat.completion.chunk stream (what the client reads) against e.
func (e *Expected) CheckStream(out []byte) error {
	if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n\n")) {
		return fmt.Errorf("the stream does not end with a whole event: ...%q", tail(out))
	}
	var (
		text      strings.Builder
		calls     []Call
		args      []*strings.Builder
		finishes  []string
		finishAt  = -1 // index of the chunk carrying the finish_reason
		lastChunk = -1 // index of the last chunk with choices
		usage     *chatUsage
		done      bool
		failed    bool
		events    = strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
	)
	if len(out) == 0 {
		events = nil
	}
	for i, ev := range events {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.ContainsAny(data, "\r\n") {
			return fmt.Errorf("event %d is not one `data: ` line: %q", i, ev)
		}
		if done || failed {
			return fmt.Errorf("event %d follows the end of the stream: %q", i, ev)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Error   json.RawMessage `json:"error"`
			Object  string          `json:"object"`
			Choices *[]struct {
				Index int `json:"index"`
				Delta struct {
					Content   *string    `json:"content"`
					ToolCalls []toolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fmt.Errorf("event %d is not JSON: %v: %q", i, err, data)
		}
		if len(c.Error) > 0 {
			if err := checkError(c.Error); err != nil {
				return fmt.Errorf("event %d: %w", i, err)
			}
			failed = true
			continue
		}
		if c.Object != "chat.completion.chunk" || c.Choices == nil {
			return fmt.Errorf("event %d is no chat.completion.chunk: %q", i, data)
		}
		if usage != nil {
			return fmt.Errorf("event %d follows the usage chunk: %q", i, data)
		}
		if len(*c.Choices) == 0 {
			if c.Usage == nil {
				return fmt.Errorf("event %d has no choices and no usage", i)
			}
			usage = c.Usage
			continue
		}
		lastChunk = i
		for _, ch := range *c.Choices {
			if ch.Index != 0 {
				return fmt.Errorf("event %d: choice %d (one was asked for)", i, ch.Index)
			}
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil || *tc.Index < 0 || *tc.Index > len(calls) {
					return fmt.Errorf("event %d: tool call index out of order: %q", i, data)
				}
				n := *tc.Index
				if n == len(calls) {
					if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
						return fmt.Errorf("event %d: a tool call's first fragment lacks id, type or name: %q", i, data)
					}
					calls = append(calls, Call{Name: tc.Function.Name})
					args = append(args, &strings.Builder{})
				}
				if tc.Function.Arguments != nil {
					args[n].WriteString(*tc.Function.Arguments)
				}
			}
			if ch.FinishReason != nil {
				finishes = append(finishes, *ch.FinishReason)
				finishAt = i
			}
		}
	}
	for i := range calls {
		calls[i].Args = json.RawMessage(args[i].String())
	}
	if e.Fails {
		if !failed {
			return fmt.Errorf("the recording ends in an error or without a finish reason, but the client got no error event (done=%v, finish=%v)", done, finishes)
		}
		if !strings.HasPrefix(e.Text, text.String()) {
			return fmt.Errorf("text before the error %q is not a prefix of the recording's %q", clip(text.String()), clip(e.Text))
		}
		return nil
	}
	if failed {
		return fmt.Errorf("an error event in a stream that finished (%s)", e.Finish)
	}
	if !done {
		return errors.New("no data: [DONE]")
	}
	if len(finishes) != 1 || finishes[0] != e.Finish {
		return fmt.Errorf("finish reasons %q, want exactly [%q]", finishes, e.Finish)
	}
	if finishAt != lastChunk {
		return fmt.Errorf("the finish_reason is on event %d, not on the last content chunk (%d)", finishAt, lastChunk)
	}
	if err := e.checkContent(text.String(), calls); err != nil {
		return err
	}
	if usage == nil {
		if e.Usage != nil {
			return errors.New("no usage chunk, but the recording reports usage")
		}
		return nil
	}
	return e.checkUsage(usage)
}

// CheckBody checks a non-streamed answer: status 2xx and a chat.completion, or, when the
// recording must fail, a status >= 400 with an OpenAI error (translatorErr, when not nil, is
// what the translator returned instead of an answer).
func (e *Expected) CheckBody(status int, out []byte, translatorErr error) error {
	if e.Fails {
		if translatorErr != nil {
			return nil
		}
		if status < 400 {
			return fmt.Errorf("status %d for a recording that must fail: %q", status, tail(out))
		}
		var b struct {
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(out, &b); err != nil {
			return fmt.Errorf("error body is not JSON: %q", tail(out))
		}
		return checkError(b.Error)
	}
	if translatorErr != nil {
		return fmt.Errorf("the translator failed: %w", translatorErr)
	}
	if status != 200 {
		return fmt.Errorf("status %d: %q", status, tail(out))
	}
	var c struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content   json.RawMessage `json:"content"`
				ToolCalls []toolCall      `json:"tool_calls"`
			} `json:"message"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
	}
	if err := json.Unmarshal(out, &c); err != nil {
		return fmt.Errorf("answer is not JSON: %v", err)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 {
		return fmt.Errorf("not a one-choice chat.completion: %q", tail(out))
	}
	ch := c.Choices[0]
	if ch.FinishReason == nil || *ch.FinishReason != e.Finish {
		return fmt.Errorf("finish_reason %v, want %q", deref(ch.FinishReason), e.Finish)
	}
	var calls []Call
	for _, tc := range ch.Message.ToolCalls {
		if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments == nil {
			return fmt.Errorf("tool call without id, type, name or arguments: %+v", tc)
		}
		calls = append(calls, Call{tc.Function.Name, json.RawMessage(*tc.Function.Arguments)})
	}
	text, images, err := messageContent(ch.Message.Content)
	if err != nil {
		return err
	}
	if images != e.Images {
		return fmt.Errorf("%d images, want %d", images, e.Images)
	}
	if err := e.checkContent(text, calls); err != nil {
		return err
	}
	if c.Usage == nil {
		if e.Usage != nil {
			return errors.New("no usage, but the recording reports usage")
		}
		return nil
	}
	return e.checkUsage(c.Usage)
}

// messageContent reads a message's content: a string (or null), or an image model's array of
// text and image_url parts, whose text is joined and whose images are counted.
func messageContent(raw json.RawMessage) (text string, images int64, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0, nil
	}
	if raw[0] == '"' {
		err = json.Unmarshal(raw, &text)
		return text, 0, err
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", 0, fmt.Errorf("message content is neither a string nor parts: %q", clip(string(raw)))
	}
	for i, p := range parts {
		switch {
		case p.Type == "text":
			text += p.Text
		case p.Type == "image_url" && p.ImageURL != nil && strings.HasPrefix(p.ImageURL.URL, "data:image/"):
			images++
		default:
			return "", 0, fmt.Errorf("content part %d is neither text nor an image data URL: %q", i, clip(string(raw)))
		}
	}
	return text, images, nil
}

func (e *Expected) checkContent(text string, calls []Call) error {
	if text != e.Text {
		return fmt.Errorf("text %q, want %q", clip(text), clip(e.Text))
	}
	if len(calls) != len(e.Calls) {
		return fmt.Errorf("%d tool calls, want %d", len(calls), len(e.Calls))
	}
	for i, c := range calls {
		var got, want any
		if err := json.Unmarshal(c.Args, &got); err != nil {
			return fmt.Errorf("tool call %d (%s): arguments %q are not JSON", i, c.Name, clip(string(c.Args)))
		}
		if err := json.Unmarshal(e.Calls[i].Args, &want); err != nil {
			return fmt.Errorf("recording's tool call %d: %w", i, err)
		}
		if c.Name != e.Calls[i].Name || !reflect.DeepEqual(got, want) {
			return fmt.Errorf("tool call %d is %s(%s), want %s(%s)", i, c.Name, clip(string(c.Args)), e.Calls[i].Name, clip(string(e.Calls[i].Args)))
		}
	}
	return nil
}

func (e *Expected) checkUsage(u *chatUsage) error {
	if u.PromptTokens == nil || u.CompletionTokens == nil || u.TotalTokens == nil {
		return fmt.Errorf("usage lacks prompt, completion or total tokens")
	}
	if *u.TotalTokens != *u.PromptTokens+*u.CompletionTokens {
		return fmt.Errorf("total_tokens %d != %d + %d", *u.TotalTokens, *u.PromptTokens, *u.CompletionTokens)
	}
	if e.Usage == nil {
		return nil // the provider reported none: an estimate is fine
	}
	if e.Usage.Prompt == 0 && e.Usage.Completion == 0 {
		// Counts of zero are no usage to the gateway (it never bills an answer as free on a
		// provider's word of 0/0): the translator passes them on, the router replaces them with
		// its estimate, marked as one.
		if *u.PromptTokens == 0 && *u.CompletionTokens == 0 || u.Estimated {
			return nil
		}
		return fmt.Errorf("the recording reports no tokens; usage %d/%d is neither that nor marked estimated", *u.PromptTokens, *u.CompletionTokens)
	}
	var cached int64
	if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil {
		cached = *u.PromptTokensDetails.CachedTokens
	}
	if *u.PromptTokens != e.Usage.Prompt || *u.CompletionTokens != e.Usage.Completion || cached != e.Usage.Cached {
		return fmt.Errorf("usage prompt/completion/cached = %d/%d/%d, want %d/%d/%d", *u.PromptTokens, *u.CompletionTokens, cached,
			e.Usage.Prompt, e.Usage.Completion, e.Usage.Cached)
	}
	var imageTokens int64
	if d := u.CompletionTokensDetails; d != nil {
		imageTokens = d.ImageTokens
	}
	if imageTokens != e.Usage.ImageTokens {
		return fmt.Errorf("completion_tokens_details.image_tokens %d, want %d", imageTokens, e.Usage.ImageTokens)
	}
	var others []ModelUsage
	for _, o := range u.OtherModels {
		others = append(others, ModelUsage{Model: o.Model, Prompt: o.PromptTokens, Completion: o.CompletionTokens, Cached: o.PromptTokensDetails.CachedTokens})
	}
	if !reflect.DeepEqual(others, e.Usage.Others) {
		return fmt.Errorf("usage on other models %+v, want %+v", others, e.Usage.Others)
	}
	if e.Usage.Reasoning != nil {
		if u.CompletionTokensDetails == nil || u.CompletionTokensDetails.ReasoningTokens == nil {
			return fmt.Errorf("no completion_tokens_details.reasoning_tokens, want %d", *e.Usage.Reasoning)
		}
		if got := *u.CompletionTokensDetails.ReasoningTokens; got != *e.Usage.Reasoning {
			return fmt.Errorf("reasoning_tokens %d, want %d", got, *e.Usage.Reasoning)
		}
	}
	return nil
}

// checkError checks an OpenAI error object: a message and a code.
func checkError(raw json.RawMessage) error {
	var e struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return fmt.Errorf("error is not an object: %q", raw)
	}
	if e.Message == "" || len(e.Code) == 0 || string(e.Code) == "null" || string(e.Code) == `""` {
		return fmt.Errorf("error without message or code: %s", raw)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:100] + "..." + s[len(s)-100:]
	}
	return s
}

func tail(b []byte) string { return clip(string(b)) }
