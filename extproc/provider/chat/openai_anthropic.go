package chat

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/anthropic"
	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// toAnthropic speaks the Anthropic Messages API (POST {base}/messages).
//
// Request mapping, from the OpenAI chat request:
//   - system and developer messages, wherever they stand, are joined with "\n\n" into the
//     top-level system string, in order (Anthropic has no system turns, so one in the middle
//     of a conversation moves to the top);
//   - user/assistant content becomes text, image (base64 or url), document (PDF data URL) and
//     tool_use blocks; tool messages become tool_result blocks in a user turn; consecutive
//     turns of one role are merged, because Anthropic wants user and assistant to alternate
//     and the tool_results answering one tool_use turn all in the next user turn;
//   - max_tokens is required upstream: max_completion_tokens, else max_tokens, else
//     anthropicDefaultMaxTokens;
//   - temperature (0 to 1 here, 0 to 2 in OpenAI's: above 1 is refused), top_p, stop, stream,
//     user (metadata.user_id), tools (strict too), tool_choice and parallel_tool_calls=false
//     (disable_parallel_tool_use) are mapped; response_format json_schema becomes
//     output_config.format (structured outputs), json_object is refused (Anthropic has no
//     JSON mode without a schema); n=1 is honoured, n>1 refused;
//   - image data URLs: image/jpg is sent as image/jpeg; types other than jpeg, png, gif and
//     webp are refused; tool call ids outside Anthropic's [a-zA-Z0-9_-] are rewritten the
//     same way in tool_use and tool_result (anthToolID);
//   - messages[].name and image_url.detail have no place and are dropped, listed in
//     Upstream.Removed;
//   - every other field never reaches Chat (Parameters leaves it out, so the gateway removes
//     it and lists it in x-tollway-removed-params), since Anthropic rejects unknown fields:
//     stream_options (usage always comes with the stream), seed, frequency/presence_penalty,
//     logit_bias, logprobs, top_logprobs, reasoning_effort (extended thinking needs the
//     thinking blocks replayed with every tool loop, which OpenAI clients do not keep),
//     service_tier, store, metadata, modalities, audio, prediction, web_search_options,
//     functions, function_call.
type toAnthropic struct{}

// Parameters are the fields the mapping above translates.
func (toAnthropic) Parameters() Parameters {
	return Parameters{Known: []string{"max_completion_tokens", "max_tokens", "n", "parallel_tool_calls", "response_format", "stop", "temperature", "tool_choice", "tools", "top_p", "user"},
		Fixed: []string{"n"}} // oneAnswer
}

// anthropicDefaultMaxTokens applies when the client set no cap: Anthropic requires one, and
// 4096 fits every current Claude model's output limit.
const anthropicDefaultMaxTokens = 4096

func (toAnthropic) Chat(p *ir.Provider, _ *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	out := anthropic.Request{Model: model, Temperature: provider.Field(req, "temperature"), TopP: provider.Field(req, "top_p")}
	if err := anthropicRanges(req); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	var err error
	if out.OutputConfig, err = anthropicOutput(req); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	if out.MaxTokens, err = maxTokens(req); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	if out.MaxTokens == 0 {
		out.MaxTokens = anthropicDefaultMaxTokens
	}
	msgs, err := decodeMessages(req)
	if err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	var system []string
	removed := removals{}
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer":
			s, err := contentText(m.Content, i)
			if err != nil {
				return nil, fmt.Errorf("anthropic: %w", err)
			}
			if s != "" {
				system = append(system, s)
			}
			removed.message(m, nil)
		case "user", "assistant":
			blocks, err := anthBlocks(m, i, removed)
			if err != nil {
				return nil, fmt.Errorf("anthropic: %w", err)
			}
			out.Messages = appendAnthTurn(out.Messages, m.Role, blocks)
		case "tool":
			s, err := contentText(m.Content, i)
			if err != nil {
				return nil, fmt.Errorf("anthropic: %w", err)
			}
			removed.message(m, nil)
			out.Messages = appendAnthTurn(out.Messages, "user", []anthropic.Block{{Type: "tool_result", ToolUseID: anthToolID(m.ToolCallID), Content: s}})
		default:
			return nil, fmt.Errorf("anthropic: %w: messages[%d] has role %q", provider.ErrBadRequest, i, m.Role)
		}
	}
	out.System = strings.Join(system, "\n\n")
	if out.Messages == nil {
		out.Messages = []anthropic.Message{} // Anthropic's own error is clearer than a missing field
	}

	tools, err := decodeTools(req)
	if err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	for _, t := range tools {
		out.Tools = append(out.Tools, anthropic.Tool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters, Strict: t.Strict})
	}
	if len(tools) > 0 { // a tool_choice without tools is refused upstream and means nothing
		choice, err := decodeToolChoice(req)
		if err != nil {
			return nil, fmt.Errorf("anthropic: %w", err)
		}
		switch choice.Mode {
		case "auto":
			out.ToolChoice = &anthropic.ToolChoice{Type: "auto"}
		case "none":
			out.ToolChoice = &anthropic.ToolChoice{Type: "none"}
		case "required":
			out.ToolChoice = &anthropic.ToolChoice{Type: "any"}
		case "function":
			out.ToolChoice = &anthropic.ToolChoice{Type: "tool", Name: choice.Name}
		}
		if string(provider.Field(req, "parallel_tool_calls")) == "false" {
			if out.ToolChoice == nil {
				out.ToolChoice = &anthropic.ToolChoice{Type: "auto"}
			}
			// With "none" no tool runs at all, and Anthropic accepts the flag only elsewhere.
			out.ToolChoice.DisableParallelToolUse = out.ToolChoice.Type != "none"
		}
	}
	if out.StopSequences, err = stopSequences(req); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	if out.Stream, err = boolField(req, "stream"); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	if raw := provider.Field(req, "user"); raw != nil {
		var user string
		if err := json.Unmarshal(raw, &user); err != nil {
			return nil, fmt.Errorf("anthropic: %w: user must be a string", provider.ErrBadRequest)
		}
		if user != "" {
			out.Metadata = &anthropic.RequestMeta{UserID: user}
		}
	}

	body, err := provider.EncodeJSON(out)
	if err != nil {
		return nil, fmt.Errorf("anthropic: encode request: %w", err)
	}
	return &provider.Upstream{
		Body: body,
		Path: "/messages",
		Headers: map[string]string{
			"x-api-key":         p.APIKey,
			"anthropic-version": anthropic.Version,
			"authorization":     "", // the client's gateway key must not reach Anthropic
			"content-type":      "application/json",
		},
		Response: newAnthropicResponse(model),
		Removed:  removed.list(),
	}, nil
}

// anthropicRanges refuses values OpenAI allows that Anthropic does not: temperature above 1
// (Anthropic's range is 0 to 1) and n above 1.
func anthropicRanges(req provider.Request) error {
	if t, ok, err := numberField(req, "temperature"); err != nil {
		return err
	} else if ok && (t < 0 || t > 1) {
		return fmt.Errorf("%w: temperature %v is outside Anthropic's range of 0 to 1 (OpenAI's is 0 to 2); send a temperature from 0 to 1", provider.ErrBadRequest, t)
	}
	return oneAnswer(req, "Anthropic")
}

// anthropicOutput translates response_format: a JSON Schema becomes a structured output
// (output_config.format), text needs nothing, and json_object, JSON without a schema, has no
// Anthropic form.
func anthropicOutput(req provider.Request) (*anthropic.OutputConfig, error) {
	rf, err := decodeResponseFormat(req)
	if err != nil {
		return nil, err
	}
	switch rf.Type {
	case "json_object":
		return nil, fmt.Errorf(`%w: response_format json_object has no Anthropic equivalent (Anthropic constrains output only to a schema); send {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}`, provider.ErrBadRequest)
	case "json_schema":
		if rf.Schema == nil {
			return nil, fmt.Errorf(`%w: response_format json_schema needs json_schema.schema for Anthropic: {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}`, provider.ErrBadRequest)
		}
		return &anthropic.OutputConfig{Format: &anthropic.Format{Type: "json_schema", Schema: rf.Schema}}, nil
	}
	return nil, nil
}

// anthToolID returns a tool call id in the form Anthropic requires (^[a-zA-Z0-9_-]+$). Ids
// in that form, OpenAI's and Gemini's included, stay as they are; others (some providers use
// "functions.get_weather:0") get every other byte replaced by "_" and a hash of the whole id,
// so that the tool_use and the tool_result answering it still match and distinct ids stay
// distinct.
func anthToolID(id string) string {
	idByte := func(c byte) bool {
		return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	b, changed := []byte(id), id == ""
	for i, c := range b {
		if !idByte(c) {
			b[i], changed = '_', true
		}
	}
	if !changed {
		return id
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return fmt.Sprintf("%s_%016x", b, h.Sum64())
}

// anthBlocks converts a user or assistant message into content blocks: its content parts in
// order, then (assistant) one tool_use per tool call. Empty text is left out: Anthropic
// refuses empty text blocks.
func anthBlocks(m openai.Message, i int, removed removals) ([]anthropic.Block, error) {
	parts, err := contentParts(m.Content, i)
	if err != nil {
		return nil, err
	}
	removed.message(m, parts)
	var blocks []anthropic.Block
	for _, part := range parts {
		switch part.Type {
		case "text", "refusal":
			if t := partText(part); t != "" {
				blocks = append(blocks, anthropic.Block{Type: "text", Text: t})
			}
		case "image_url":
			src, err := anthSourceOf(part.ImageURL.URL, i)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, anthropic.Block{Type: "image", Source: src})
		case "file":
			mt, data, ok := provider.ParseDataURL(part.File.FileData)
			if !ok || mt != "application/pdf" {
				return nil, fmt.Errorf("%w: messages[%d]: Anthropic takes files only as PDF data URLs (file.file_data = data:application/pdf;base64,...)", provider.ErrBadRequest, i)
			}
			blocks = append(blocks, anthropic.Block{Type: "document", Source: &anthropic.Source{Type: "base64", MediaType: mt, Data: data}})
		default:
			return nil, fmt.Errorf("%w: messages[%d]: content part type %q is not supported by Anthropic", provider.ErrBadRequest, i, part.Type)
		}
	}
	if m.Role == "assistant" {
		for j, tc := range m.ToolCalls {
			input, err := toolArguments(tc, i, j)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, anthropic.Block{Type: "tool_use", ID: anthToolID(tc.ID), Name: tc.Function.Name, Input: input})
		}
	}
	return blocks, nil
}

func anthSourceOf(u string, i int) (*anthropic.Source, error) {
	if strings.HasPrefix(u, "data:") {
		mt, data, ok := provider.ParseDataURL(u)
		if !ok {
			return nil, fmt.Errorf("%w: messages[%d]: image data URL must be base64 (data:image/png;base64,...)", provider.ErrBadRequest, i)
		}
		mt, err := imageMediaType(mt, "Anthropic", anthropic.ImageTypes, i)
		if err != nil {
			return nil, err
		}
		return &anthropic.Source{Type: "base64", MediaType: mt, Data: data}, nil
	}
	if isHTTPURL(u) {
		return &anthropic.Source{Type: "url", URL: u}, nil
	}
	return nil, fmt.Errorf("%w: messages[%d]: image_url.url must be an http(s) or base64 data URL", provider.ErrBadRequest, i)
}

// appendAnthTurn adds blocks as a turn of role, merged into the previous turn when it has the
// same role. A turn without blocks is left out.
func appendAnthTurn(turns []anthropic.Message, role string, blocks []anthropic.Block) []anthropic.Message {
	if len(blocks) == 0 {
		return turns
	}
	if n := len(turns); n > 0 && turns[n-1].Role == role {
		turns[n-1].Content = append(turns[n-1].Content, blocks...)
		return turns
	}
	return append(turns, anthropic.Message{Role: role, Content: blocks})
}

// anthropicFinish maps stop_reason to finish_reason; pause_turn and anything new read as stop.
func anthropicFinish(reason string) string {
	switch reason {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

// anthUsage is an answer's usage as the translation keeps it: Anthropic's counts, and apart
// the usage on other models than the one asked (an advisor's iterations), per model.
type anthUsage struct {
	anthropic.Usage
	others []openai.ModelUsage
}

// summed is the usage of an answer with iterations: the sum of those that ran on the model
// asked (no model named, or the one asked or the one answering), and apart, per model, the
// sum of those on other models, billed at their own prices. Without iterations it is u.
func (u anthUsage) summed(asked, answered string) anthUsage {
	if len(u.Iterations) == 0 {
		return u
	}
	var out anthUsage
	for _, it := range u.Iterations {
		if it.Model == "" || it.Model == asked || it.Model == answered {
			out.InputTokens = provider.Tokens(out.InputTokens, it.InputTokens)
			out.OutputTokens = provider.Tokens(out.OutputTokens, it.OutputTokens)
			out.CacheReadTokens = provider.Tokens(out.CacheReadTokens, it.CacheReadTokens)
			out.CacheCreationTokens = provider.Tokens(out.CacheCreationTokens, it.CacheCreationTokens)
			continue
		}
		out.others = addModelUsage(out.others, it.Model, anthUsage{Usage: it.Usage}.chat(0))
	}
	return out
}

// chat reports Anthropic usage the OpenAI way: prompt_tokens counts every input token,
// cached or not, and cached_tokens says how many were cache reads. Anthropic bills thinking as
// output and reports no count of it: reasoning is the thinking text's token count, an estimate.
func (u anthUsage) chat(reasoning int64) *openai.Usage {
	c := newUsage(provider.Tokens(u.InputTokens, u.CacheReadTokens, u.CacheCreationTokens), provider.Tokens(u.OutputTokens), provider.Tokens(u.CacheReadTokens), reasoning)
	c.OtherModels = u.others
	return c
}

// merge takes every count a later event reports, 0 included (the latest value is the
// provider's final word, and billing uses it); counts it leaves out keep earlier values. An
// event with iterations (message_delta's) says everything that ran: its sum replaces them all.
func (u *anthUsage) merge(v anthropic.UsageUpdate, asked, answered string) {
	if len(v.Iterations) > 0 {
		*u = anthUsage{Usage: anthropic.Usage{Iterations: v.Iterations}}.summed(asked, answered)
		return
	}
	for _, f := range []struct {
		to   *int64
		from *int64
	}{
		{&u.InputTokens, v.InputTokens}, {&u.OutputTokens, v.OutputTokens},
		{&u.CacheReadTokens, v.CacheReadTokens}, {&u.CacheCreationTokens, v.CacheCreationTokens},
	} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
}

// anthropicResponse translates one Anthropic answer; for streams it keeps the state.
type anthropicResponse struct {
	sse      sseReader
	asked    string                // the model the request named: its iterations are its own
	answered string                // the model message_start names
	out      chunkWriter           // id and model until message_start names the real ones
	calls    []*streamedCall       // in OpenAI tool_calls index order
	blocks   map[int]*streamedCall // by Anthropic content block index
	usage    anthUsage
	thinking tokenTally // thinking text, for the reasoning token estimate
	reason   string     // the last stop_reason reported; the finish goes out at message_stop
	done     bool       // message_stop or error seen: the rest is ignored
}

// streamedCall is a tool_use block streamed as an OpenAI tool call.
type streamedCall struct {
	index  int
	name   string
	input  json.RawMessage // the block's input at content_block_start, {} when it streams
	args   []byte          // the arguments the client got
	closed bool
}

func newAnthropicResponse(model string) *anthropicResponse {
	return &anthropicResponse{asked: model, out: chunkWriter{id: "chatcmpl-anthropic", model: model, created: now().Unix()}}
}

func (r *anthropicResponse) Body(b []byte) ([]byte, error) {
	var in anthropic.Response
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("anthropic: the answer is not a Messages API response (%s)", jsonMismatch("answer", err))
	}
	if in.Error != nil || in.Type == "error" {
		return nil, anthFailure(in.Error)
	}
	msg := openai.ResponseMessage{Role: "assistant"}
	var text strings.Builder
	hasText := false
	for _, c := range in.Content {
		switch c.Type {
		case "text":
			text.WriteString(c.Text)
			hasText = true
		case "tool_use":
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: callID(c.ID, len(msg.ToolCalls)), Type: "function", Function: openai.FunctionCall{Name: c.Name, Arguments: compactArgs(c.Input)}})
		case "thinking":
			r.thinking.add(c.Thinking)
		} // redacted thinking and server tool blocks have no OpenAI form
	}
	if hasText {
		msg.Content = openai.TextContent(text.String())
	}
	return provider.Marshal(openai.ChatCompletion{
		Header:  r.out.header(openai.ObjectCompletion, in.ID, in.Model),
		Choices: []openai.Choice{{Message: msg, FinishReason: anthropicFinish(in.StopReason)}},
		Usage:   anthUsage{Usage: in.Usage}.summed(r.asked, in.Model).chat(r.thinking.count()),
	}), nil
}

// anthFailure is the error the client gets for Anthropic's error e: the provider's message and type.
func anthFailure(e *anthropic.Error) *provider.UpstreamFailure {
	if e == nil {
		e = &anthropic.Error{}
	}
	return &provider.UpstreamFailure{Provider: "Anthropic", Code: cmp.Or(e.Type, "upstream_error"), Message: cmp.Or(e.Message, "Anthropic reported an error")}
}

func (r *anthropicResponse) Chunk(b []byte, end bool) ([]byte, error) {
	err := r.sse.feed(b, end, r.event)
	if err == nil && end && !r.done {
		// Every Anthropic stream ends with message_stop: without it the answer was cut.
		err = &provider.UpstreamFailure{Provider: "Anthropic", Code: "upstream_error", Message: "the stream ended before message_stop: the answer is incomplete"}
	}
	if err != nil {
		r.done = true // the client gets an error event: nothing may follow it
	}
	return r.out.take(), err
}

// event handles one SSE event's data. The event name repeats data.type, so only data is read.
func (r *anthropicResponse) event(data []byte) error {
	if r.done {
		return nil
	}
	var ev anthropic.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return fmt.Errorf("anthropic: a stream event is not a Messages API event (%s)", jsonMismatch("event", err))
	}
	switch ev.Type {
	case "message_start":
		if !r.out.started { // one id and model per stream
			r.out.id = cmp.Or(ev.Message.ID, r.out.id)
			r.out.model = cmp.Or(ev.Message.Model, r.out.model)
			r.answered = ev.Message.Model
		}
		r.usage.merge(ev.Message.Usage, r.asked, r.answered)
		r.out.start() // clients see the role before the first token
		// A resumed answer (programmatic tool calling) arrives whole in message_start: its
		// blocks and stop_reason, then message_stop.
		for _, c := range ev.Message.Content {
			r.wholeBlock(c)
		}
		r.reason = cmp.Or(ev.Message.StopReason, r.reason)
	case "content_block_start":
		switch ev.ContentBlock.Type {
		case "text":
			if ev.ContentBlock.Text != "" {
				r.out.chunk(openai.Delta{Content: ptr(ev.ContentBlock.Text)}, "")
			}
		case "thinking":
			r.thinking.add(ev.ContentBlock.Thinking)
		case "tool_use":
			c := &streamedCall{index: len(r.calls), name: ev.ContentBlock.Name, input: ev.ContentBlock.Input}
			if r.blocks == nil {
				r.blocks = map[int]*streamedCall{}
			}
			r.blocks[ev.Index] = c
			r.calls = append(r.calls, c)
			r.out.chunk(openai.Delta{ToolCalls: []openai.ToolCallDelta{{Index: c.index, ToolCall: openai.ToolCall{ID: callID(ev.ContentBlock.ID, c.index), Type: "function",
				Function: openai.FunctionCall{Name: c.name}}}}}, "")
		}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			if ev.Delta.Text != "" {
				r.out.chunk(openai.Delta{Content: ptr(ev.Delta.Text)}, "")
			}
		case "thinking_delta":
			r.thinking.add(ev.Delta.Thinking)
		case "input_json_delta":
			if c := r.blocks[ev.Index]; c != nil && !c.closed && ev.Delta.PartialJSON != "" {
				c.args = append(c.args, ev.Delta.PartialJSON...)
				r.out.chunk(openai.Delta{ToolCalls: []openai.ToolCallDelta{{Index: c.index, ToolCall: openai.ToolCall{Function: openai.FunctionCall{Arguments: ev.Delta.PartialJSON}}}}}, "")
			}
		} // signature and citation deltas have no OpenAI form
	case "content_block_stop":
		if c := r.blocks[ev.Index]; c != nil {
			r.closeCall(c)
		}
	case "message_delta":
		r.usage.merge(ev.Usage, r.asked, r.answered)
		r.reason = cmp.Or(ev.Delta.StopReason, r.reason)
	case "message_stop":
		// One finish, the last stop_reason reported (stop when none was: OpenAI clients wait
		// for a finish_reason), then usage and [DONE].
		if err := r.finish(anthropicFinish(r.reason)); err != nil {
			return err
		}
		r.out.usage(r.usage.chat(r.thinking.count()))
		r.out.doneMarker()
		r.done = true
	case "error":
		return anthFailure(ev.Error)
	} // ping and new event types carry nothing to forward
	return nil
}

// wholeBlock sends a content block that arrived complete rather than streamed.
func (r *anthropicResponse) wholeBlock(c anthropic.Content) {
	switch c.Type {
	case "text":
		if c.Text != "" {
			r.out.chunk(openai.Delta{Content: ptr(c.Text)}, "")
		}
	case "thinking":
		r.thinking.add(c.Thinking)
	case "tool_use":
		call := &streamedCall{index: len(r.calls), name: c.Name, input: c.Input, args: []byte(compactArgs(c.Input)), closed: true}
		r.calls = append(r.calls, call)
		r.out.chunk(openai.Delta{ToolCalls: []openai.ToolCallDelta{{Index: call.index, ToolCall: openai.ToolCall{ID: callID(c.ID, call.index), Type: "function",
			Function: openai.FunctionCall{Name: c.Name, Arguments: string(call.args)}}}}}, "")
	}
}

// closeCall ends a streamed tool call. One whose arguments never streamed (Anthropic sends
// input {} and an empty input_json_delta for a call without parameters) gets its start input,
// "{}" at least: OpenAI clients parse the arguments as JSON.
func (r *anthropicResponse) closeCall(c *streamedCall) {
	if c.closed {
		return
	}
	c.closed = true
	if len(bytes.TrimSpace(c.args)) == 0 {
		args := compactArgs(c.input)
		c.args = append(c.args, args...)
		r.out.chunk(openai.Delta{ToolCalls: []openai.ToolCallDelta{{Index: c.index, ToolCall: openai.ToolCall{Function: openai.FunctionCall{Arguments: args}}}}}, "")
	}
}

// finish sends the finish chunk, after closing every tool call. Arguments that are not JSON
// fail the stream instead, unless the answer was cut at max_tokens (where OpenAI cuts
// arguments too, with finish_reason length).
func (r *anthropicResponse) finish(reason string) error {
	for _, c := range r.calls {
		r.closeCall(c)
		if reason != "length" && !json.Valid(c.args) {
			return &provider.UpstreamFailure{Provider: "Anthropic", Code: "upstream_error", Message: fmt.Sprintf("streamed arguments for tool call %q that are not JSON", c.name)}
		}
	}
	r.out.chunk(openai.Delta{}, reason)
	return nil
}

// The rest of this file is shared by the translating adapters (anthropic, gemini): reading the
// OpenAI request and writing OpenAI answers.
