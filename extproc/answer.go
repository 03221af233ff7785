package extproc

// The client's view of a successful answer: the model field names the catalog model that
// answered (not the provider's name for it), the usage chunk the gateway asked for on the
// client's behalf is removed, and, with billing, the answer is metered on its way through.

import (
	"bytes"
	"encoding/json"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollway/tollway/extproc/sse"
)

// answer rewrites one successful answer, whole or streamed.
type answer struct {
	model []byte // the catalog model id as a JSON string
	meter *meter // nil without billing
	// dropUsage removes the usage-only chunk: the gateway asks every streaming provider for
	// usage, and clients that did not ask must not get it, billing on or off.
	dropUsage bool
	frames    sse.Framer
	dec       *jsontext.Decoder // reused for every event of a stream
}

func newAnswer(modelID string, m *meter, dropUsage bool) *answer {
	q, _ := json.Marshal(modelID) // a string always encodes
	return &answer{model: q, meter: m, dropUsage: dropUsage}
}

// body rewrites a whole JSON answer; changed is false when it goes on as it came.
func (a *answer) body(b []byte) (out []byte, changed bool) {
	if a.meter != nil {
		a.meter.body(b)
	}
	return replaceModel(a.decoder(b), b, a.model)
}

// decoder returns the answer's decoder, reset to read b.
func (a *answer) decoder(b []byte) *jsontext.Decoder {
	if a.dec == nil {
		a.dec = jsontext.NewDecoder(bytes.NewBuffer(b), lenient)
	} else {
		a.dec.Reset(bytes.NewBuffer(b), lenient)
	}
	return a.dec
}

// chunk rewrites the next piece of an event stream. Whole events go out at once; an event
// whose end has not arrived yet is held until it has (or the stream ends), so no event reaches
// the client half rewritten and the stream is never buffered beyond one event.
func (a *answer) chunk(b []byte, end bool) (out []byte, changed bool) {
	held := a.frames.Pending()
	out = make([]byte, 0, len(b)+64)
	_ = a.frames.Feed(b, end, func(ev []byte) error {
		data := sse.Data(ev)
		if len(data) == 0 || data[0] != '{' {
			out = append(out, ev...) // [DONE], comments, keep-alives
			return nil
		}
		usageOnly := false
		if a.meter != nil {
			usageOnly = a.meter.event(data)
		} else if a.dropUsage {
			usageOnly = isUsageOnly(data)
		}
		if usageOnly && a.dropUsage {
			return nil // the gateway asked for it on the client's behalf
		}
		if d, ok := replaceModel(a.decoder(data), data, a.model); ok {
			out = append(out, sse.ReplaceData(ev, d)...)
			return nil
		}
		out = append(out, ev...)
		return nil
	})
	if !held && !a.frames.Pending() && bytes.Equal(out, b) {
		return b, false
	}
	return out, true
}

// replaceModel sets the top-level "model" string of a JSON object to model (a JSON string),
// copying the rest byte for byte; dec reads obj. It reports false, and returns obj, when there
// is nothing to change: no such field, or it already says model.
func replaceModel(dec *jsontext.Decoder, obj, model []byte) ([]byte, bool) {
	if !bytes.Contains(obj, []byte(`"model"`)) {
		return obj, false
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return obj, false
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return obj, false
		}
		if name.String() != "model" || dec.PeekKind() != '"' {
			if dec.SkipValue() != nil {
				return obj, false
			}
			continue
		}
		v, err := dec.ReadValue()
		if err != nil || bytes.Equal(v, model) {
			return obj, false
		}
		end := int(dec.InputOffset())
		start := end - len(v)
		out := make([]byte, 0, len(obj)-len(v)+len(model))
		return append(append(append(out, obj[:start]...), model...), obj[end:]...), true
	}
	return obj, false
}
