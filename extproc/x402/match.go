package x402

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Match finds the offered option a client's `accepted` echoes. Nothing a client signs binds a
// credential to one endpoint or request, so the echo must equal one of this endpoint's current
// options field by field: scheme, network, amount, maxTimeoutSeconds exactly; asset and payTo as
// addresses (case-insensitively); extra as parsed JSON (member order and spacing do not matter,
// values and their types do). Members x402 does not define are ignored.
//
// It returns the index of the matching option, or -1 and a reason for PaymentRequired.error
// (the client signs again from the fresh offer), naming the first field that differs from the
// closest option, e.g. `accepted.amount "5000" does not match this endpoint's 10000`.
func Match(accepted Requirements, offered []Requirements) (int, string) {
	best, bestDiff := -1, ""
	bestCount := 0
	for i, o := range offered {
		if accepted.Scheme != o.Scheme {
			continue
		}
		diffs := differences(accepted, o)
		if len(diffs) == 0 {
			return i, ""
		}
		if best < 0 || len(diffs) < bestCount {
			best, bestDiff, bestCount = i, diffs[0], len(diffs)
		}
	}
	if best >= 0 {
		return -1, bestDiff
	}
	var schemes []string
	for _, o := range offered {
		if !contains(schemes, o.Scheme) {
			schemes = append(schemes, o.Scheme)
		}
	}
	if len(schemes) == 0 {
		return -1, "this endpoint offers no payment option"
	}
	return -1, fmt.Sprintf("accepted.scheme %s is not offered by this endpoint (offered: %s): pay with one of the options in PAYMENT-REQUIRED",
		quote(accepted.Scheme), strings.Join(schemes, ", "))
}

// differences lists how a differs from the offered o, in field order.
func differences(a, o Requirements) []string {
	var out []string
	differ := func(field, got, want string) {
		out = append(out, fmt.Sprintf("accepted.%s %s does not match this endpoint's %s: sign again from this PAYMENT-REQUIRED", field, quote(got), want))
	}
	if a.Network != o.Network {
		differ("network", a.Network, o.Network)
	}
	if a.Amount != o.Amount {
		differ("amount", a.Amount, o.Amount)
	}
	if !sameAddress(a.Asset, o.Asset) {
		differ("asset", a.Asset, o.Asset)
	}
	if !sameAddress(a.PayTo, o.PayTo) {
		differ("payTo", a.PayTo, o.PayTo)
	}
	if a.MaxTimeoutSeconds != o.MaxTimeoutSeconds {
		differ("maxTimeoutSeconds", fmt.Sprint(a.MaxTimeoutSeconds), fmt.Sprint(o.MaxTimeoutSeconds))
	}
	if !sameJSON(a.Extra, o.Extra) {
		out = append(out, "accepted.extra does not match this endpoint's extra (it must be echoed as offered): sign again from this PAYMENT-REQUIRED")
	}
	return out
}

// sameAddress compares two 0x addresses case-insensitively; anything that is not an address
// only equals itself.
func sameAddress(a, b string) bool {
	if isHexAddress(a) && isHexAddress(b) {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// sameJSON compares two JSON values as parsed values (numbers by their literal text, objects
// regardless of member order). Absent and null are the same.
func sameJSON(a, b jsontext.Value) bool {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if isNull(a) || isNull(b) {
		return isNull(a) && isNull(b)
	}
	va, errA := parseJSON(a)
	vb, errB := parseJSON(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

func isNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

// number is a JSON number's literal text: 1 and 1.0 differ, and no precision is lost.
type number string

// parseJSON reads v into maps, slices, strings, bools, nil and numbers as their literal text.
func parseJSON(v []byte) (any, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(v))
	out, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return out, nil
}

func parseValue(dec *jsontext.Decoder) (any, error) {
	t, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch t.Kind() {
	case '{':
		m := map[string]any{}
		for dec.PeekKind() != '}' {
			k, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			if m[k.String()], err = parseValue(dec); err != nil {
				return nil, err
			}
		}
		_, err := dec.ReadToken()
		return m, err
	case '[':
		l := []any{}
		for dec.PeekKind() != ']' {
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := dec.ReadToken()
		return l, err
	case '"':
		return t.String(), nil
	case '0':
		return number(t.String()), nil
	case 't', 'f':
		return t.Bool(), nil
	}
	return nil, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
