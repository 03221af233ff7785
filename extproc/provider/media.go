package provider

// What the media task adapters share: reading an image the client sends as a first frame,
// without trusting its declared type, and small field readers whose refusals name the field,
// the JSON type it must be, the type it is and the value received (never a Go type).

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg" // decoders registered for DecodeConfig: the formats the families take
	_ "image/png"
	"net/url"
	"slices"
	"strings"

	_ "golang.org/x/image/webp" // WebP headers: the spec's V1 takes WebP first frames
)

// frameRules are a family's limits on a first-frame image (spec 8).
type frameRules struct {
	maxBytes    int      // decoded size limit
	minShort    int      // the short side must be above this, in pixels
	minAspect   [2]int   // width:height at least this ...
	maxAspect   [2]int   // ... and at most this
	formats     []string // image.DecodeConfig format names
	formatNames string   // as the error names them
}

// checkFrame validates field's image: a public URL (imageURL) or a base64 data URL whose header
// is decoded: the real format, size and aspect ratio, whatever the declared MIME type says.
func checkFrame(field, v string, r frameRules) error {
	data, isURL, err := imageData(field, v)
	if err != nil || isURL {
		return err
	}
	if base64.StdEncoding.DecodedLen(len(data)) > r.maxBytes+3 {
		return fmt.Errorf("%w: %s is over %d MB decoded", ErrBadRequest, field, r.maxBytes>>20)
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return fmt.Errorf("%w: %s is not valid base64", ErrBadRequest, field)
	}
	if len(raw) >= r.maxBytes {
		return fmt.Errorf("%w: %s is %d bytes decoded; it must be below %d MB", ErrBadRequest, field, len(raw), r.maxBytes>>20)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || !slices.Contains(r.formats, format) {
		return fmt.Errorf("%w: %s is not a %s image (its bytes say %q)", ErrBadRequest, field, r.formatNames, cmp.Or(format, "unknown"))
	}
	w, h := cfg.Width, cfg.Height
	if min(w, h) <= r.minShort {
		return fmt.Errorf("%w: %s is %dx%d; its short side must be above %d px", ErrBadRequest, field, w, h, r.minShort)
	}
	// w/h within [a/b, c/d], in integers: w*b >= a*h and w*d <= c*h.
	if w*r.minAspect[1] < r.minAspect[0]*h || w*r.maxAspect[1] > r.maxAspect[0]*h {
		return fmt.Errorf("%w: %s is %dx%d; its aspect ratio must be between %d:%d and %d:%d", ErrBadRequest, field, w, h,
			r.minAspect[0], r.minAspect[1], r.maxAspect[0], r.maxAspect[1])
	}
	return nil
}

// maxImageURL bounds an image URL a client sends.
const maxImageURL = 4096

// imageData reads field's image, an image URL or a base64 data URL: the data URL's base64, or
// isURL. A URL is the provider's to fetch, not the gateway's, so http and https are
// taken alike and only its form is checked: the scheme, a host, at most 4096 bytes.
func imageData(field, v string) (data string, isURL bool, err error) {
	if scheme, _, ok := strings.Cut(v, ":"); ok && !strings.EqualFold(scheme, "data") {
		u, err := url.Parse(v)
		switch {
		case err != nil || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) || u.Host == "":
			return "", false, fmt.Errorf("%w: %s must be an http or https URL with a host, or a base64 data URL (data:image/png;base64,...), not %q", ErrBadRequest, field, clipText(v))
		case len(v) > maxImageURL:
			return "", false, fmt.Errorf("%w: %s URL is over %d bytes", ErrBadRequest, field, maxImageURL)
		}
		return "", true, nil
	}
	_, data, ok := parseDataURL(v)
	if !ok {
		return "", false, fmt.Errorf("%w: %s must be an http or https URL, or a base64 data URL (data:image/png;base64,...), not %q", ErrBadRequest, field, clipText(v))
	}
	return data, false, nil
}

// onlyFields refuses fields outside known (plus the gateway's own), listing what the family
// takes: a misspelt field must not be silently dropped.
func onlyFields(family string, req Request, known []string) error {
	for k := range req {
		if !slices.Contains(known, k) && !slices.Contains(taskGatewayFields, k) {
			return fmt.Errorf("%w: %s does not take field %q; its fields are %s", ErrBadRequest, family, clipText(k), strings.Join(known, ", "))
		}
	}
	return nil
}

// taskGatewayFields are the gateway's own fields of a task request: never sent to a provider.
var taskGatewayFields = []string{"model", "route", "route_mode", "callback_url"}

func stringOf(req Request, key string) (string, bool, error) {
	return readString(key, rawField(req, key))
}

func intOf(req Request, key string) (int64, bool, error) { return readInt(key, rawField(req, key)) }

// readString reads the string at field; ok is false when raw is absent or null.
func readString(field string, raw json.RawMessage) (s string, ok bool, err error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", true, wrongType(field, "a string", raw)
	}
	return s, true, nil
}

// readInt reads the integer at field; ok is false when raw is absent or null.
func readInt(field string, raw json.RawMessage) (n int64, ok bool, err error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	if json.Unmarshal(raw, &n) != nil {
		return 0, true, wrongType(field, "an integer", raw)
	}
	return n, true, nil
}

// readBool reads the boolean at field; ok is false when raw is absent or null.
func readBool(field string, raw json.RawMessage) (b, ok bool, err error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || string(raw) == "null" {
		return false, false, nil
	}
	if json.Unmarshal(raw, &b) != nil {
		return false, true, wrongType(field, "true or false", raw)
	}
	return b, true, nil
}

// wrongType refuses the value raw at field: what it must be, what it is, and the value.
func wrongType(field, want string, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	return fmt.Errorf("%w: %s must be %s, not %s (got %s)", ErrBadRequest, field, want, typeOf(raw), clipText(string(raw)))
}

// typeOf names the JSON type of a value, as a client wrote it.
func typeOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func clipText(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
