package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
)

// The embeddings API (POST /v1/embeddings): the request as a server acts on it, and the answer.

// EmbeddingsRequest is an embeddings request. Input is a string, an array of strings, an
// array of token ids or an array of token-id arrays, kept raw (the gateway's validator reads
// it with the tokenizer, servers with EmbeddingInputs).
type EmbeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     int             `json:"dimensions,omitempty"`
	EncodingFormat string          `json:"encoding_format,omitempty"` // float (default) or base64
	User           string          `json:"user,omitempty"`
}

// Encoding formats of an embedding in the answer: a JSON array of floats, or the base64 of
// its little-endian float32s.
const (
	EncodingFloat  = "float"
	EncodingBase64 = "base64"
)

// MaxEmbeddingInputs is how many inputs one request may carry (OpenAI's limit).
const MaxEmbeddingInputs = 2048

// EmbeddingsResponse is the answer: one embedding per input, in input order.
type EmbeddingsResponse struct {
	Object string           `json:"object"` // "list"
	Data   []Embedding      `json:"data"`
	Model  string           `json:"model"`
	Usage  *EmbeddingsUsage `json:"usage,omitempty"`
}

// Embedding is one input's vector: a []float32 (float) or a string (base64), as Vector holds.
type Embedding struct {
	Object    string          `json:"object"` // "embedding"
	Index     int             `json:"index"`
	Embedding json.RawMessage `json:"embedding"`
}

// EmbeddingsUsage counts the input tokens (an embedding has no output tokens).
type EmbeddingsUsage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// EmbeddingInputs reads input as a list of texts or of token arrays (exactly one of the two
// is set); ok is false when input has none of the four shapes.
func EmbeddingInputs(input json.RawMessage) (texts []string, tokens [][]int64, ok bool) {
	var one string
	if json.Unmarshal(input, &one) == nil {
		return []string{one}, nil, true
	}
	if json.Unmarshal(input, &texts) == nil {
		return texts, nil, true
	}
	var ids []int64
	if json.Unmarshal(input, &ids) == nil {
		return nil, [][]int64{ids}, true
	}
	if json.Unmarshal(input, &tokens) == nil {
		return nil, tokens, true
	}
	return nil, nil, false
}

// EmbeddingBase64 is a vector as encoding_format base64 answers it: its float32s,
// little-endian, in standard padded base64 (what the SDKs decode).
func EmbeddingBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// EmbeddingVector is a vector as encoding_format asks for it: a JSON array of numbers
// (float, the default) or a base64 string.
func EmbeddingVector(v []float32, encoding string) json.RawMessage {
	var b []byte
	if encoding == EncodingBase64 {
		b, _ = json.Marshal(EmbeddingBase64(v))
		return b
	}
	if v == nil {
		v = []float32{}
	}
	b, _ = json.Marshal(v) // float32s always encode (NaN aside, which no vector holds)
	return b
}
