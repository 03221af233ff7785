// Package anthropic declares the Anthropic Messages API wire format (POST /messages) as far as
// the gateway speaks it: the request it sends, the answer whole and streamed, usage with its
// sampling iterations, and errors. Shapes only.
package anthropic

import "encoding/json"

// Version is the anthropic-version header the shapes below follow.
const Version = "2023-06-01"

// Request is a Messages API request.
type Request struct {
	Model         string          `json:"model"`
	MaxTokens     int64           `json:"max_tokens"`
	System        string          `json:"system,omitempty"`
	Messages      []Message       `json:"messages"`
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
	Temperature   json.RawMessage `json:"temperature,omitempty"`
	TopP          json.RawMessage `json:"top_p,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Metadata      *RequestMeta    `json:"metadata,omitempty"`
	OutputConfig  *OutputConfig   `json:"output_config,omitempty"`
}

// OutputConfig is output_config; Format holds a structured output's JSON Schema.
type OutputConfig struct {
	Format *Format `json:"format,omitempty"`
}

// Format is output_config.format.
type Format struct {
	Type   string          `json:"type"` // json_schema
	Schema json.RawMessage `json:"schema"`
}

// RequestMeta is metadata.
type RequestMeta struct {
	UserID string `json:"user_id"`
}

// Message is one turn: user or assistant.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Block is a request content block of any type; only the fields of its type are set.
type Block struct {
	Type      string          `json:"type"` // text | image | document | tool_use | tool_result
	Text      string          `json:"text,omitempty"`
	Source    *Source         `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
}

// Source is an image's or a document's data.
type Source struct {
	Type      string `json:"type"` // base64 | url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// ImageTypes are the image media types Anthropic takes.
var ImageTypes = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}

// Tool is a client tool.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      bool            `json:"strict,omitempty"`
}

// ToolChoice is tool_choice.
type ToolChoice struct {
	Type                   string `json:"type"` // auto | none | any | tool
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Response is a whole answer, or an error answer (Type "error").
type Response struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	Model      string    `json:"model"`
	Content    []Content `json:"content"`
	StopReason string    `json:"stop_reason"`
	Usage      Usage     `json:"usage"`
	Error      *Error    `json:"error"`
}

// Content is an answer's content block.
type Content struct {
	Type     string          `json:"type"` // text | thinking | tool_use | redacted_thinking | server tools' blocks
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
}

// Usage is an answer's token usage.
type Usage struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
	// Iterations, when the answer has them, say what each sampling iteration used: server-side
	// compaction runs a summarising iteration before the answer's, an advisor runs on another
	// model between the executor's. The counts above then cover only part of what ran.
	Iterations []Iteration `json:"iterations"`
}

// Iteration is one sampling iteration of usage.iterations.
type Iteration struct {
	Type  string `json:"type"`
	Model string `json:"model"` // named when it ran on another model (an advisor's)
	Usage
}

// UsageUpdate is a usage object of a stream event: only the counts it names change.
type UsageUpdate struct {
	InputTokens         *int64      `json:"input_tokens"`
	OutputTokens        *int64      `json:"output_tokens"`
	CacheReadTokens     *int64      `json:"cache_read_input_tokens"`
	CacheCreationTokens *int64      `json:"cache_creation_input_tokens"`
	Iterations          []Iteration `json:"iterations"`
}

// Event is a stream event's data; Type repeats the event name.
type Event struct {
	Type    string `json:"type"` // message_start | content_block_start | content_block_delta | content_block_stop | message_delta | message_stop | ping | error
	Index   int    `json:"index"`
	Message struct {
		ID         string      `json:"id"`
		Model      string      `json:"model"`
		Content    []Content   `json:"content"`
		StopReason string      `json:"stop_reason"`
		Usage      UsageUpdate `json:"usage"`
	} `json:"message"`
	ContentBlock Content `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"` // text_delta | thinking_delta | input_json_delta | signature_delta | ...
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage UsageUpdate `json:"usage"`
	Error *Error      `json:"error"`
}

// Error is Anthropic's error object, in an error event or an error answer.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
