package chat

// Validation of the structured fields of a chat request: messages and their content parts,
// tool calls, tools, tool_choice, stop and response_format.

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/core"
)

// messageName is OpenAI's rule for a message's name: no whitespace and none of <|\/>.
var messageName = regexp.MustCompile(`^[^\s<|\\/>]{1,64}$`)

// partTypes are the content part types each role may send.
var partTypes = openai.RolePartTypes

// message is what is checked once a message's members have all been read (they come in any
// order).
type message struct {
	role        string
	content     string // "", "null", "string" or "parts"
	parts       []string
	toolCalls   bool
	toolCallID  bool
	functionRaw bool // the legacy function_call
}

func (w *walker) messages() error {
	count := 0
	err := w.array("messages", func(i int) error {
		count++
		return w.message(fmt.Sprintf("messages[%d]", i))
	})
	if err == nil && count == 0 {
		return &fieldError{"missing_messages", "messages is empty: send at least one message"}
	}
	return err
}

func (w *walker) message(path string) error {
	var m message
	err := w.object(path, func(name string) error {
		at := path + "." + name
		switch name {
		case "role":
			s, err := w.str(at, 0)
			if err != nil || partTypes[s] == nil {
				return invalid(at, "must be one of system, developer, user, assistant, tool")
			}
			m.role = s
			w.bound.Message(len(s))
			return nil
		case "content":
			if w.null() {
				m.content = "null"
				return nil
			}
			if w.dec.PeekKind() == '"' {
				m.content = "string"
				n, err := w.present(at)
				w.bound.Text(n)
				return err
			}
			if w.dec.PeekKind() != '[' {
				return w.mismatch(at, "a string or an array of content parts")
			}
			m.content = "parts"
			return w.array(at, func(j int) error {
				t, err := w.part(fmt.Sprintf("%s[%d]", at, j))
				m.parts = append(m.parts, t)
				return err
			})
		case "name":
			s, err := w.str(at, 0)
			if err == nil && !messageName.MatchString(s) {
				return invalid(at, "must be 1 to 64 characters without spaces or any of <|\\/> (got %q)", core.Clip(s))
			}
			w.bound.Name(len(s))
			return err
		case "tool_calls":
			if w.null() {
				return nil
			}
			m.toolCalls = true
			return w.array(at, func(j int) error { return w.toolCall(fmt.Sprintf("%s[%d]", at, j)) })
		case "tool_call_id":
			s, err := w.str(at, maxToolCallID)
			if err == nil && (s == "" || !core.VisibleASCII(s)) {
				return invalid(at, "must be the id of the tool call it answers (1 to %d visible ASCII characters)", maxToolCallID)
			}
			m.toolCallID = err == nil
			return err
		case "function_call": // the legacy form of tool_calls
			if w.null() {
				return nil
			}
			m.functionRaw = true
			return w.object(at, func(k string) error {
				switch k {
				case "name":
					s, err := w.functionNameAt(at + ".name")
					w.bound.Text(len(s))
					return err
				case "arguments":
					n, err := w.present(at + ".arguments")
					w.bound.Text(n)
					return err
				}
				return w.skip()
			})
		case "refusal":
			if w.null() {
				return nil
			}
			_, err := w.str(at, 0)
			return err
		}
		return w.skip()
	})
	if err != nil {
		return err
	}
	return m.check(path)
}

// check applies the rules that depend on the role.
func (m *message) check(path string) error {
	if m.role == "" {
		return invalid(path+".role", "is required: one of system, developer, user, assistant, tool")
	}
	switch {
	case m.toolCalls && m.role != "assistant":
		return invalid(path+".tool_calls", "is only allowed on assistant messages")
	case m.role == "tool" && !m.toolCallID:
		return invalid(path+".tool_call_id", "is required on tool messages: the id of the tool call this message answers")
	case m.content == "" || m.content == "null":
		if m.role != "assistant" || !(m.toolCalls || m.functionRaw) {
			return invalid(path+".content", "is required on %s messages: a string or an array of content parts (null only on an assistant message with tool_calls)", m.role)
		}
	}
	allowed := partTypes[m.role]
	for j, t := range m.parts {
		if !slices.Contains(allowed, t) {
			hint := ""
			if m.role == "assistant" && t == "image_url" {
				hint = " (to edit an image a model made, send it back in a user message)"
			}
			return invalid(fmt.Sprintf("%s.content[%d].type", path, j), "%q is not allowed in %s messages; use %s%s", t, m.role, quoteList(allowed), hint)
		}
	}
	return nil
}

// part reads one content part and returns its type.
func (w *walker) part(path string) (string, error) {
	var typ string
	has := map[string]bool{}
	err := w.object(path, func(name string) error {
		at := path + "." + name
		switch name {
		case "type":
			s, err := w.oneOf(at, openai.PartTypes...)
			typ = s
			return err
		case "text", "refusal":
			n, err := w.present(at)
			w.bound.Text(n)
			has[name] = err == nil
			return err
		case "image_url":
			has[name] = true
			return w.object(at, func(k string) error {
				switch k {
				case "url":
					n, err := w.present(at + ".url")
					if err == nil && n == 0 {
						return invalid(at+".url", "must be an http(s) URL or a data: URL, not empty")
					}
					has["url"] = n > 0
					return err
				case "detail":
					_, err := w.oneOf(at+".detail", openai.ImageDetails...)
					return err
				}
				return w.skip()
			})
		case "input_audio":
			has[name] = true
			return w.object(at, func(k string) error {
				switch k {
				case "data":
					n, err := w.present(at + ".data")
					has["data"] = n > 0
					w.bound.Text(n) // a bound: every token spans a byte of the base64
					return err
				case "format":
					_, err := w.str(at+".format", maxNameLen)
					return err
				}
				return w.skip()
			})
		case "file":
			has[name] = true
			return w.object(at, func(k string) error {
				switch k {
				case "file_data", "file_id", "filename":
					n, err := w.present(at + "." + k)
					has["file"] = has["file"] || (n > 0 && k != "filename")
					if k == "file_data" {
						w.bound.Text(n)
					}
					return err
				}
				return w.skip()
			})
		}
		return w.skip()
	})
	switch {
	case err != nil:
		return typ, err
	case typ == "":
		return "", invalid(path+".type", `is required: "text", "image_url", "input_audio", "file" or "refusal"`)
	case typ == "text" && !has["text"]:
		return typ, invalid(path+".text", "is required on a text part and must be a string")
	case typ == "refusal" && !has["refusal"]:
		return typ, invalid(path+".refusal", "is required on a refusal part and must be a string")
	case typ == "image_url" && !has["url"]:
		return typ, invalid(path+".image_url.url", `is required: {"type": "image_url", "image_url": {"url": "https://... or data:image/png;base64,..."}}`)
	case typ == "input_audio" && !has["data"]:
		return typ, invalid(path+".input_audio.data", "is required: the base64 audio")
	case typ == "file" && !has["file"]:
		return typ, invalid(path+".file", "needs file_data (a data: URL) or file_id")
	case typ == "image_url":
		w.bound.Image()
	}
	return typ, nil
}

// toolCall reads one call of an assistant message.
func (w *walker) toolCall(path string) error {
	var id, fn, args bool
	err := w.object(path, func(name string) error {
		at := path + "." + name
		switch name {
		case "id":
			s, err := w.str(at, maxToolCallID)
			if err == nil && (s == "" || !core.VisibleASCII(s)) {
				return invalid(at, "must be 1 to %d visible ASCII characters", maxToolCallID)
			}
			id = err == nil
			return err
		case "type":
			_, err := w.oneOf(at, "function")
			return err
		case "function":
			return w.object(at, func(k string) error {
				switch k {
				case "name":
					s, err := w.functionNameAt(at + ".name")
					w.bound.Text(len(s))
					fn = err == nil
					return err
				case "arguments":
					n, err := w.present(at + ".arguments")
					w.bound.Text(n)
					args = err == nil
					if err != nil {
						return invalid(at+".arguments", "must be a string of JSON-encoded arguments, like \"{\\\"city\\\": \\\"Paris\\\"}\"")
					}
					return nil
				}
				return w.skip()
			})
		}
		return w.skip()
	})
	switch {
	case err != nil:
		return err
	case !id:
		return invalid(path+".id", "is required: the call's id, which the tool message answering it repeats")
	case !fn:
		return invalid(path+".function.name", "is required")
	case !args:
		return invalid(path+".function.arguments", "is required: a string of JSON-encoded arguments (\"{}\" for none)")
	}
	return nil
}

// tools reads the declared tools and returns their function names.
func (w *walker) tools() (map[string]bool, error) {
	names := map[string]bool{}
	err := w.array("tools", func(i int) error {
		path := fmt.Sprintf("tools[%d]", i)
		if i >= maxTools {
			return invalid("tools", "has more than %d tools; send at most %d", maxTools, maxTools)
		}
		var typ, name string
		size, err := w.span(func() error {
			return w.object(path, func(k string) error {
				switch k {
				case "type":
					s, err := w.oneOf(path+".type", "function")
					typ = s
					return err
				case "function":
					return w.object(path+".function", func(f string) error {
						at := path + ".function." + f
						switch f {
						case "name":
							s, err := w.functionNameAt(at)
							name = s
							return err
						case "description":
							_, err := w.str(at, 0)
							return err
						case "parameters":
							if w.dec.PeekKind() != '{' {
								return w.mismatch(at, "a JSON Schema object")
							}
							return w.skip()
						case "strict":
							if w.null() {
								return nil
							}
							_, err := w.boolean(at)
							return err
						}
						return w.skip()
					})
				}
				return w.skip()
			})
		})
		w.bound.Text(size)
		switch {
		case err != nil:
			return err
		case typ == "":
			return invalid(path+".type", `is required: "function"`)
		case name == "":
			return invalid(path+".function.name", `is required: {"type": "function", "function": {"name": "get_weather", "parameters": {...}}}`)
		}
		names[name] = true
		return nil
	})
	return names, err
}

// toolChoice reads tool_choice: "auto", "none", "required", or a function to call.
func (w *walker) toolChoice() (mode, name string, err error) {
	const want = `"auto", "none", "required" or {"type": "function", "function": {"name": "..."}}`
	switch w.dec.PeekKind() {
	case '"':
		mode, err = w.oneOf("tool_choice", openai.ToolChoiceModes...)
		if _, ok := err.(*fieldError); ok {
			err = invalid("tool_choice", "must be %s", want)
		}
		return mode, "", err
	case '{':
		var typ string
		err = w.object("tool_choice", func(k string) error {
			switch k {
			case "type":
				s, err := w.oneOf("tool_choice.type", "function")
				typ = s
				return err
			case "function":
				return w.object("tool_choice.function", func(f string) error {
					if f != "name" {
						return w.skip()
					}
					s, err := w.functionNameAt("tool_choice.function.name")
					name = s
					return err
				})
			}
			return w.skip()
		})
		if err == nil && (typ == "" || name == "") {
			err = invalid("tool_choice", "must be %s", want)
		}
		return "function", name, err
	}
	return "", "", w.mismatch("tool_choice", want)
}

// stop reads stop: a string or an array of strings.
func (w *walker) stop() error {
	if w.dec.PeekKind() == '"' {
		return w.skip()
	}
	if w.dec.PeekKind() != '[' {
		return w.mismatch("stop", "a string or an array of strings")
	}
	return w.array("stop", func(i int) error {
		if i >= maxStop {
			return invalid("stop", "has more than %d sequences; send at most %d", maxStop, maxStop)
		}
		_, err := w.str(fmt.Sprintf("stop[%d]", i), 0)
		return err
	})
}

// responseFormat reads response_format: {"type": "text" | "json_object" | "json_schema", ...}.
func (w *walker) responseFormat() error {
	var typ string
	schema := false
	err := w.object("response_format", func(k string) error {
		switch k {
		case "type":
			s, err := w.oneOf("response_format.type", openai.ResponseFormatTypes...)
			typ = s
			return err
		case "json_schema":
			schema = true
			if w.dec.PeekKind() != '{' {
				return w.mismatch("response_format.json_schema", `an object like {"name": "answer", "schema": {...}}`)
			}
			return w.skip()
		}
		return w.skip()
	})
	switch {
	case err != nil:
		return err
	case typ == "":
		return invalid("response_format.type", `is required: "text", "json_object" or "json_schema"`)
	case typ == "json_schema" && !schema:
		return invalid("response_format.json_schema", `is required with type "json_schema": {"name": "answer", "schema": {...}}`)
	}
	return nil
}
