package provider

// What the media task adapters share: reading an image the client sends as a first frame,
// without trusting its declared type, and small field readers.

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg" // decoders registered for DecodeConfig: the formats the families take
	_ "image/png"
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

// checkFrame validates field's image: an https URL (its bytes are the provider's to fetch, so
// only the scheme is checked) or a base64 data URL whose header is decoded: the real format,
// size and aspect ratio, whatever the declared MIME type says.
func checkFrame(field, v string, r frameRules) error {
	if strings.HasPrefix(v, "https://") {
		if len(v) > 4096 {
			return fmt.Errorf("%w: %s URL is over 4096 bytes", ErrBadRequest, field)
		}
		return nil
	}
	_, data, ok := parseDataURL(v)
	if !ok {
		return fmt.Errorf("%w: %s must be an https URL or a base64 data URL (data:image/png;base64,...), not %q", ErrBadRequest, field, clipText(v))
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
	raw := rawField(req, key)
	if raw == nil {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", true, fmt.Errorf("%w: %s must be a string", ErrBadRequest, key)
	}
	return s, true, nil
}

func intOf(req Request, key string) (int64, bool, error) {
	raw := rawField(req, key)
	if raw == nil {
		return 0, false, nil
	}
	var n int64
	if json.Unmarshal(raw, &n) != nil {
		return 0, true, fmt.Errorf("%w: %s must be an integer, not %s", ErrBadRequest, key, clipText(string(raw)))
	}
	return n, true, nil
}

func clipText(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
