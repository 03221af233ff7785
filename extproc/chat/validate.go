package chat

// The client's chat request, checked field by field before anything else reads it: the fields
// of docs/api.md#request-validation and the common OpenAI ones by type and range, and every
// client-supplied identifier bounded (they reach logs, providers and usage records). One pass
// over the body with encoding/json/v2's tokenizer (jsontext, from its mirror module), which
// never copies a large string such as a base64 image. Messages name the field and the fix, never a Go type.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider/chat"
	"github.com/tollway/tollway/xds/ir"
)

// Bounds on client-supplied values, after OpenAI's own where it has them.
const (
	maxModelID = 256 // catalog ids and route:<slug> are far shorter
	maxUser    = 256 // the end-user id the client passes on
	maxNameLen = 64  // message names and function names (OpenAI's limit)
	// tool call ids, echoed back by clients; Gemini's ids carry thought signatures
	maxToolCallID   = chat.MaxToolCallID
	maxTools        = 128 // OpenAI's limit on tools per request
	maxStop         = 16  // stop sequences
	maxN            = 128 // answers per request (OpenAI's limit)
	maxTopLogprobs  = 20
	maxProviderName = 64 // provider names (ir's name rule)
)

// chatRequest is what the gateway reads from a valid chat request.
type chatRequest struct {
	fields        []string // top-level member names, in order
	model         string
	stream        bool
	includeUsage  bool  // stream_options.include_usage
	maxTokens     int64 // max_completion_tokens, else max_tokens; 0 when absent
	n             int64 // answers asked for (1 when absent)
	routeProvider string
	routeMode     string
	promptBound   int64 // a strict bound of the prompt's tokens (billing.PromptBound's rule)
}

// fieldError is a client mistake in one field; code is the error code the client gets.
type fieldError struct{ code, msg string }

func (e *fieldError) Error() string { return e.msg }

// invalid reports a problem at path: fields under messages are invalid_messages, the others
// invalid_request.
func invalid(path, format string, args ...any) error {
	code := "invalid_request"
	if strings.HasPrefix(path, "messages") {
		code = "invalid_messages"
	}
	return &fieldError{code: code, msg: path + " " + fmt.Sprintf(format, args...)}
}

// fieldName is what a top-level request field may be called, and maxFields how many there may
// be (OpenAI's chat API has about 40).
var fieldName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

const maxFields = 128

// parseChat validates a chat request body and returns what the gateway needs of it.
func parseChat(body []byte) (*chatRequest, *core.APIError) {
	w := &walker{dec: jsontext.NewDecoder(bytes.NewBuffer(body)), bound: billing.NewPromptBounder()}
	if w.dec.PeekKind() != '{' {
		problem := "it is empty"
		if len(bytes.TrimSpace(body)) > 0 {
			kind := w.found()
			problem = "it is " + kind
			if _, err := w.dec.ReadValue(); err != nil {
				problem = core.JSONSyntax(err)
			}
		}
		return nil, core.Errorf(http.StatusBadRequest, "invalid_json",
			`request body is not a JSON object (%s); send {"model": ..., "messages": [...]}`, problem)
	}
	req := &chatRequest{n: 1}
	var c chatChecks
	err := w.object("", func(name string) error {
		// Field names travel in x-tollway-removed-params and to providers: bounded and plain.
		if !fieldName.MatchString(name) {
			return &fieldError{"invalid_request", fmt.Sprintf("request field %q is not a parameter name: names are 1-64 letters, digits and _ . -", core.Clip(name))}
		}
		if len(req.fields) == maxFields {
			return &fieldError{"invalid_request", fmt.Sprintf("the request has more than %d fields; send the chat parameters only", maxFields)}
		}
		req.fields = append(req.fields, name)
		return c.field(w, req, name)
	})
	if err == nil {
		if _, err = w.dec.ReadToken(); errors.Is(err, io.EOF) {
			err = c.finish(req)
		} else if err == nil {
			err = &fieldError{"invalid_json", "request body has more after its JSON object; send one object"}
		}
	}
	var fe *fieldError
	switch {
	case err == nil:
		req.promptBound = int64(w.bound.Tokens())
		return req, nil
	case errors.As(err, &fe):
		return nil, core.Errorf(http.StatusBadRequest, fe.code, "%s", fe.msg)
	}
	return nil, core.Errorf(http.StatusBadRequest, "invalid_json",
		"request body is not valid JSON (%s); send a JSON object encoded in UTF-8", core.JSONSyntax(err))
}

// chatChecks holds what is checked once the whole request has been read.
type chatChecks struct {
	hasModel, hasMessages bool
	tools                 map[string]bool // declared function names; nil without tools
	choice                string          // tool_choice: auto, none, required or function
	choiceName            string          // the function tool_choice forces
}

// field checks one top-level member; it consumes the value.
func (c *chatChecks) field(w *walker, req *chatRequest, name string) error {
	switch name {
	case "model":
		s, err := w.str("model", maxModelID)
		if err != nil || s == "" {
			var fe *fieldError
			if err == nil || errors.As(err, &fe) && !strings.Contains(fe.msg, "too long") {
				return &fieldError{"missing_model", "model is required and must be a string: set it to a model id from GET /v1/models"}
			}
			return err
		}
		req.model, c.hasModel = s, true
		return nil
	case "messages":
		if w.null() {
			return nil
		}
		c.hasMessages = true
		return w.messages()
	}
	if w.null() {
		return nil // an optional field set to null is as good as absent
	}
	switch name {
	case "stream":
		b, err := w.boolean("stream")
		req.stream = b
		return err
	case "stream_options":
		return w.object("stream_options", func(k string) error {
			if k != "include_usage" || w.null() {
				return w.skip()
			}
			b, err := w.boolean("stream_options.include_usage")
			req.includeUsage = b
			return err
		})
	case "max_tokens", "max_completion_tokens":
		n, err := w.integer(name, 1, 1<<31-1)
		if name == "max_completion_tokens" || req.maxTokens == 0 {
			req.maxTokens = n // max_completion_tokens wins over the older max_tokens
		}
		return err
	case "temperature":
		_, err := w.number(name, 0, 2)
		return err
	case "top_p":
		_, err := w.number(name, 0, 1)
		return err
	case "presence_penalty", "frequency_penalty":
		_, err := w.number(name, -2, 2)
		return err
	case "n":
		n, err := w.integer(name, 1, maxN)
		req.n = n
		return err
	case "seed":
		_, err := w.integer(name, -1<<63, 1<<63-1)
		return err
	case "top_logprobs":
		_, err := w.integer(name, 0, maxTopLogprobs)
		return err
	case "logprobs", "parallel_tool_calls", "store":
		_, err := w.boolean(name)
		return err
	case "reasoning_effort", "service_tier":
		_, err := w.str(name, maxNameLen)
		return err
	case "user":
		s, err := w.str(name, maxUser)
		if err == nil && hasControl(s) {
			return invalid(name, "must not contain control characters; send a plain end-user id")
		}
		return err
	case "stop":
		return w.stop()
	case "logit_bias":
		return w.object(name, func(token string) error {
			_, err := w.number("logit_bias["+core.Clip(token)+"]", -100, 100)
			return err
		})
	case "functions": // the legacy form of tools
		return w.array(name, func(i int) error {
			n, err := w.span(func() error {
				return w.object(fmt.Sprintf("functions[%d]", i), func(string) error { return w.skip() })
			})
			w.bound.Text(n)
			return err
		})
	case "metadata":
		return w.object(name, func(string) error { return w.skip() })
	case "response_format":
		return w.responseFormat()
	case "tools":
		tools, err := w.tools()
		c.tools = tools
		return err
	case "tool_choice":
		var err error
		c.choice, c.choiceName, err = w.toolChoice()
		return err
	case "route":
		return w.object(name, func(k string) error {
			if k != "provider" {
				return w.skip()
			}
			p, err := w.str("route.provider", maxProviderName)
			if err == nil && p == "" {
				return invalid("route.provider", `must name a provider, like {"provider": "openai"}; remove route to let the gateway choose`)
			}
			req.routeProvider = p
			return err
		})
	case "route_mode":
		s, err := w.str(name, maxNameLen)
		if err != nil || !ir.ValidMode(s) {
			return &fieldError{"invalid_route_mode", fmt.Sprintf("route_mode must be one of %s (balanced when omitted)", strings.Join(ir.Modes, ", "))}
		}
		req.routeMode = s
		return nil
	}
	return w.skip() // other fields pass on unchecked (see the catalog's parameter rule)
}

// finish checks what depends on several fields.
func (c *chatChecks) finish(req *chatRequest) error {
	switch {
	case !c.hasModel:
		return &fieldError{"missing_model", "model is required and must be a string: set it to a model id from GET /v1/models"}
	case !c.hasMessages:
		return &fieldError{"missing_messages", `messages is required: send an array like [{"role": "user", "content": "Hello"}]`}
	}
	switch {
	case c.choice == "required" && len(c.tools) == 0:
		return invalid("tool_choice", `is "required" but the request declares no tools; add tools or remove tool_choice`)
	case c.choice == "function" && !c.tools[c.choiceName]:
		return invalid("tool_choice.function.name", "names %q, which is not among the request's tools; name a declared function", core.Clip(c.choiceName))
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
