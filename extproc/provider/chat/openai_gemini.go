package chat

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/xds/ir"
)

// toGemini speaks Google's Gemini API (generateContent and streamGenerateContent?alt=sse below a
// base URL like https://generativelanguage.googleapis.com/v1beta).
//
// Request mapping, from the OpenAI chat request:
//   - system and developer messages, wherever they stand, are joined with "\n\n" into
//     systemInstruction, in order (Gemini has no system turns, so one in the middle of a
//     conversation moves to the top);
//   - user turns stay "user", assistant turns become "model"; tool messages become
//     functionResponse parts in a user turn, named after the earlier assistant tool call
//     their tool_call_id answers; consecutive turns of one role are merged, because Gemini
//     wants all responses to one function-call turn in the next turn;
//   - images become inlineData (data URLs; image/jpg sent as image/jpeg, types other than
//     png, jpeg, webp, heic and heif refused) or fileData (http URLs, typed by their
//     extension and refused likewise), input_audio and file
//     data URLs become inlineData;
//   - assistant tool calls become functionCall parts carrying the thoughtSignature the
//     gateway put in the call's id when Gemini made the call (geminiCallID): Gemini 3
//     refuses a replayed call without its signature, and OpenAI clients keep only the id.
//     A model turn whose calls have none (made by another provider, or before the gateway
//     carried signatures) gets Google's documented placeholder on its first call, except on
//     Gemini 1.x and 2.x models, which do not check;
//   - tools become one functionDeclarations tool; parameters go in parametersJsonSchema,
//     which takes OpenAI's JSON Schema as is (the older "parameters" field is an OpenAPI
//     subset that refuses additionalProperties, $defs, anyOf and more);
//   - tool_choice becomes toolConfig; temperature, top_p, max_completion_tokens/max_tokens,
//     stop (at most 5 here), seed (32 bits here), presence/frequency_penalty (non-zero ones:
//     some models refuse penalties, and 0 is the default), response_format
//     (responseMimeType application/json, with responseJsonSchema for json_schema) and
//     reasoning_effort (thinkingConfig.thinkingBudget) become generationConfig; n=1 is
//     honoured, n>1 refused (answers are read as one candidate); stream picks the endpoint;
//   - messages[].name, image_url.detail and tools[].function.strict have no place and are
//     dropped, listed in Upstream.Removed;
//   - every other field never reaches Chat (Parameters leaves it out, so the gateway removes
//     it and lists it in x-tollway-removed-params), since Gemini rejects unknown fields:
//     stream_options (usage always comes with the stream), user, logit_bias, logprobs and
//     top_logprobs (Gemini's logprobs come back in another shape), parallel_tool_calls,
//     service_tier, store, metadata, modalities, audio, prediction, web_search_options,
//     functions, function_call.
type toGemini struct {
	// images: the request is for an image model (family I3, see toGeminiImage), which takes
	// text and image parts and no tools.
	images bool
}

// Parameters are the fields the mapping above translates.
func (toGemini) Parameters() Parameters {
	return Parameters{Known: []string{"frequency_penalty", "max_completion_tokens", "max_tokens", "n", "presence_penalty", "reasoning_effort", "response_format", "seed", "stop", "temperature", "tool_choice", "tools", "top_p"},
		Fixed: []string{"n"}} // oneAnswer
}

func (g toGemini) Chat(p *ir.Provider, _ *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	out, removed, err := g.request(model, req)
	if err != nil {
		return nil, err
	}
	stream, err := boolField(req, "stream")
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	return geminiUpstream(p, model, out, stream, newGeminiResponse(model), removed)
}

// geminiUpstream encodes a generateContent request for model, streamed or not.
func geminiUpstream(p *ir.Provider, model string, out *gemini.Request, stream bool, resp *geminiResponse, removed removals) (*provider.Upstream, error) {
	upPath := "/models/" + url.PathEscape(strings.TrimPrefix(model, "models/"))
	if stream {
		upPath += ":streamGenerateContent?alt=sse"
	} else {
		upPath += ":generateContent"
	}
	body, err := provider.EncodeJSON(out)
	if err != nil {
		return nil, fmt.Errorf("gemini: encode request: %w", err)
	}
	return &provider.Upstream{
		Body: body,
		Path: upPath,
		Headers: map[string]string{
			"x-goog-api-key": p.APIKey,
			"authorization":  "", // the client's gateway key must not reach Google
			"content-type":   "application/json",
		},
		Response: resp,
		Removed:  removed.list(),
	}, nil
}

// request maps the OpenAI chat request to generateContent (see the type's comment).
func (g toGemini) request(model string, req provider.Request) (*gemini.Request, removals, error) {
	var out gemini.Request
	msgs, err := decodeMessages(req)
	if err != nil {
		return nil, nil, fmt.Errorf("gemini: %w", err)
	}
	var system []string
	removed := removals{}
	callNames := map[string]string{} // tool call id -> function name, from earlier assistant turns
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer":
			s, err := contentText(m.Content, i)
			if err != nil {
				return nil, nil, fmt.Errorf("gemini: %w", err)
			}
			if s != "" {
				system = append(system, s)
			}
			removed.message(m, nil)
		case "user", "assistant":
			if g.images && len(m.ToolCalls) > 0 {
				return nil, nil, fmt.Errorf("gemini: %w: messages[%d].tool_calls: image model %s takes no tools; send text and image_url parts", provider.ErrBadRequest, i, model)
			}
			parts, err := gemParts(m, i, removed, g.images)
			if err != nil {
				return nil, nil, fmt.Errorf("gemini: %w", err)
			}
			role := "user"
			if m.Role == "assistant" {
				role = "model"
				for _, tc := range m.ToolCalls {
					callNames[tc.ID] = tc.Function.Name // a later turn reusing an id wins
				}
			}
			out.Contents = appendGemTurn(out.Contents, role, parts)
		case "tool":
			if g.images {
				return nil, nil, fmt.Errorf("gemini: %w: messages[%d]: image model %s takes no tools, so no tool messages", provider.ErrBadRequest, i, model)
			}
			name, ok := callNames[m.ToolCallID]
			if !ok {
				return nil, nil, fmt.Errorf("gemini: %w: messages[%d]: tool_call_id %q answers no earlier assistant tool call", provider.ErrBadRequest, i, m.ToolCallID)
			}
			s, err := contentText(m.Content, i)
			if err != nil {
				return nil, nil, fmt.Errorf("gemini: %w", err)
			}
			removed.message(m, nil)
			out.Contents = appendGemTurn(out.Contents, "user", []gemini.Part{{FunctionResponse: &gemini.FunctionResponse{Name: name, Response: gemini.ToolOutput{Content: s}}}})
		default:
			return nil, nil, fmt.Errorf("gemini: %w: messages[%d] has role %q", provider.ErrBadRequest, i, m.Role)
		}
	}
	if out.Contents == nil {
		out.Contents = []gemini.Content{} // Gemini's own error is clearer than a missing field
	}
	if geminiChecksSignatures(model) {
		signFirstCalls(out.Contents)
	}
	if len(system) > 0 {
		out.SystemInstruction = &gemini.Content{Parts: []gemini.Part{{Text: strings.Join(system, "\n\n")}}}
	}

	tools, err := decodeTools(req)
	if err != nil {
		return nil, nil, fmt.Errorf("gemini: %w", err)
	}
	if g.images && len(tools) > 0 {
		return nil, nil, fmt.Errorf("gemini: %w: tools: image model %s takes no function tools; remove tools and tool_choice", provider.ErrBadRequest, model)
	}
	if len(tools) > 0 {
		decls := make([]gemini.FunctionDeclaration, len(tools))
		for i, t := range tools {
			if t.Strict {
				removed[removedStrict] = true // Gemini has no strict mode: the schema guides only
			}
			decls[i] = gemini.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJSONSchema: t.Parameters}
			if bytes.Equal(t.Parameters, emptySchema) {
				decls[i].ParametersJSONSchema = nil // Gemini's way to declare no parameters
			}
		}
		out.Tools = []gemini.Tool{{FunctionDeclarations: decls}}
		choice, err := decodeToolChoice(req)
		if err != nil {
			return nil, nil, fmt.Errorf("gemini: %w", err)
		}
		mode := map[string]string{"auto": "AUTO", "none": "NONE", "required": "ANY", "function": "ANY"}[choice.Mode]
		if mode != "" {
			out.ToolConfig = &gemini.ToolConfig{FunctionCallingConfig: gemini.FunctionCallingConfig{Mode: mode}}
			if choice.Name != "" {
				out.ToolConfig.FunctionCallingConfig.AllowedFunctionNames = []string{choice.Name}
			}
		}
	}

	if out.GenerationConfig, err = geminiGeneration(req); err != nil {
		return nil, nil, fmt.Errorf("gemini: %w", err)
	}
	return &out, removed, nil
}

// geminiMaxStop is how many stop sequences Gemini takes.
const geminiMaxStop = 5

// geminiGeneration builds generationConfig from the sampling fields, nil when none is set.
func geminiGeneration(req provider.Request) (*gemini.GenerationConfig, error) {
	gc := gemini.GenerationConfig{Temperature: provider.Field(req, "temperature"), TopP: provider.Field(req, "top_p")}
	var err error
	if gc.MaxOutputTokens, err = maxTokens(req); err != nil {
		return nil, err
	}
	if gc.StopSequences, err = stopSequences(req); err != nil {
		return nil, err
	}
	if len(gc.StopSequences) > geminiMaxStop {
		return nil, fmt.Errorf("%w: stop has %d sequences; Gemini takes at most %d", provider.ErrBadRequest, len(gc.StopSequences), geminiMaxStop)
	}
	if err := oneAnswer(req, "Gemini"); err != nil {
		return nil, err
	}
	if gc.Seed, err = int32Field(req, "seed", "Gemini"); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		key string
		dst *json.RawMessage
	}{{"presence_penalty", &gc.PresencePenalty}, {"frequency_penalty", &gc.FrequencyPenalty}} {
		// 0 is the default: leaving it out says the same to models that refuse penalties.
		if v, ok, err := numberField(req, p.key); err != nil {
			return nil, err
		} else if ok && v != 0 {
			*p.dst = provider.Field(req, p.key)
		}
	}
	rf, err := decodeResponseFormat(req)
	if err != nil {
		return nil, err
	}
	if rf.Type == "json_object" || rf.Type == "json_schema" {
		gc.ResponseMimeType, gc.ResponseJSONSchema = "application/json", rf.Schema
	}
	if gc.ThinkingConfig, err = geminiThinking(req); err != nil {
		return nil, err
	}
	if reflect.ValueOf(gc).IsZero() {
		return nil, nil
	}
	return &gc, nil
}

// geminiThinkingBudgets map reasoning_effort to thinking budgets in tokens, as Google's own
// OpenAI-compatible endpoint does. thinkingBudget, unlike Gemini 3's thinkingLevel, is taken
// by Gemini 2.5 and 3 models alike. Models that cannot turn thinking off refuse "none"
// themselves.
var geminiThinkingBudgets = map[string]int64{"none": 0, "minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}

func geminiThinking(req provider.Request) (*gemini.ThinkingConfig, error) {
	raw := provider.Field(req, "reasoning_effort")
	if raw == nil {
		return nil, nil
	}
	var effort string
	_ = json.Unmarshal(raw, &effort)
	budget, ok := geminiThinkingBudgets[effort]
	if !ok {
		return nil, fmt.Errorf("%w: reasoning_effort %s has no Gemini equivalent; send none, minimal, low, medium or high", provider.ErrBadRequest, raw)
	}
	return &gemini.ThinkingConfig{ThinkingBudget: budget}, nil
}

// gemParts converts a user or assistant message into parts: its content parts in order, then
// (assistant) one functionCall per tool call. Empty text is left out. An image model
// (imagesOnly) takes text and image parts only.
func gemParts(m openai.Message, i int, removed removals, imagesOnly bool) ([]gemini.Part, error) {
	cparts, err := contentParts(m.Content, i)
	if err != nil {
		return nil, err
	}
	removed.message(m, cparts)
	var parts []gemini.Part
	for _, cp := range cparts {
		if imagesOnly && cp.Type != "text" && cp.Type != "image_url" && cp.Type != "refusal" {
			return nil, fmt.Errorf("%w: messages[%d]: content part type %q is not supported by image models; send text and image_url parts", provider.ErrBadRequest, i, cp.Type)
		}
		switch cp.Type {
		case "text", "refusal":
			if t := partText(cp); t != "" {
				parts = append(parts, gemini.Part{Text: t})
			}
		case "image_url":
			u := cp.ImageURL.URL
			if mt, data, ok := provider.ParseDataURL(u); ok {
				if mt, err = imageMediaType(mt, "Gemini", gemini.ImageTypes, i); err != nil {
					return nil, err
				}
				if n := provider.Base64Size(data); imagesOnly && n > task.GeminiInlineMax {
					return nil, fmt.Errorf("%w: messages[%d]: an image_url is %d bytes decoded; image models take images of at most 20 MiB (%d bytes)", provider.ErrBadRequest, i, n, task.GeminiInlineMax)
				}
				parts = append(parts, gemini.Part{InlineData: &gemini.Blob{MimeType: mt, Data: data}})
			} else if isHTTPURL(u) {
				mt := imageTypeOf(u) // "" when the URL does not say
				if mt != "" {
					if mt, err = imageMediaType(mt, "Gemini", gemini.ImageTypes, i); err != nil {
						return nil, err
					}
				}
				parts = append(parts, gemini.Part{FileData: &gemini.FileData{MimeType: mt, FileURI: u}})
			} else {
				return nil, fmt.Errorf("%w: messages[%d]: image_url.url must be an http(s) or base64 data URL", provider.ErrBadRequest, i)
			}
		case "input_audio":
			f := strings.ToLower(cp.InputAudio.Format)
			if f == "" || cp.InputAudio.Data == "" {
				return nil, fmt.Errorf("%w: messages[%d]: input_audio needs data and format", provider.ErrBadRequest, i)
			}
			parts = append(parts, gemini.Part{InlineData: &gemini.Blob{MimeType: "audio/" + f, Data: cp.InputAudio.Data}})
		case "file":
			mt, data, ok := provider.ParseDataURL(cp.File.FileData)
			if !ok {
				return nil, fmt.Errorf("%w: messages[%d]: Gemini takes files only as base64 data URLs in file.file_data", provider.ErrBadRequest, i)
			}
			parts = append(parts, gemini.Part{InlineData: &gemini.Blob{MimeType: mt, Data: data}})
		default:
			return nil, fmt.Errorf("%w: messages[%d]: content part type %q is not supported by Gemini", provider.ErrBadRequest, i, cp.Type)
		}
	}
	if m.Role == "assistant" {
		for j, tc := range m.ToolCalls {
			args, err := toolArguments(tc, i, j)
			if err != nil {
				return nil, err
			}
			_, sig := splitGeminiCallID(tc.ID)
			parts = append(parts, gemini.Part{FunctionCall: &gemini.FunctionCall{Name: tc.Function.Name, Args: args}, ThoughtSignature: sig})
		}
	}
	return parts, nil
}

// callSignatureMark separates a tool call id the gateway hands out from the thought signature
// it carries. What follows is the signature in unpadded URL-safe base64, so the whole id stays
// within [a-zA-Z0-9_-] (Anthropic's id rule: a conversation may move between providers).
const callSignatureMark = "__ts_"

// geminiCallID names function call n of a Gemini answer for the client (callID), with the
// part's thoughtSignature inside: clients echo ids back, and Gemini 3 wants the signature
// with the call when the conversation goes on. A signature that is not base64, or that would
// make the id longer than clients may send back, is left out.
func geminiCallID(id string, n int, signature string) string {
	base := callID(id, n)
	if signature == "" {
		return base
	}
	raw, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		if raw, err = base64.URLEncoding.DecodeString(signature); err != nil {
			return base
		}
	}
	out := base + callSignatureMark + base64.RawURLEncoding.EncodeToString(raw)
	if len(out) > MaxToolCallID {
		return base
	}
	return out
}

// splitGeminiCallID undoes geminiCallID: the id as Gemini named the call and the signature in
// standard base64 ("" when the id carries none; an id that only looks like one is kept whole).
func splitGeminiCallID(id string) (base, signature string) {
	i := strings.Index(id, callSignatureMark)
	if i <= 0 {
		return id, ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(id[i+len(callSignatureMark):])
	if err != nil || len(raw) == 0 {
		return id, ""
	}
	return id[:i], base64.StdEncoding.EncodeToString(raw)
}

// skipSignature is Google's documented placeholder for a function call Gemini did not make
// (or whose signature is lost): Gemini 3 then accepts the call without its reasoning state.
const skipSignature = "skip_thought_signature_validator"

// geminiChecksSignatures reports whether model may refuse replayed function calls without a
// thought signature: Gemini 3 and later do, and so may names the gateway cannot date (aliases,
// tuned models); Gemini 1.x and 2.x do not.
func geminiChecksSignatures(model string) bool {
	name := strings.TrimPrefix(model, "models/")
	return !strings.HasPrefix(name, "gemini-1") && !strings.HasPrefix(name, "gemini-2") && !strings.HasPrefix(name, "gemma")
}

// signFirstCalls gives the first function call of each model turn the placeholder signature
// when it has none: Gemini checks the first call of each step (parallel calls after it carry
// none).
func signFirstCalls(contents []gemini.Content) {
	for _, c := range contents {
		if c.Role != "model" {
			continue
		}
		for j := range c.Parts {
			if p := &c.Parts[j]; p.FunctionCall != nil {
				if p.ThoughtSignature == "" {
					p.ThoughtSignature = skipSignature
				}
				break
			}
		}
	}
}

// imageTypeOf guesses an image URL's type from its extension; fileData may omit it.
func imageTypeOf(u string) string {
	if pu, err := url.Parse(u); err == nil {
		u = pu.Path
	}
	switch strings.ToLower(path.Ext(u)) {
	case ".png":
		return "image/png"
	case ".jpg", ".jpeg":
		return "image/jpeg"
	case ".gif":
		return "image/gif"
	case ".webp":
		return "image/webp"
	case ".heic":
		return "image/heic"
	case ".heif":
		return "image/heif"
	}
	return ""
}

// appendGemTurn adds parts as a turn of role, merged into the previous turn when it has the
// same role. A turn without parts is left out.
func appendGemTurn(turns []gemini.Content, role string, parts []gemini.Part) []gemini.Content {
	if len(parts) == 0 {
		return turns
	}
	if n := len(turns); n > 0 && turns[n-1].Role == role {
		turns[n-1].Parts = append(turns[n-1].Parts, parts...)
		return turns
	}
	return append(turns, gemini.Content{Role: role, Parts: parts})
}

// geminiFinish maps finishReason; STOP with function calls is a tool-call finish in OpenAI's
// terms. Reasons without an OpenAI counterpart (OTHER, MALFORMED_FUNCTION_CALL, new ones)
// read as stop.
func geminiFinish(reason string, calls bool) string {
	switch reason {
	case "STOP":
		if calls {
			return "tool_calls"
		}
	case "MAX_TOKENS":
		return "length"
	}
	if slices.Contains(gemini.FilterReasons, reason) {
		return "content_filter"
	}
	return "stop"
}

// geminiUsage reports Gemini usage the OpenAI way: thinking is billed as output, so it counts as
// completion (and as reasoning); prompt tokens of Google's own tools count as prompt.
// promptTokenCount already includes the cached tokens. total_tokens is the sum, as OpenAI
// clients expect.
func geminiUsage(u *gemini.UsageMetadata) *openai.Usage {
	return newUsage(provider.Tokens(u.PromptTokenCount, u.ToolUsePromptTokenCount), provider.Tokens(u.CandidatesTokenCount, u.ThoughtsTokenCount),
		provider.Tokens(u.CachedContentTokenCount), provider.Tokens(u.ThoughtsTokenCount))
}

// geminiFailure is the error an answer carries, or nil.
func geminiFailure(a *gemini.Response) error {
	if a.Error == nil {
		return nil
	}
	code := strings.ToLower(a.Error.Status) // as the gateway shows Gemini's statuses elsewhere
	if code == "" && a.Error.Code != 0 {
		code = strconv.Itoa(a.Error.Code)
	}
	return &provider.UpstreamFailure{Provider: "Gemini", Code: cmp.Or(code, "upstream_error"), Message: cmp.Or(a.Error.Message, "Gemini reported an error")}
}

// geminiBlocked returns the error of an answer without candidates.
func geminiBlocked(a *gemini.Response) error {
	if a.PromptFeedback != nil && a.PromptFeedback.BlockReason != "" {
		return &provider.BlockedError{Provider: "gemini", Reason: a.PromptFeedback.BlockReason, Message: a.PromptFeedback.BlockReasonMessage}
	}
	return fmt.Errorf("gemini: the answer has no candidates")
}

// callID names tool call n of an answer: Gemini gives ids only sometimes (and a provider may
// leave one out), OpenAI clients need one to answer the call.
func callID(id string, n int) string {
	return cmp.Or(id, "call_"+strconv.Itoa(n))
}

// geminiResponse translates one Gemini answer; for streams it keeps the state.
type geminiResponse struct {
	sse    sseReader
	out    chunkWriter // id and model until the first event names the real ones
	calls  int         // function calls streamed so far
	reason string      // the last finishReason reported: sent once, when the body ends
	// pending is a call whose arguments are streaming; it goes out whole when they end.
	pending *pendingCall
	usage   *gemini.UsageMetadata // the latest usageMetadata; the last event has the totals
	done    bool                  // [DONE] or an error went out: the rest is ignored
	// images: the answer of an image model (family I3), whose content is an array of text and
	// image parts (see imageBody).
	images bool
}

func newGeminiResponse(model string) *geminiResponse {
	return &geminiResponse{out: chunkWriter{id: "chatcmpl-" + rand.Text(), model: model, created: now().Unix()}}
}

func (r *geminiResponse) Body(b []byte) ([]byte, error) {
	if r.images {
		return r.imageBody(b)
	}
	var a gemini.Response
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("gemini: the answer is not a GenerateContentResponse (%s)", jsonMismatch("answer", err))
	}
	if err := geminiFailure(&a); err != nil {
		return nil, err
	}
	if len(a.Candidates) == 0 {
		return nil, geminiBlocked(&a)
	}
	cand := a.Candidates[0]
	msg := openai.ResponseMessage{Role: "assistant"}
	var text strings.Builder
	hasText := false
	for _, p := range cand.Content.Parts {
		switch {
		case p.FunctionCall != nil:
			id := geminiCallID(p.FunctionCall.ID, len(msg.ToolCalls), p.ThoughtSignature)
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: id, Type: "function", Function: openai.FunctionCall{Name: p.FunctionCall.Name, Arguments: compactArgs(p.FunctionCall.Args)}})
		case p.Text != "" && !p.Thought: // thought summaries are not the answer
			text.WriteString(p.Text)
			hasText = true
		}
	}
	if hasText {
		msg.Content = openai.TextContent(text.String())
	}
	c := openai.ChatCompletion{
		Header:  r.out.header(openai.ObjectCompletion, a.ResponseID, a.ModelVersion),
		Choices: []openai.Choice{{Message: msg, FinishReason: geminiFinish(cand.FinishReason, len(msg.ToolCalls) > 0)}},
	}
	if a.UsageMetadata != nil {
		c.Usage = geminiUsage(a.UsageMetadata)
	}
	return provider.Marshal(c), nil
}

func (r *geminiResponse) Chunk(b []byte, end bool) ([]byte, error) {
	err := r.sse.feed(b, end, r.event)
	if err == nil && end && !r.done {
		// Gemini has no end marker: a body that ends after a finishReason is a whole answer,
		// finished with the last reason reported (older Vertex streams repeat STOP on every
		// chunk, and a later RECITATION overrides it). One that ends before any was cut.
		r.endPending()
		if r.reason == "" {
			err = &provider.UpstreamFailure{Provider: "Gemini", Code: "upstream_error", Message: "the stream ended without a finishReason: the answer is incomplete"}
		} else {
			r.out.chunk(openai.Delta{}, geminiFinish(r.reason, r.calls > 0))
			if r.usage != nil {
				r.out.usage(geminiUsage(r.usage))
			}
			r.out.doneMarker()
		}
	}
	if err != nil || end {
		r.done = true // after an error event nothing may follow it
	}
	return r.out.take(), err
}

func (r *geminiResponse) event(data []byte) error {
	if r.done {
		return nil
	}
	if data[0] == '[' {
		// The JSON-array form of a stream (and of errors written into one).
		var many []json.RawMessage
		if err := json.Unmarshal(data, &many); err != nil {
			return fmt.Errorf("gemini: a stream event is not a GenerateContentResponse (%s)", jsonMismatch("event", err))
		}
		for _, one := range many {
			if err := r.event(one); err != nil {
				return err
			}
		}
		return nil
	}
	var a gemini.Response
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("gemini: a stream event is not a GenerateContentResponse (%s)", jsonMismatch("event", err))
	}
	if err := geminiFailure(&a); err != nil {
		return err
	}
	if !r.out.started {
		r.out.id = cmp.Or(a.ResponseID, r.out.id)
		r.out.model = cmp.Or(a.ModelVersion, r.out.model)
	}
	if a.UsageMetadata != nil {
		r.usage = a.UsageMetadata
	}
	if len(a.Candidates) == 0 {
		if a.PromptFeedback != nil && a.PromptFeedback.BlockReason != "" {
			return geminiBlocked(&a) // headers are out already: the refusal travels as an error event
		}
		return nil
	}
	r.out.start()
	cand := a.Candidates[0]
	for _, p := range cand.Content.Parts {
		fc := p.FunctionCall
		switch {
		case fc != nil && r.pending != nil && fc.Name == "":
			// More of the streamed call's arguments, or its end.
			for _, pa := range fc.PartialArgs {
				if err := r.pending.args.set(pa); err != nil {
					return err
				}
			}
			if !fc.WillContinue {
				r.endPending()
			}
		case fc != nil && fc.WillContinue:
			r.endPending()
			r.pending = &pendingCall{id: fc.ID, name: fc.Name, signature: p.ThoughtSignature}
		case fc != nil:
			r.endPending()
			r.call(fc.ID, fc.Name, p.ThoughtSignature, compactArgs(fc.Args))
		case p.Text != "" && !p.Thought:
			r.endPending()
			r.out.chunk(openai.Delta{Content: ptr(p.Text)}, "")
		}
	}
	r.reason = cmp.Or(cand.FinishReason, r.reason)
	return nil
}

// call sends one whole function call.
func (r *geminiResponse) call(id, name, signature, args string) {
	n := r.calls
	r.calls++
	r.out.chunk(openai.Delta{ToolCalls: []openai.ToolCallDelta{{Index: n, ToolCall: openai.ToolCall{ID: geminiCallID(id, n, signature), Type: "function",
		Function: openai.FunctionCall{Name: name, Arguments: args}}}}}, "")
}

// endPending sends the call whose arguments were streaming, if any.
func (r *geminiResponse) endPending() {
	if c := r.pending; c != nil {
		r.pending = nil
		r.call(c.id, c.name, c.signature, string(c.args.json()))
	}
}

// pendingCall is a function call whose arguments arrive as partialArgs.
type pendingCall struct {
	id, name, signature string
	args                argNode
}

// argNode is a JSON value built from partialArgs: an object (keys in arrival order), an array,
// a string being continued, or a finished scalar.
type argNode struct {
	keys   []string
	fields map[string]*argNode
	items  []*argNode
	isList bool
	str    *strings.Builder
	scalar json.RawMessage
}

// set applies one partial argument under n, the arguments object.
func (n *argNode) set(pa gemini.PartialArg) error {
	steps, err := argPath(pa.JSONPath)
	if err != nil {
		return fmt.Errorf("gemini: streamed function call arguments: %w", err)
	}
	cur := n
	for _, st := range steps {
		cur = cur.child(st)
	}
	switch {
	case pa.StringValue != nil:
		if cur.str == nil {
			cur.str = &strings.Builder{}
		}
		cur.str.WriteString(*pa.StringValue)
	case len(pa.NumberValue) > 0:
		cur.scalar = pa.NumberValue
	case pa.BoolValue != nil:
		cur.scalar = json.RawMessage(strconv.FormatBool(*pa.BoolValue))
	default:
		cur.scalar = json.RawMessage("null")
	}
	return nil
}

// child returns the node at step (a key, or an index when int), creating it.
func (n *argNode) child(step any) *argNode {
	if i, ok := step.(int); ok {
		n.isList = true
		for len(n.items) <= i {
			n.items = append(n.items, &argNode{})
		}
		return n.items[i]
	}
	k := step.(string)
	if n.fields == nil {
		n.fields = map[string]*argNode{}
	}
	c, ok := n.fields[k]
	if !ok {
		c = &argNode{}
		n.fields[k] = c
		n.keys = append(n.keys, k)
	}
	return c
}

// json renders the value; the root renders as an object even when no argument arrived.
func (n *argNode) json() []byte {
	var b bytes.Buffer
	n.write(&b, true)
	return b.Bytes()
}

func (n *argNode) write(b *bytes.Buffer, root bool) {
	switch {
	case n.isList:
		b.WriteByte('[')
		for i, it := range n.items {
			if i > 0 {
				b.WriteByte(',')
			}
			it.write(b, false)
		}
		b.WriteByte(']')
	case n.fields != nil || root:
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(provider.Marshal(k))
			b.WriteByte(':')
			n.fields[k].write(b, false)
		}
		b.WriteByte('}')
	case n.str != nil:
		b.Write(provider.Marshal(n.str.String()))
	case n.scalar != nil:
		b.Write(n.scalar)
	default:
		b.WriteString("null")
	}
}

// argPath splits a JSON path like $.a.b[2]['c d'] into keys and indexes.
func argPath(p string) ([]any, error) {
	rest, ok := strings.CutPrefix(p, "$")
	var steps []any
	for ok && rest != "" {
		switch {
		case rest[0] == '.':
			end := strings.IndexAny(rest[1:], ".[")
			if end < 0 {
				end = len(rest) - 1
			}
			steps, rest = append(steps, rest[1:1+end]), rest[1+end:]
		case strings.HasPrefix(rest, "['"):
			end := strings.Index(rest, "']")
			if end < 0 {
				ok = false
				break
			}
			steps, rest = append(steps, rest[2:end]), rest[end+2:]
		case rest[0] == '[':
			end := strings.IndexByte(rest, ']')
			i, err := strconv.Atoi(rest[1:max(end, 1)])
			if end < 0 || err != nil || i < 0 || i > maxStreamedIndex {
				ok = false
				break
			}
			steps, rest = append(steps, i), rest[end+1:]
		default:
			ok = false
		}
	}
	if !ok || len(steps) == 0 {
		return nil, fmt.Errorf("jsonPath %q is not a path below $", p)
	}
	return steps, nil
}

// maxStreamedIndex bounds an array index in a streamed argument's path: a provider's bogus
// index must not make the gateway allocate without limit.
const maxStreamedIndex = 10000

// RefusesCredential: Gemini answers a bad API key with 400 INVALID_ARGUMENT (reason
// API_KEY_INVALID) and a missing one with 403 PERMISSION_DENIED.
func (r *geminiResponse) RefusesCredential(status int, body []byte) bool {
	return gemini.RefusesCredential(status, body)
}

var _ CredentialRefusal = (*geminiResponse)(nil)
