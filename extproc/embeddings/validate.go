package embeddings

// The client's embeddings request, checked field by field before anything else reads it:
// OpenAI's fields by type and range, with messages that name the field and the fix.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// Bounds on client-supplied values, after OpenAI's own where it has them.
const (
	maxModelID      = 256
	maxUser         = 256
	maxProviderName = 64
	maxDimensions   = 65536 // far above any model's (OpenAI's largest is 3072)
	maxTokenID      = 1<<31 - 1
	// specialTokens bounds the tokens a provider adds to each input and counts in its usage:
	// a BERT-style model's [CLS] and [SEP], a decoder's BOS and EOS, a server's own prefix
	// (vLLM and TEI count them; OpenAI adds none). Without it three one-byte inputs held for 3
	// tokens were billed 9 by such a server, the rest cut to the hold.
	specialTokens = 8
)

// request is what the gateway reads from a valid embeddings request.
type request struct {
	model         string
	routeProvider string
	routeMode     string
	texts         []string  // the input as text, or
	tokens        [][]int64 // as token arrays
	single        bool      // input was one value (a string or one token array), not a list
	// bound is a strict bound of the input's tokens: a text's UTF-8 length (every BPE token
	// spans at least a byte), a token array's length (exact), each with the specialTokens a
	// provider may add to it. The hold is sized with it.
	bound int64
}

// inputs is how many inputs the request embeds.
func (r *request) inputs() int { return len(r.texts) + len(r.tokens) }

func bad(code, format string, args ...any) *core.APIError {
	return core.Errorf(http.StatusBadRequest, code, format, args...)
}

// parse validates an embeddings request body.
func parse(body []byte) (*request, *core.APIError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, bad("invalid_json", `request body is not a JSON object; send {"model": ..., "input": "text to embed"}`)
	}
	req := &request{}
	present := func(f string) (json.RawMessage, bool) {
		v, ok := fields[f]
		return v, ok && !bytes.Equal(v, []byte("null"))
	}
	if v, ok := present("model"); !ok || json.Unmarshal(v, &req.model) != nil || req.model == "" {
		return nil, bad("missing_model", "model is required and must be a string: set it to an embeddings model id from GET /v1/models (output_modalities embeddings)")
	} else if len(req.model) > maxModelID {
		return nil, bad("invalid_request", "model is too long (over %d bytes); send a model id from GET /v1/models", maxModelID)
	}
	v, ok := present("input")
	if !ok {
		return nil, bad("missing_input", `input is required: send a string, an array of strings, or an array of token arrays, like "input": "The food was delicious"`)
	}
	if e := req.readInput(v); e != nil {
		return nil, e
	}
	if e := readOptions(present, req); e != nil {
		return nil, e
	}
	return req, nil
}

// readInput reads input in one of OpenAI's four shapes.
func (r *request) readInput(v json.RawMessage) *core.APIError {
	texts, tokens, ok := openai.EmbeddingInputs(v)
	if !ok {
		return inputShape(v)
	}
	t := bytes.TrimSpace(v)
	single := t[0] == '"' || (tokens != nil && !bytes.HasPrefix(bytes.TrimSpace(t[1:]), []byte("[")))
	n := len(texts) + len(tokens)
	switch {
	case n == 0:
		return bad("invalid_request", "input is an empty array; send at least one string (or token array) to embed")
	case n > openai.MaxEmbeddingInputs:
		return bad("invalid_request", "input has %d items; at most %d are embedded per request: split them over several requests", n, openai.MaxEmbeddingInputs)
	}
	for i, t := range texts {
		switch {
		case t == "":
			return bad("invalid_request", "%s is an empty string; every input must have text to embed (remove it)", at(i, single))
		case !utf8.ValidString(t):
			return bad("invalid_request", "%s is not valid UTF-8; send text encoded in UTF-8", at(i, single))
		}
		r.bound += int64(len(t)) + specialTokens
	}
	for i, ids := range tokens {
		if len(ids) == 0 {
			return bad("invalid_request", "%s is an empty token array; every input must have tokens to embed (remove it)", at(i, single))
		}
		for j, id := range ids {
			if id < 0 || id > maxTokenID {
				return bad("invalid_request", "%s[%d] is %d, not a token id; token ids are integers from 0 to %d", at(i, single), j, id, maxTokenID)
			}
		}
		r.bound += int64(len(ids)) + specialTokens
	}
	r.texts, r.tokens, r.single = texts, tokens, single
	return nil
}

// at names input i for a message: input itself when it was a single value (a string, or one
// token array).
func at(i int, single bool) string {
	if single {
		return "input"
	}
	return fmt.Sprintf("input[%d]", i)
}

// inputShape names what is wrong with an input of none of the four shapes.
func inputShape(v json.RawMessage) *core.APIError {
	const want = "input must be a string, an array of strings, an array of token ids, or an array of token-id arrays"
	var items []json.RawMessage
	if json.Unmarshal(v, &items) != nil {
		return bad("invalid_request", "%s; it is %s", want, kindOf(v))
	}
	first := kindOf(items[0])
	for i, it := range items {
		if k := kindOf(it); k != first || (k != "a string" && k != "a number" && k != "an array") {
			return bad("invalid_request", "%s (all of one kind); input[%d] is %s where input[0] is %s", want, i, k, first)
		}
	}
	return bad("invalid_request", "%s; token ids are integers from 0 to %d", want, maxTokenID)
}

// kindOf names a JSON value's kind for a message.
func kindOf(v json.RawMessage) string {
	t := bytes.TrimSpace(v)
	if len(t) == 0 {
		return "empty"
	}
	switch t[0] {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// readOptions checks the optional fields: dimensions, encoding_format, user, and the gateway's
// route and route_mode. Other fields pass on unchecked, as on chat.
func readOptions(present func(string) (json.RawMessage, bool), req *request) *core.APIError {
	if v, ok := present("dimensions"); ok {
		var n int64
		if json.Unmarshal(v, &n) != nil || n < 1 || n > maxDimensions {
			return bad("invalid_request", "dimensions must be a positive integer (the embedding's length, e.g. 256; at most the model's own)")
		}
	}
	if v, ok := present("encoding_format"); ok {
		var f string
		if json.Unmarshal(v, &f) != nil || (f != openai.EncodingFloat && f != openai.EncodingBase64) {
			return bad("invalid_request", `encoding_format must be "float" or "base64" (float when omitted)`)
		}
	}
	if v, ok := present("user"); ok {
		var u string
		if json.Unmarshal(v, &u) != nil || len(u) > maxUser || strings.ContainsFunc(u, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return bad("invalid_request", "user must be a plain string of at most %d bytes (an end-user id, no control characters)", maxUser)
		}
	}
	if v, ok := present("route"); ok {
		var r struct {
			Provider *string `json:"provider"`
		}
		switch {
		case json.Unmarshal(v, &r) != nil:
			return bad("invalid_request", `route must be an object like {"provider": "openai"}; remove route to let the gateway choose`)
		case r.Provider != nil && (*r.Provider == "" || len(*r.Provider) > maxProviderName):
			return bad("invalid_request", `route.provider must name a provider, like {"provider": "openai"}; remove route to let the gateway choose`)
		case r.Provider != nil:
			req.routeProvider = *r.Provider
		}
	}
	if v, ok := present("route_mode"); ok {
		if json.Unmarshal(v, &req.routeMode) != nil || !ir.ValidMode(req.routeMode) {
			return bad("invalid_route_mode", "route_mode must be one of %s (balanced when omitted)", strings.Join(ir.Modes, ", "))
		}
	}
	return nil
}
