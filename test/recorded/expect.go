package recorded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Expected is what an OpenAI client must get from a recording.
type Expected struct {
	Stream bool
	Status int    // the provider's HTTP status
	Fails  bool   // the answer must reach the client as an error
	Text   string // the answer's text (thinking excluded); for a failing stream, what came before
	Calls  []Call // the function calls, in order
	Finish string // the OpenAI finish_reason; "" when Fails
	Usage  *Usage // the provider's final counts; nil when it reported none
	// Images is the number of images of an image model's answer (kind "image"): its message
	// content is then an array of text and image_url parts.
	Images int64
}

// Call is one function call the provider asked for.
type Call struct {
	Name string
	Args json.RawMessage // a JSON object
}

// Usage is token usage the OpenAI way.
type Usage struct {
	Prompt, Completion, Cached int64
	Reasoning                  *int64 // asserted only when the provider reports it (Gemini thoughtsTokenCount)
	// ImageTokens is the part of Completion that was images (Gemini's IMAGE modality).
	ImageTokens int64
	// Others is usage on models other than the one asked (an Anthropic advisor's iterations),
	// per model in the order they first ran: billed at that model's price.
	Others []ModelUsage
}

// ModelUsage is token usage on one model, by the provider's name for it.
type ModelUsage struct {
	Model                      string
	Prompt, Completion, Cached int64
}

// imageKind marks a recording of an image model's answer (Gemini's image models): the gateway
// answers it as an image model's chat answer, message content in parts.
const imageKind = "image"

// IsImage reports whether r is an image model's answer.
func (r *Recording) IsImage() bool { return slices.Contains(r.Meta.Kinds, imageKind) }

// Expect reads a recording with the reference reader of its provider.
func Expect(r *Recording) (*Expected, error) {
	e := &Expected{Stream: r.Meta.Stream, Status: r.Meta.Status}
	if r.Meta.Status < 200 || r.Meta.Status > 299 {
		e.Fails = true
		return e, nil
	}
	var events [][]byte
	if r.Meta.Stream {
		events = sseData(r.Wire())
	} else {
		events = [][]byte{r.Raw}
	}
	var err error
	switch {
	case r.Provider == "anthropic":
		err = e.anthropic(events)
	case r.IsImage():
		err = e.geminiImage(events)
	default:
		err = e.gemini(events)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.FullName(), err)
	}
	if e.Fails {
		e.Finish = ""
	}
	return e, nil
}

// sseData splits an event stream into the data of its events (CRLF, CR and LF line ends; a
// last event without its blank line counts when its data is whole JSON).
func sseData(b []byte) [][]byte {
	s := strings.ReplaceAll(strings.ReplaceAll(string(b), "\r\n", "\n"), "\r", "\n")
	blocks := strings.Split(s, "\n\n")
	var out [][]byte
	for i, blk := range blocks {
		var data []string
		for _, ln := range strings.Split(blk, "\n") {
			if v, ok := strings.CutPrefix(ln, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
		}
		d := []byte(strings.Join(data, "\n"))
		if bare := strings.TrimSpace(blk); len(data) == 0 && json.Valid([]byte(bare)) && strings.Contains(bare, `"error"`) {
			// Gemini writes a failure after its last event as bare JSON, without "data:".
			out = append(out, []byte(bare))
			continue
		}
		if len(data) == 0 || (i == len(blocks)-1 && !json.Valid(d)) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// anthropicUsageFields are the counts whose latest reported value wins, 0 included.
var anthropicUsageFields = []string{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}

func (e *Expected) anthropic(events [][]byte) error {
	counts := map[string]int64{}
	seen := false
	answered := ""          // the answer's model: iterations naming it ran on the model asked
	var others []ModelUsage // iterations on other models (an advisor), per model
	takeUsage := func(raw json.RawMessage) error {
		if len(raw) == 0 || string(raw) == "null" {
			return nil
		}
		var u map[string]json.RawMessage
		if err := json.Unmarshal(raw, &u); err != nil {
			return err
		}
		var iterations []map[string]json.RawMessage
		if it, ok := u["iterations"]; ok && string(it) != "null" {
			if err := json.Unmarshal(it, &iterations); err != nil {
				return fmt.Errorf("usage.iterations: %w", err)
			}
		}
		if len(iterations) > 0 {
			// Server-side compaction and advisors: the top-level counts are only part of what
			// ran (the last iteration, or the executor's); every iteration is billed.
			counts, others, seen = map[string]int64{}, nil, true
			for i, it := range iterations {
				var model string
				if v, ok := it["model"]; ok && string(v) != "null" {
					if err := json.Unmarshal(v, &model); err != nil {
						return fmt.Errorf("usage.iterations[%d].model: %w", i, err)
					}
				}
				n := map[string]int64{}
				for _, f := range anthropicUsageFields {
					if v, ok := it[f]; ok && string(v) != "null" {
						var c int64
						if err := json.Unmarshal(v, &c); err != nil {
							return fmt.Errorf("usage.iterations[%d].%s: %w", i, f, err)
						}
						n[f] = c
					}
				}
				if model == "" || model == answered {
					for f, c := range n {
						counts[f] += c
					}
					continue
				}
				others = addModelUsage(others, ModelUsage{Model: model,
					Prompt:     n["input_tokens"] + n["cache_read_input_tokens"] + n["cache_creation_input_tokens"],
					Completion: n["output_tokens"], Cached: n["cache_read_input_tokens"]})
			}
			return nil
		}
		for _, f := range anthropicUsageFields {
			if v, ok := u[f]; ok && string(v) != "null" {
				var n int64
				if err := json.Unmarshal(v, &n); err != nil {
					return fmt.Errorf("usage.%s: %w", f, err)
				}
				counts[f], seen = n, true
			}
		}
		return nil
	}
	type block struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	stop := ""
	if !e.Stream {
		var m struct {
			Type       string          `json:"type"`
			Model      string          `json:"model"`
			Content    []block         `json:"content"`
			StopReason string          `json:"stop_reason"`
			Usage      json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(events[0], &m); err != nil {
			return err
		}
		answered = m.Model
		if m.Type == "error" {
			e.Fails = true
			return nil
		}
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				e.Text += b.Text
			case "tool_use":
				e.Calls = append(e.Calls, Call{b.Name, objectOrEmpty(b.Input)})
			}
		}
		stop = m.StopReason
		if err := takeUsage(m.Usage); err != nil {
			return err
		}
	} else {
		blocks := map[int]*block{}
		args := map[int]*strings.Builder{}
		var order []int
		for _, d := range events {
			var ev struct {
				Type    string `json:"type"`
				Index   int    `json:"index"`
				Message struct {
					Model      string          `json:"model"`
					Content    []block         `json:"content"`
					StopReason string          `json:"stop_reason"`
					Usage      json.RawMessage `json:"usage"`
				} `json:"message"`
				ContentBlock block `json:"content_block"`
				Delta        struct {
					Type        string  `json:"type"`
					Text        string  `json:"text"`
					PartialJSON *string `json:"partial_json"`
					StopReason  string  `json:"stop_reason"`
				} `json:"delta"`
				Usage json.RawMessage `json:"usage"`
			}
			if err := json.Unmarshal(d, &ev); err != nil {
				return fmt.Errorf("event %q: %w", d, err)
			}
			switch ev.Type {
			case "error":
				e.Fails = true
			case "message_start":
				if answered == "" {
					answered = ev.Message.Model
				}
				// Usually empty; a resumed programmatic tool call arrives whole in it.
				for _, b := range ev.Message.Content {
					switch b.Type {
					case "text":
						e.Text += b.Text
					case "tool_use":
						e.Calls = append(e.Calls, Call{b.Name, objectOrEmpty(b.Input)})
					}
				}
				if ev.Message.StopReason != "" {
					stop = ev.Message.StopReason
				}
				if err := takeUsage(ev.Message.Usage); err != nil {
					return err
				}
			case "content_block_start":
				b := ev.ContentBlock
				blocks[ev.Index] = &b
				if b.Type == "text" {
					e.Text += b.Text
				}
				if b.Type == "tool_use" {
					args[ev.Index] = &strings.Builder{}
					order = append(order, ev.Index)
				}
			case "content_block_delta":
				b := blocks[ev.Index]
				if b == nil {
					return fmt.Errorf("delta for unknown block %d", ev.Index)
				}
				if b.Type == "text" && ev.Delta.Type == "text_delta" {
					e.Text += ev.Delta.Text
				}
				if b.Type == "tool_use" && ev.Delta.PartialJSON != nil {
					args[ev.Index].WriteString(*ev.Delta.PartialJSON)
				}
			case "message_delta":
				if ev.Delta.StopReason != "" {
					stop = ev.Delta.StopReason
				}
				if err := takeUsage(ev.Usage); err != nil {
					return err
				}
			}
			if e.Fails {
				break
			}
		}
		for _, i := range order {
			a := json.RawMessage(args[i].String())
			if len(bytes.TrimSpace(a)) == 0 {
				a = objectOrEmpty(blocks[i].Input)
			}
			if !json.Valid(a) {
				return fmt.Errorf("tool_use block %d: arguments %q are not JSON", i, a)
			}
			e.Calls = append(e.Calls, Call{blocks[i].Name, a})
		}
	}
	if stop == "" {
		e.Fails = true
	}
	e.Finish = map[string]string{"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
		"tool_use": "tool_calls", "refusal": "content_filter"}[stop]
	if e.Finish == "" && !e.Fails {
		return fmt.Errorf("stop_reason %q has no mapping in the reference reader", stop)
	}
	if seen {
		e.Usage = &Usage{
			Prompt:     counts["input_tokens"] + counts["cache_read_input_tokens"] + counts["cache_creation_input_tokens"],
			Completion: counts["output_tokens"],
			Cached:     counts["cache_read_input_tokens"],
			Others:     others,
		}
	}
	return nil
}

// addModelUsage adds u to the usage of its model in list, or appends it.
func addModelUsage(list []ModelUsage, u ModelUsage) []ModelUsage {
	for i := range list {
		if list[i].Model == u.Model {
			list[i].Prompt += u.Prompt
			list[i].Completion += u.Completion
			list[i].Cached += u.Cached
			return list
		}
	}
	return append(list, u)
}

func objectOrEmpty(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return json.RawMessage("{}")
	}
	return raw
}

// geminiFinish is the OpenAI finish_reason of a Gemini finishReason. Reasons OpenAI has no word
// for (OTHER, MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, MODEL_ARMOR, ...) read as stop.
func geminiFinish(reason string, calls bool) string {
	switch reason {
	case "STOP":
		if calls {
			return "tool_calls"
		}
		return "stop"
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return "content_filter"
	}
	return "stop"
}

// gemAnswer is a GenerateContentResponse (or a stream's event) as the reference reader reads it.
type gemAnswer struct {
	Error      json.RawMessage `json:"error"`
	Candidates []struct {
		Content struct {
			Parts []struct {
				Text         *string `json:"text"`
				Thought      bool    `json:"thought"`
				FunctionCall *struct {
					Name         string          `json:"name"`
					Args         json.RawMessage `json:"args"`
					PartialArgs  []partialArg    `json:"partialArgs"`
					WillContinue bool            `json:"willContinue"`
				} `json:"functionCall"`
				InlineData *struct {
					MimeType string `json:"mimeType"`
				} `json:"inlineData"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *gemUsage `json:"usageMetadata"`
}

type gemUsage struct {
	Prompt     int64  `json:"promptTokenCount"`
	Candidates int64  `json:"candidatesTokenCount"`
	Thoughts   *int64 `json:"thoughtsTokenCount"`
	ToolUse    int64  `json:"toolUsePromptTokenCount"`
	Cached     int64  `json:"cachedContentTokenCount"`
	Details    []struct {
		Modality   string `json:"modality"`
		TokenCount int64  `json:"tokenCount"`
	} `json:"candidatesTokensDetails"`
}

// usage is u the OpenAI way: thinking is output, tool-use prompts are prompt.
func (u *gemUsage) usage() *Usage {
	out := &Usage{Prompt: u.Prompt + u.ToolUse, Completion: u.Candidates, Cached: u.Cached, Reasoning: u.Thoughts}
	if u.Thoughts != nil {
		out.Completion += *u.Thoughts
	}
	return out
}

func (e *Expected) gemini(events [][]byte) error {
	var last *gemUsage
	finish := ""
	blocked := false
	// A call whose arguments stream as partialArgs: it ends at an empty functionCall, at the
	// next call, or at the end of the stream.
	var streamed map[string]any
	var streamedName string
	endStreamed := func() {
		if streamed != nil {
			b, _ := json.Marshal(streamed)
			e.Calls = append(e.Calls, Call{streamedName, b})
			streamed = nil
		}
	}
	for _, d := range events {
		var a gemAnswer
		if err := json.Unmarshal(d, &a); err != nil {
			return fmt.Errorf("event %q: %w", d, err)
		}
		if len(a.Error) > 0 && string(a.Error) != "null" {
			e.Fails = true
			break
		}
		if a.UsageMetadata != nil {
			last = a.UsageMetadata
		}
		if len(a.Candidates) == 0 {
			if a.PromptFeedback != nil && a.PromptFeedback.BlockReason != "" {
				blocked = true
			}
			continue
		}
		c := a.Candidates[0]
		for _, p := range c.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				fc := p.FunctionCall
				switch {
				case streamed != nil && fc.Name == "": // a streamed call's arguments, or its end ({})
					for _, pa := range fc.PartialArgs {
						if err := pa.apply(streamed); err != nil {
							return err
						}
					}
					if len(fc.PartialArgs) == 0 && !fc.WillContinue {
						endStreamed()
					}
				case fc.WillContinue: // the first part of a call whose arguments stream (Gemini 3)
					endStreamed()
					streamedName, streamed = fc.Name, map[string]any{}
				default:
					endStreamed()
					e.Calls = append(e.Calls, Call{fc.Name, objectOrEmpty(fc.Args)})
				}
			case p.Text != nil && !p.Thought:
				e.Text += *p.Text
			}
		}
		if c.FinishReason != "" {
			finish = c.FinishReason
		}
	}
	endStreamed()
	if blocked || finish == "" {
		e.Fails = true
	} else {
		e.Finish = geminiFinish(finish, len(e.Calls) > 0)
	}
	if last != nil {
		e.Usage = last.usage()
	}
	return nil
}

// partialArg is one piece of a streamed function call's arguments: the value at a JSON path
// ("$.a.b[2].c"); string values continue the string already there.
type partialArg struct {
	JSONPath    string          `json:"jsonPath"`
	StringValue *string         `json:"stringValue"`
	NumberValue *float64        `json:"numberValue"`
	BoolValue   *bool           `json:"boolValue"`
	NullValue   json.RawMessage `json:"nullValue"`
}

func (pa partialArg) apply(root map[string]any) error {
	path, ok := strings.CutPrefix(pa.JSONPath, "$")
	if !ok {
		return fmt.Errorf("partialArgs jsonPath %q", pa.JSONPath)
	}
	var steps []any // string keys and int indexes
	for path != "" {
		switch {
		case path[0] == '.':
			end := strings.IndexAny(path[1:], ".[")
			if end < 0 {
				end = len(path) - 1
			}
			steps, path = append(steps, path[1:1+end]), path[1+end:]
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			var n int
			if _, err := fmt.Sscanf(path[1:max(end, 1)], "%d", &n); err != nil || end < 0 {
				return fmt.Errorf("partialArgs jsonPath %q", pa.JSONPath)
			}
			steps, path = append(steps, n), path[end+1:]
		default:
			return fmt.Errorf("partialArgs jsonPath %q", pa.JSONPath)
		}
	}
	if len(steps) == 0 {
		return fmt.Errorf("partialArgs jsonPath %q names no field", pa.JSONPath)
	}
	var cur any = root
	set := func(v any) {}
	for i, st := range steps {
		var next any
		switch c := cur.(type) {
		case map[string]any:
			k := st.(string)
			next = c[k]
			set = func(v any) { c[k] = v }
		case *[]any:
			n := st.(int)
			for len(*c) <= n {
				*c = append(*c, nil)
			}
			next = (*c)[n]
			set = func(v any) { (*c)[n] = v }
		}
		if i == len(steps)-1 {
			switch {
			case pa.StringValue != nil:
				prev, _ := next.(string)
				set(prev + *pa.StringValue)
			case pa.NumberValue != nil:
				set(*pa.NumberValue)
			case pa.BoolValue != nil:
				set(*pa.BoolValue)
			default:
				set(nil)
			}
			break
		}
		if next == nil {
			if _, isIndex := steps[i+1].(int); isIndex {
				next = &[]any{}
			} else {
				next = map[string]any{}
			}
			set(next)
		}
		cur = next
	}
	return nil
}

// maxImages is the most images the gateway keeps of one answer; more are dropped unbilled.
const maxImages = 16

// geminiImage reads an image model's whole answer as the gateway's image chat answer shows it:
// its text (thoughts left out) and its images, at most maxImages; a blocked prompt fails. Its
// usage is every output token Gemini reports, text, images and thinking alike
// (candidatesTokenCount, all of it output, plus thoughtsTokenCount), with the IMAGE
// modality's tokens named apart: Gemini's candidatesTokensDetails may list only the IMAGE
// entry though text came back.
func (e *Expected) geminiImage(events [][]byte) error {
	if e.Stream || len(events) != 1 {
		return fmt.Errorf("an image model answers whole: the recording must be one JSON answer")
	}
	var a gemAnswer
	if err := json.Unmarshal(events[0], &a); err != nil {
		return err
	}
	if len(a.Error) > 0 && string(a.Error) != "null" || len(a.Candidates) == 0 {
		e.Fails = true // an error, or a blocked prompt: 400 content_filter
		return nil
	}
	c := a.Candidates[0]
	for _, p := range c.Content.Parts {
		switch {
		case p.Thought:
		case p.InlineData != nil && strings.HasPrefix(p.InlineData.MimeType, "image/"):
			e.Images = min(e.Images+1, maxImages)
		case p.Text != nil:
			e.Text += *p.Text
		}
	}
	e.Finish = geminiFinish(c.FinishReason, false) // a whole answer: no reason reads as stop
	if u := a.UsageMetadata; u != nil {
		e.Usage = u.usage()
		for _, d := range u.Details {
			if d.Modality == "IMAGE" {
				e.Usage.ImageTokens += d.TokenCount
			}
		}
	}
	return nil
}
