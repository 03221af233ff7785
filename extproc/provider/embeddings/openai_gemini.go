package embeddings

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/tollway/tollway/extproc/apischema/gemini"
	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// toGemini speaks Gemini's batchEmbedContents: one EmbedContentRequest per input text, with
// dimensions as outputDimensionality; the answer's vectors come back as OpenAI's list, base64
// encoded here when the client asked for it (Gemini only sends floats). Gemini reports no
// usage: the router-level filter counts the input's tokens for the bill (and says so). Token
// arrays have no Gemini equivalent (its tokenizer is not OpenAI's): refused as the client's
// mistake.
type toGemini struct{}

func (toGemini) Embed(p *ir.Provider, model string, req provider.Request) (*provider.Upstream, error) {
	var r openai.EmbeddingsRequest
	if err := json.Unmarshal(req.Encode(), &r); err != nil {
		return nil, fmt.Errorf("gemini: embeddings request: %w", err)
	}
	texts, tokens, ok := openai.EmbeddingInputs(r.Input)
	switch {
	case !ok:
		return nil, fmt.Errorf("gemini: input is neither text nor token arrays: %w", provider.ErrBadRequest)
	case tokens != nil:
		return nil, fmt.Errorf("input as token arrays cannot be sent to provider %s (Gemini takes text only): send the text, or pin an OpenAI provider with route.provider: %w", p.Name, provider.ErrBadRequest)
	case len(texts) > gemini.MaxBatchEmbed:
		return nil, fmt.Errorf("input has %d items; provider %s (Gemini) embeds at most %d per request: split them over several requests: %w", len(texts), p.Name, gemini.MaxBatchEmbed, provider.ErrBadRequest)
	}
	name := strings.TrimPrefix(model, "models/")
	out := gemini.BatchEmbedRequest{Requests: make([]gemini.EmbedRequest, len(texts))}
	for i, t := range texts {
		out.Requests[i] = gemini.EmbedRequest{Model: "models/" + name, Content: gemini.Content{Parts: []gemini.Part{{Text: t}}}, OutputDimensionality: r.Dimensions}
	}
	body, err := provider.EncodeJSON(out)
	if err != nil {
		return nil, fmt.Errorf("gemini: encode embeddings request: %w", err)
	}
	return &provider.Upstream{
		Body: body,
		Path: "/models/" + url.PathEscape(name) + ":batchEmbedContents",
		Headers: map[string]string{
			"x-goog-api-key": p.APIKey,
			"authorization":  "", // the client's gateway key must not reach Google
			"content-type":   "application/json",
		},
		Response: &geminiEmbeddings{model: model, encoding: r.EncodingFormat, inputs: len(texts)},
	}, nil
}

// geminiEmbeddings translates one batchEmbedContents answer.
type geminiEmbeddings struct {
	model    string
	encoding string
	inputs   int
}

// Body turns Gemini's embeddings into OpenAI's list, without usage (Gemini sends none).
func (g *geminiEmbeddings) Body(b []byte) ([]byte, error) {
	var in gemini.BatchEmbedResponse
	if err := jsonv2.Unmarshal(b, &in, provider.Lenient); err != nil {
		return nil, fmt.Errorf("gemini: embeddings answer is not batchEmbedContents JSON: %w", err)
	}
	if len(in.Embeddings) != g.inputs {
		return nil, fmt.Errorf("gemini: %d embeddings for %d inputs", len(in.Embeddings), g.inputs)
	}
	out := openai.EmbeddingsResponse{Object: "list", Model: g.model, Data: make([]openai.Embedding, len(in.Embeddings))}
	for i, e := range in.Embeddings {
		out.Data[i] = openai.Embedding{Object: "embedding", Index: i, Embedding: openai.EmbeddingVector(e.Values, g.encoding)}
	}
	return provider.Marshal(out), nil
}

// Chunk: embeddings answers are never streamed.
func (g *geminiEmbeddings) Chunk([]byte, bool) ([]byte, error) {
	return nil, errors.New("gemini: an embeddings answer is not a stream")
}

// RefusesCredential: Gemini answers a bad API key with 400 INVALID_ARGUMENT.
func (g *geminiEmbeddings) RefusesCredential(status int, body []byte) bool {
	return gemini.RefusesCredential(status, body)
}
