package core

// What the gateway accepts in a client's request headers: its request id, the body's media
// type and size, and which headers are the gateway's own and never taken from a client.

import (
	"crypto/rand"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/tollway/tollway/extproc/provider"
)

// MaxRequestIDBytes bounds a client's x-request-id: it becomes part of usage record ids and
// log lines, so it must be short and printable.
const MaxRequestIDBytes = 128

var (
	ErrTooLarge = Errorf(http.StatusRequestEntityTooLarge, "request_too_large",
		"request body exceeds the gateway limit of 32 MiB (33,554,432 bytes); send smaller images or use image URLs")
	errInvalidRequestID = Errorf(http.StatusBadRequest, "invalid_request_id",
		"x-request-id must be 1 to %d visible ASCII characters (no spaces or control characters); send a shorter id such as a UUID, or none and the gateway assigns one (this answer's x-request-id)",
		MaxRequestIDBytes)
)

// CheckRequestID accepts the request id Envoy passed on: the client's own or one Envoy made.
// An empty one means none was sent.
func CheckRequestID(id string) *APIError {
	if len(id) > MaxRequestIDBytes || !VisibleASCII(id) {
		return errInvalidRequestID
	}
	return nil
}

// VisibleASCII reports whether s is printable ASCII without spaces.
func VisibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// NewRequestID makes a request id the way Envoy does: a random (version 4) UUID.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// CheckContentType accepts a JSON chat body. A request without a content-type is read as JSON:
// the body is then parsed as JSON like any other and refused as invalid_json if it is not, so
// nothing is guessed, and clients that never set the header (some HTTP libraries, scripts)
// keep working.
func CheckContentType(ct string) *APIError {
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		return nil
	}
	return Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
		"content-type %s is not supported: send the body as JSON with content-type: application/json", Clip(ct))
}

// ClientInternalHeader reports whether a request header is one a client must not set: the
// gateway's own (x-tollway-*) and Envoy's control headers (x-envoy-*: retries, timeouts, the
// original path). x-envoy-internal and x-envoy-external-address stay: Envoy sets and sanitises
// them itself from the connection, before this filter runs, as the edge configuration says.
func ClientInternalHeader(k string) bool {
	switch {
	case strings.HasPrefix(k, "x-tollway-"):
		return true
	case k == "x-envoy-internal", k == "x-envoy-external-address":
		return false
	}
	return strings.HasPrefix(k, "x-envoy-")
}

// upstreamForwarded is every client header a provider may see; the attempt filter drops all
// others. An allow-list, because a provider acts on headers of its own: an OpenAI-Organization
// or OpenAI-Project a client made up turns the gateway's key into a 401 (marking the provider
// down for every tenant), anthropic-beta changes the API, cookies and the client's
// authorization are the client's, accept-encoding would let a provider compress the answer the
// gateway must read, and x-tollway-*/x-envoy-* describe the gateway. The adapter sets the
// provider's own credential and API headers after this.
var upstreamForwarded = map[string]bool{
	"content-type": true, "content-length": true, "accept": true, "user-agent": true,
	"x-request-id": true, "traceparent": true, "tracestate": true,
}

// UpstreamDropped reports whether a request header must not reach a provider.
func UpstreamDropped(k string) bool {
	return !strings.HasPrefix(k, ":") && !upstreamForwarded[k]
}

// maxShown bounds a client's value quoted in an error message.
const maxShown = 64

// Clip shortens a client's value for an error message, cutting at a character boundary.
func Clip(s string) string { return provider.Clip(s, maxShown) }
