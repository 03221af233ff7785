package gemini

// BatchEmbedRequest is a batchEmbedContents request (POST models/{model}:batchEmbedContents):
// one EmbedContentRequest per input text.
type BatchEmbedRequest struct {
	Requests []EmbedRequest `json:"requests"`
}

// MaxBatchEmbed is how many requests one batchEmbedContents takes: Google refuses more with
// 400 INVALID_ARGUMENT "at most 100 requests can be in one batch".
const MaxBatchEmbed = 100

// EmbedRequest embeds one content; Model repeats the URL's model as "models/{model}".
type EmbedRequest struct {
	Model                string  `json:"model"`
	Content              Content `json:"content"`
	OutputDimensionality int     `json:"outputDimensionality,omitempty"`
}

// BatchEmbedResponse is its answer: one embedding per request, in order. It reports no usage.
type BatchEmbedResponse struct {
	Embeddings []ContentEmbedding `json:"embeddings"`
}

// ContentEmbedding is one vector.
type ContentEmbedding struct {
	Values []float32 `json:"values"`
}
