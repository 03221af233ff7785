// Package gemini declares Google's Gemini API wire format (generateContent and
// streamGenerateContent; batchEmbedContents in embed.go) as far as the gateway speaks it: the request it sends, the answer
// (one shape for chat and image models, read by encoding/json or encoding/json/v2), usage and
// errors. Shapes, and the facts about them the adapters share.
package gemini

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// Request is a GenerateContentRequest.
type Request struct {
	Contents          []Content         `json:"contents"`
	SystemInstruction *Content          `json:"systemInstruction,omitempty"`
	Tools             []Tool            `json:"tools,omitempty"`
	ToolConfig        *ToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *GenerationConfig `json:"generationConfig,omitempty"`
}

// Content is one turn: user or model (none in systemInstruction).
type Content struct {
	Role  string `json:"role,omitempty"`
	Parts []Part `json:"parts"`
}

// Part is a part of any kind; only the field of its kind is set.
type Part struct {
	Text             string            `json:"text,omitempty"`
	Thought          bool              `json:"thought,omitempty"` // a thought summary (or an interim image): not the answer
	InlineData       *Blob             `json:"inlineData,omitempty"`
	FileData         *FileData         `json:"fileData,omitempty"`
	FunctionCall     *FunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *FunctionResponse `json:"functionResponse,omitempty"`
	ThoughtSignature string            `json:"thoughtSignature,omitempty"` // base64, on function calls
}

// Blob is inline data: an image, audio or a file, in base64.
type Blob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

// FileData is data Gemini fetches: an image URL.
type FileData struct {
	MimeType string `json:"mimeType,omitempty"`
	FileURI  string `json:"fileUri"`
}

// FunctionCall is a call the model makes (or a replayed one in a request).
type FunctionCall struct {
	ID   string          `json:"id,omitempty"` // answers only, and only from some models
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
	// Gemini 3 may stream a call's arguments: a part with the name and willContinue, parts of
	// partialArgs, and a part without willContinue (often an empty functionCall) at its end.
	PartialArgs  []PartialArg `json:"partialArgs,omitempty"`
	WillContinue bool         `json:"willContinue,omitempty"`
}

// PartialArg is one piece of streamed arguments: the value at a JSON path ($.a.b[2].c).
// Strings arrive in pieces, each continuing the string already at the path.
type PartialArg struct {
	JSONPath    string          `json:"jsonPath"`
	StringValue *string         `json:"stringValue,omitempty"`
	NumberValue json.RawMessage `json:"numberValue,omitempty"` // kept as sent: no float rounding
	BoolValue   *bool           `json:"boolValue,omitempty"`
	NullValue   json.RawMessage `json:"nullValue,omitempty"`
}

// FunctionResponse is a tool's answer to a call, named after the function.
type FunctionResponse struct {
	Name     string     `json:"name"`
	Response ToolOutput `json:"response"`
}

// ToolOutput wraps a tool message's text: Gemini wants the response as an object.
type ToolOutput struct {
	Content string `json:"content"`
}

// Tool is a set of function declarations, or Google Search grounding (image models).
type Tool struct {
	FunctionDeclarations []FunctionDeclaration `json:"functionDeclarations,omitempty"`
	GoogleSearch         *struct{}             `json:"googleSearch,omitempty"`
}

// FunctionDeclaration declares a function; ParametersJSONSchema takes a JSON Schema as is (the
// older "parameters" field is an OpenAPI subset).
type FunctionDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

// ToolConfig is toolConfig.
type ToolConfig struct {
	FunctionCallingConfig FunctionCallingConfig `json:"functionCallingConfig"`
}

// FunctionCallingConfig says whether and which functions the model may call.
type FunctionCallingConfig struct {
	Mode                 string   `json:"mode"` // AUTO | NONE | ANY
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

// GenerationConfig is generationConfig.
type GenerationConfig struct {
	Temperature        json.RawMessage `json:"temperature,omitempty"`
	TopP               json.RawMessage `json:"topP,omitempty"`
	MaxOutputTokens    int64           `json:"maxOutputTokens,omitempty"`
	StopSequences      []string        `json:"stopSequences,omitempty"`
	Seed               *int64          `json:"seed,omitempty"`
	PresencePenalty    json.RawMessage `json:"presencePenalty,omitempty"`
	FrequencyPenalty   json.RawMessage `json:"frequencyPenalty,omitempty"`
	ResponseMimeType   string          `json:"responseMimeType,omitempty"`
	ResponseJSONSchema json.RawMessage `json:"responseJsonSchema,omitempty"`
	ThinkingConfig     *ThinkingConfig `json:"thinkingConfig,omitempty"`
	// Image models: which parts the answer may hold, and the images' shape.
	ResponseModalities []string     `json:"responseModalities,omitempty"`
	ImageConfig        *ImageConfig `json:"imageConfig,omitempty"`
}

// ThinkingConfig is generationConfig.thinkingConfig.
type ThinkingConfig struct {
	ThinkingBudget int64 `json:"thinkingBudget"` // 0 turns thinking off
}

// ImageConfig is generationConfig.imageConfig.
type ImageConfig struct {
	AspectRatio string `json:"aspectRatio,omitempty"`
	ImageSize   string `json:"imageSize,omitempty"`
}

// ImageTypes are the image media types Gemini takes.
var ImageTypes = []string{"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}

// Response is a GenerateContentResponse, or an error event in a stream.
type Response struct {
	Candidates     []Candidate     `json:"candidates"`
	PromptFeedback *PromptFeedback `json:"promptFeedback"`
	UsageMetadata  *UsageMetadata  `json:"usageMetadata"`
	ModelVersion   string          `json:"modelVersion"`
	ResponseID     string          `json:"responseId"`
	Error          *Error          `json:"error"`
}

// Candidate is one answer; the gateway reads the first.
type Candidate struct {
	Content struct {
		Parts []Part `json:"parts"`
	} `json:"content"`
	FinishReason  string `json:"finishReason"`
	FinishMessage string `json:"finishMessage"`
}

// PromptFeedback says why a prompt got no candidate (a block).
type PromptFeedback struct {
	BlockReason        string `json:"blockReason"`
	BlockReasonMessage string `json:"blockReasonMessage"`
}

// FilterReasons are the finishReasons that mean the output was filtered for its content.
var FilterReasons = []string{"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"}

// UsageMetadata is an answer's token usage.
type UsageMetadata struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	TotalTokenCount         int64 `json:"totalTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
	// CandidatesTokensDetails splits candidatesTokenCount by modality (TEXT, IMAGE, ...):
	// image models bill their images apart from their text.
	CandidatesTokensDetails []struct {
		Modality   string `json:"modality"`
		TokenCount int64  `json:"tokenCount"`
	} `json:"candidatesTokensDetails"`
}

// Error is Google's error object: {"error": {code, message, status}}.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
}

// RefusesCredential reports whether an error answer refuses the API key: Gemini answers a bad
// key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID) and a missing one with 403
// PERMISSION_DENIED.
func RefusesCredential(status int, body []byte) bool {
	switch status {
	case http.StatusBadRequest:
		return bytes.Contains(body, []byte("API_KEY_INVALID")) || bytes.Contains(body, []byte("API key not valid"))
	case http.StatusForbidden:
		return bytes.Contains(body, []byte("unregistered callers"))
	}
	return false
}
