// Package openai declares the OpenAI chat-completions wire format, once: the request's
// messages, content parts, tools and tool calls, the answer whole and streamed, and its usage;
// and the embeddings API's request and answer (embeddings.go).
// The gateway's validator, its adapters, its meter and its token estimates read these shapes,
// and the demo model and the test fakes answer with them. Shapes only: no I/O, and nothing of
// the gateway's own beyond the two usage members it adds (other_models, estimated).
//
// Every shape decodes with encoding/json and with encoding/json/v2 alike; each reader keeps
// the decoder it chose (v2 where a body may be large).
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
)

// ChatRequest is a chat completion request, as far as an answering server acts on it. Unknown
// fields are accepted (OpenAI refuses them), so gateway extensions never break a server.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	Tools               []Tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"` // a mode string or a NamedToolChoice
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
}

// StreamOptions is stream_options; IncludeUsage asks for a final usage chunk.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one entry of messages.
type Message struct {
	Role string `json:"role"`
	Name string `json:"name"` // a participant name, to tell speakers of one role apart
	// Content stays raw: a string, an array of parts, or null (Parts reads it), so a reader
	// that does not need a multi-MB image never decodes it.
	Content      json.RawMessage `json:"content"`
	ToolCalls    []ToolCall      `json:"tool_calls"`
	ToolCallID   string          `json:"tool_call_id"`  // on tool messages: the call answered
	FunctionCall *FunctionCall   `json:"function_call"` // the legacy form of tool_calls
}

// Content part types.
const (
	PartText       = "text"
	PartImageURL   = "image_url"
	PartInputAudio = "input_audio"
	PartFile       = "file"
	PartRefusal    = "refusal"
)

// PartTypes are the content part types, in the order messages list them.
var PartTypes = []string{PartText, PartImageURL, PartInputAudio, PartFile, PartRefusal}

// RolePartTypes are the roles a message may have and the content part types each may send.
var RolePartTypes = map[string][]string{
	"system":    {PartText},
	"developer": {PartText},
	"tool":      {PartText},
	"user":      {PartText, PartImageURL, PartInputAudio, PartFile},
	"assistant": {PartText, PartRefusal},
}

// ImageDetails are the values of image_url.detail, a resolution hint.
var ImageDetails = []string{"auto", "low", "high"}

// Part is one content part of any type; only the fields of its type are set.
type Part struct {
	Type       string     `json:"type"`
	Text       string     `json:"text,omitempty"`
	Refusal    string     `json:"refusal,omitempty"`
	ImageURL   ImageURL   `json:"image_url,omitzero"`
	InputAudio InputAudio `json:"input_audio,omitzero"`
	File       File       `json:"file,omitzero"`
}

// ImageURL is an image_url part's image: an http(s) URL or a data URL.
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"` // auto | low | high
}

// InputAudio is an input_audio part's audio, base64.
type InputAudio struct {
	Data   string `json:"data"`
	Format string `json:"format,omitempty"`
}

// File is a file part's file: its data URL, or the id of an uploaded file.
type File struct {
	FileData string `json:"file_data,omitempty"`
	FileID   string `json:"file_id,omitempty"`
	Filename string `json:"filename,omitempty"`
}

// Errors of Parts.
var (
	ErrContentString = errors.New("content is not a valid JSON string")
	ErrContentShape  = errors.New("content must be a string or an array of content parts")
)

// Parts reads a message's content: a string is one text part, null (or nothing) no part.
func Parts(content json.RawMessage) ([]Part, error) {
	raw := bytes.TrimSpace(content)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, ErrContentString
		}
		return []Part{{Type: PartText, Text: s}}, nil
	}
	var parts []Part
	if json.Unmarshal(raw, &parts) != nil {
		return nil, ErrContentShape
	}
	return parts, nil
}

// ToolCall is one call in an assistant message: the client's in a request, the model's in an
// answer.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"` // function
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a tool call calls, and the legacy function_call.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"` // JSON-encoded, as the model wrote them
}

// Tool is one entry of tools.
type Tool struct {
	Type     string             `json:"type"` // function
	Function FunctionDefinition `json:"function"`
}

// FunctionDefinition is a function tool's declaration.
type FunctionDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // a JSON Schema
	Strict      bool            `json:"strict"`
}

// ToolChoiceModes are the string forms of tool_choice.
var ToolChoiceModes = []string{"auto", "none", "required"}

// NamedToolChoice is the object form of tool_choice: {"type": "function", "function": {"name"}}.
type NamedToolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// ResponseFormatTypes are the values of response_format.type.
var ResponseFormatTypes = []string{"text", "json_object", "json_schema"}

// ResponseFormat is response_format; JSONSchema is set with type json_schema.
type ResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Schema json.RawMessage `json:"schema"`
	} `json:"json_schema"`
}
