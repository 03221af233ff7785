package demo

// The embeddings API as an answering server speaks it (POST /v1/embeddings): the demo server
// and test/fakeupstream both answer through it. The vectors are no model's: each is a unit
// vector drawn from a hash of its input, so the same text always gets the same vector, and
// the answer says it is the demo's.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollway/tollway/extproc/apischema/openai"
)

// DefaultDimensions is a demo vector's length when the request names no dimensions.
const DefaultDimensions = 64

// EmbeddingsLabel is the member every demo embeddings answer carries: the vectors are hashes.
const EmbeddingsLabel = "Tollway demo model (offline, no LLM): deterministic vectors from a hash of each input, not a model's embeddings"

// EmbeddingsRequest is a checked embeddings request: its inputs as texts or token arrays.
type EmbeddingsRequest struct {
	openai.EmbeddingsRequest
	Texts  []string
	Tokens [][]int64
}

// ParseEmbeddings decodes and checks an embeddings request, with OpenAI's messages.
func ParseEmbeddings(body []byte) (*EmbeddingsRequest, *Error) {
	var req EmbeddingsRequest
	if err := json.Unmarshal(body, &req.EmbeddingsRequest); err != nil {
		return nil, &Error{Status: http.StatusBadRequest, Message: "We could not parse the JSON body of your request. The OpenAI API expects a JSON payload."}
	}
	var ok bool
	req.Texts, req.Tokens, ok = openai.EmbeddingInputs(req.Input)
	switch {
	case req.Model == "":
		return nil, &Error{Status: http.StatusBadRequest, Message: "you must provide a model parameter"}
	case len(req.Input) == 0:
		return nil, &Error{http.StatusBadRequest, "Missing required parameter: 'input'.", "input", "missing_required_parameter"}
	case !ok || len(req.Texts)+len(req.Tokens) == 0:
		return nil, &Error{http.StatusBadRequest, "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.", "input", ""}
	case req.EncodingFormat != "" && req.EncodingFormat != openai.EncodingFloat && req.EncodingFormat != openai.EncodingBase64:
		return nil, &Error{http.StatusBadRequest, "Invalid value for 'encoding_format': must be 'float' or 'base64'.", "encoding_format", "invalid_value"}
	case req.Dimensions < 0:
		return nil, &Error{http.StatusBadRequest, "Invalid 'dimensions': integer below minimum value. Expected a value >= 1.", "dimensions", "integer_below_min_value"}
	}
	return &req, nil
}

// Seeds are the inputs as the strings their vectors are drawn from (a token array by its ids).
func (r *EmbeddingsRequest) Seeds() []string {
	out := append([]string(nil), r.Texts...)
	for _, ids := range r.Tokens {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = strconv.FormatInt(id, 10)
		}
		out = append(out, "tokens:"+strings.Join(s, ","))
	}
	return out
}

// InputTokens counts the input as the demo does: words of each text (at least one), a token
// array's length.
func (r *EmbeddingsRequest) InputTokens() int64 {
	var n int64
	for _, t := range r.Texts {
		n += int64(max(len(strings.Fields(t)), 1))
	}
	for _, ids := range r.Tokens {
		n += int64(len(ids))
	}
	return n
}

// Vector is seed's unit vector of dims float32s (DefaultDimensions when dims <= 0): drawn from
// SHA-256 of the seed, so the same seed always gets the same vector.
func Vector(seed string, dims int) []float32 {
	if dims <= 0 {
		dims = DefaultDimensions
	}
	h := sha256.Sum256([]byte(seed))
	state := binary.LittleEndian.Uint64(h[:8])
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		state += 0x9e3779b97f4a7c15 // splitmix64
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		v[i] = float64(z>>11)/float64(1<<53)*2 - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// EmbeddingsAnswer is the answer to r: each input's Vector, in the encoding asked for, usage
// counting prompt tokens (InputTokens when prompt <= 0), and label as its "demo" member
// ("": none).
func (r *EmbeddingsRequest) EmbeddingsAnswer(prompt int64, label string) []byte {
	if prompt <= 0 {
		prompt = r.InputTokens()
	}
	type answer struct {
		openai.EmbeddingsResponse
		Demo string `json:"demo,omitempty"`
	}
	a := answer{Demo: label, EmbeddingsResponse: openai.EmbeddingsResponse{Object: "list", Model: r.Model,
		Usage: &openai.EmbeddingsUsage{PromptTokens: prompt, TotalTokens: prompt}}}
	for i, s := range r.Seeds() {
		a.Data = append(a.Data, openai.Embedding{Object: "embedding", Index: i, Embedding: openai.EmbeddingVector(Vector(s, r.Dimensions), r.EncodingFormat)})
	}
	b, _ := json.Marshal(a)
	return b
}
