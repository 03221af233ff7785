package fakeupstream

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/tollway/tollway/cmd/tollway/demo"
	"github.com/tollway/tollway/extproc/apischema/gemini"
)

// Embeddings, as OpenAI (POST /v1/embeddings) and Gemini (POST
// /v1beta/models/{model}:batchEmbedContents) answer them: each input's vector is demo.Vector
// of the input (a token array by its ids, demo.EmbeddingsRequest.Seeds), so a test computes
// the vector it expects. OpenAI's usage counts demo.EmbeddingsRequest.InputTokens (or the
// fault's ReportPrompt); Gemini reports no usage, as the real API. Scripted faults apply.

// openAIEmbeddings answers POST /v1/embeddings.
func (s *Server) openAIEmbeddings(w http.ResponseWriter, r *http.Request, body []byte) {
	if fault, ok := s.peekFault(); ok && (fault.ReportPrompt > 0 || fault.Stall) {
		s.nextFault()
		s.writeEmbeddings(w, r, body, int64(fault.ReportPrompt), -1, fault.Stall)
		return
	}
	replied, cut := s.applyFault(w, r, func(code int) string { m, _ := faultDefaults(code); return m }, func(code int, msg string) {
		_, c := faultDefaults(code)
		demo.WriteError(w, code, msg, "", c)
	})
	if !replied {
		s.writeEmbeddings(w, r, body, 0, cut, false)
	}
}

// writeEmbeddings answers the embeddings request body, its usage prompt tokens (0: counted);
// cut >= 0 drops the connection halfway through the body, stall waits there for the client.
func (s *Server) writeEmbeddings(w http.ResponseWriter, r *http.Request, body []byte, prompt int64, cut int, stall bool) {
	req, perr := demo.ParseEmbeddings(body)
	if perr != nil {
		perr.Write(w)
		return
	}
	b := req.EmbeddingsAnswer(prompt, "")
	if stall {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b[:len(b)/2])
		http.NewResponseController(w).Flush()
		sleep(r.Context(), 10*time.Second)
		b = b[len(b)/2:]
	}
	writeWhole(w, b, cut)
}

// geminiEmbed answers batchEmbedContents for model, refusing what Gemini refuses: no
// requests or more than 100, a request for another model, a content without text.
func (s *Server) geminiEmbed(w http.ResponseWriter, r *http.Request, body []byte, model string) {
	replied, _ := s.applyFault(w, r, geminiFaultMessage, func(code int, msg string) { writeGeminiError(w, code, msg) })
	if replied {
		return
	}
	var req gemini.BatchEmbedRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeGeminiError(w, http.StatusBadRequest, "Invalid JSON payload received. "+err.Error())
		return
	}
	switch n := len(req.Requests); {
	case n == 0:
		writeGeminiError(w, http.StatusBadRequest, "* BatchEmbedContentsRequest.requests: requests is required.")
		return
	case n > gemini.MaxBatchEmbed:
		writeGeminiError(w, http.StatusBadRequest, "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch")
		return
	}
	var out gemini.BatchEmbedResponse
	for i, e := range req.Requests {
		text := ""
		for _, p := range e.Content.Parts {
			text += p.Text
		}
		switch {
		case e.Model != "models/"+model:
			writeGeminiError(w, http.StatusBadRequest, "* BatchEmbedContentsRequest.requests["+strconv.Itoa(i)+"].model: the model in the request must match models/"+model+".")
			return
		case text == "":
			writeGeminiError(w, http.StatusBadRequest, "* BatchEmbedContentsRequest.requests["+strconv.Itoa(i)+"].content.parts: contents must not be empty.")
			return
		}
		out.Embeddings = append(out.Embeddings, gemini.ContentEmbedding{Values: demo.Vector(text, e.OutputDimensionality)})
	}
	writeJSON(w, out)
}
