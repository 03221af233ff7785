package x402

// The x402 v2 wire types and the three header codecs. Header values are standard base64 (with
// padding) of UTF-8 JSON. JSON is read with encoding/json/v2 semantics (go-json-experiment):
// member names match case-sensitively, a duplicated member or invalid UTF-8 is an error, so the
// gateway and the facilitator (a JavaScript JSON.parse, which keeps the last duplicate) can never
// read one credential two ways.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Version is the x402 protocol version this package speaks (v1 clients send X-PAYMENT and are
// not compatible).
const Version = 2

// Header names.
const (
	HeaderPaymentRequired  = "PAYMENT-REQUIRED"
	HeaderPaymentSignature = "PAYMENT-SIGNATURE"
	HeaderPaymentResponse  = "PAYMENT-RESPONSE"
)

// MaxPaymentSignature bounds a PAYMENT-SIGNATURE value in bytes. A reference client's exact or
// upto credential is under 1.5 KiB of base64; gas-sponsoring extensions add a signed permit or
// transaction, still far below this.
const MaxPaymentSignature = 16 << 10

// Resource describes the paid URL in a PaymentRequired.
type Resource struct {
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
}

// Requirements is one payment option (x402 PaymentRequirements). Amount is in the asset's atomic
// units as a decimal string; for upto it is the cap. Extra is kept as the JSON it was written as.
type Requirements struct {
	Scheme            string         `json:"scheme"`
	Network           string         `json:"network"`
	Amount            string         `json:"amount"`
	Asset             string         `json:"asset"`
	PayTo             string         `json:"payTo"`
	MaxTimeoutSeconds int64          `json:"maxTimeoutSeconds"`
	Extra             jsontext.Value `json:"extra,omitzero"`
}

// PaymentRequired is the PAYMENT-REQUIRED header's value (and what a 402 tells the client).
type PaymentRequired struct {
	X402Version int            `json:"x402Version"`
	Error       string         `json:"error,omitempty"`
	Resource    Resource       `json:"resource"`
	Accepts     []Requirements `json:"accepts"`
	Extensions  jsontext.Value `json:"extensions,omitzero"`
}

// PaymentPayload is a decoded PAYMENT-SIGNATURE. Payload is the scheme's signed authorization,
// read by Verify. Raw is the whole JSON object exactly as the client sent it: the facilitator
// gets those bytes, so members this package does not model (extensions the client filled in)
// reach it unchanged.
type PaymentPayload struct {
	X402Version int            `json:"x402Version"`
	Resource    *Resource      `json:"resource,omitzero"`
	Accepted    Requirements   `json:"accepted"`
	Payload     jsontext.Value `json:"payload"`
	Extensions  jsontext.Value `json:"extensions,omitzero"`

	Raw jsontext.Value `json:"-"`
}

// SettlementResponse is the PAYMENT-RESPONSE header's value and the facilitator's /settle answer.
// Amount is the settled amount in atomic units (required for upto).
type SettlementResponse struct {
	Success     bool   `json:"success"`
	ErrorReason string `json:"errorReason,omitempty"`
	// ErrorMessage is for people (the reference clients' schemas have it). A facilitator's own
	// is never passed on (viem's are pages long); the gateway writes one for a pending outcome.
	ErrorMessage string `json:"errorMessage,omitempty"`
	Payer        string `json:"payer,omitempty"`
	Transaction  string `json:"transaction"`
	Network      string `json:"network"`
	Amount       string `json:"amount,omitempty"`
}

func malformed(format string, args ...any) *Error {
	return refuse(ErrMalformed, "invalid_payment_signature", "PAYMENT-SIGNATURE "+format, args...)
}

// DecodePaymentSignature reads a PAYMENT-SIGNATURE value: at most MaxPaymentSignature bytes of
// standard padded base64, a JSON object with x402Version 2 and the objects accepted and payload.
// It checks the envelope only; Match and Verify judge the contents. Every failure is an *Error
// of kind ErrMalformed whose message says what is wrong and how to fix it.
func DecodePaymentSignature(header string) (*PaymentPayload, error) {
	h := strings.Trim(header, " \t")
	switch {
	case h == "":
		return nil, malformed("is empty: send the base64 of the x402 v2 PaymentPayload JSON your x402 client built from PAYMENT-REQUIRED")
	case len(h) > MaxPaymentSignature:
		return nil, malformed("is %d bytes, over the %d this server reads: send only the PaymentPayload, in standard base64", len(h), MaxPaymentSignature)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(h)
	if err != nil {
		hint := "standard base64 with padding (A-Z a-z 0-9 + /, = at the end)"
		if strings.ContainsAny(h, "-_") {
			hint += ", not URL-safe base64"
		}
		return nil, malformed("is not base64: encode the PaymentPayload JSON as %s", hint)
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, malformed("is not a JSON object%s: send base64 of the UTF-8 PaymentPayload object {x402Version, accepted, payload}", jsonProblem(err))
	}
	p := &PaymentPayload{Raw: jsontext.Value(raw)}
	v, ok := members["x402Version"]
	if !ok {
		return nil, malformed("has no x402Version: this server speaks x402 v2; use a v2 client")
	}
	if json.Unmarshal(v, &p.X402Version) != nil || p.X402Version != Version {
		return nil, malformed("has x402Version %s: this server speaks only x402 v2 (PAYMENT-SIGNATURE, not X-PAYMENT); use a v2 client", quote(string(v)))
	}
	for _, name := range []string{"accepted", "payload"} {
		if v, ok := members[name]; !ok || v.Kind() != '{' {
			return nil, malformed("has no %s object: send the PaymentPayload your x402 v2 client built (accepted is the chosen option from PAYMENT-REQUIRED, payload its signed authorization)", name)
		}
	}
	if err := strictInto(members["accepted"], &p.Accepted, "accepted"); err != nil {
		return nil, err
	}
	p.Payload = members["payload"]
	if v, ok := members["resource"]; ok && v.Kind() != 'n' {
		p.Resource = new(Resource)
		if err := strictInto(v, p.Resource, "resource"); err != nil {
			return nil, err
		}
	}
	if v, ok := members["extensions"]; ok && v.Kind() != 'n' {
		if v.Kind() != '{' {
			return nil, malformed("extensions must be an object (or absent)")
		}
		p.Extensions = v
	}
	return p, nil
}

// strictInto decodes v into out, naming the member at fault when it cannot.
func strictInto(v jsontext.Value, out any, path string) error {
	err := json.Unmarshal(v, out)
	if err == nil {
		return nil
	}
	var se *json.SemanticError
	if errors.As(err, &se) && se.JSONPointer != "" {
		path += strings.ReplaceAll(string(se.JSONPointer), "/", ".")
	}
	want := "the type x402 v2 defines"
	if se != nil && se.GoType != nil {
		switch se.GoType.Kind().String() {
		case "string":
			want = "a JSON string"
		case "int64", "int":
			want = "a whole JSON number"
		case "struct":
			want = "a JSON object"
		}
	}
	code := "invalid_payment_signature"
	if strings.HasPrefix(path, "payload") {
		code = "invalid_payment_payload"
	}
	return refuse(ErrMalformed, code, "PAYMENT-SIGNATURE has a bad %s: it must be %s%s", path, want, jsonProblem(err))
}

// jsonProblem says briefly why JSON could not be read (never echoing it).
func jsonProblem(err error) string {
	var se *jsontext.SyntacticError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName):
		return " (a member name appears twice)"
	case errors.As(err, &se) && strings.Contains(se.Err.Error(), "UTF-8"):
		return " (invalid UTF-8)"
	case errors.As(err, &se):
		return fmt.Sprintf(" (JSON syntax error at byte %d)", se.ByteOffset)
	}
	return ""
}

// EncodePaymentSignature is the PAYMENT-SIGNATURE value for p (what a client sends; the gateway
// uses it in tests). It encodes the modelled fields, not Raw.
func EncodePaymentSignature(p *PaymentPayload) (string, error) {
	q := *p
	q.X402Version = Version
	return encode(q)
}

// EncodePaymentRequired is the PAYMENT-REQUIRED value for pr (x402Version is set to 2). A
// resource without a URL or an empty accepts list is refused: clients reject both.
func EncodePaymentRequired(pr PaymentRequired) (string, error) {
	pr.X402Version = Version
	if pr.Resource.URL == "" || len(pr.Accepts) == 0 {
		return "", errors.New("x402: a PaymentRequired needs resource.url and at least one accepted option")
	}
	return encode(pr)
}

// EncodeSettlementResponse is the PAYMENT-RESPONSE value for s.
func EncodeSettlementResponse(s SettlementResponse) (string, error) { return encode(s) }

func encode(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("x402: encode %T: %w", v, err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// DecodePaymentRequired reads a PAYMENT-REQUIRED value (tests and tools; the gateway only writes
// them).
func DecodePaymentRequired(header string) (*PaymentRequired, error) {
	var pr PaymentRequired
	if err := decodeHeader(header, &pr); err != nil {
		return nil, fmt.Errorf("x402: PAYMENT-REQUIRED: %w", err)
	}
	return &pr, nil
}

// DecodeSettlementResponse reads a PAYMENT-RESPONSE value (tests and tools).
func DecodeSettlementResponse(header string) (*SettlementResponse, error) {
	var s SettlementResponse
	if err := decodeHeader(header, &s); err != nil {
		return nil, fmt.Errorf("x402: PAYMENT-RESPONSE: %w", err)
	}
	return &s, nil
}

func decodeHeader(h string, out any) error {
	raw, err := base64.StdEncoding.Strict().DecodeString(strings.TrimSpace(h))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}
