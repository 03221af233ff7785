package core

import (
	"net/http"

	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/xds/ir"
)

// This file owns what the router-level exchange tells Envoy about the request as a whole: the
// header limits, and the processing mode once the request is accepted.

// ChatMode is the router-level filter's processing mode for a chat request whose headers were
// accepted. Envoy is configured with response headers off (xds/translator ExtProc), so a reply
// Envoy makes before ext_proc saw the request (an HTTP/1 request its codec refused) reaches the
// client untouched instead of waiting on ext_proc while Envoy closes the connection; here they
// are turned on, so error answers are shaped and answers metered.
var ChatMode = WithResponseBody(extprocv3filter.ProcessingMode_NONE)

// WithResponseBody is chatMode with the response body sent as m. Every field is spelled out:
// with Envoy 1.40 and the configured response header mode SKIP, an override that left it at
// DEFAULT made Envoy refuse the content-length of a rewritten error body (500
// mismatch_between_content_length_and_the_length_of_the_mutated_body).
func WithResponseBody(m extprocv3filter.ProcessingMode_BodySendMode) *extprocv3filter.ProcessingMode {
	return &extprocv3filter.ProcessingMode{
		RequestHeaderMode:   extprocv3filter.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3filter.ProcessingMode_BUFFERED,
		RequestTrailerMode:  extprocv3filter.ProcessingMode_SKIP,
		ResponseHeaderMode:  extprocv3filter.ProcessingMode_SEND,
		ResponseBodyMode:    m,
		ResponseTrailerMode: extprocv3filter.ProcessingMode_SKIP,
	}
}

// HeadersTooLarge enforces the gateway's header limits, counted as Envoy counts them (names and
// values, pseudo-headers included). Envoy's codec limits sit above these, because its HTTP/2
// codec can only reset a stream over them, never answer.
func HeadersTooLarge(h *extprocv3.HttpHeaders) *APIError {
	hs := h.GetHeaders().GetHeaders()
	size := 0
	for _, hv := range hs {
		size += len(hv.Key) + len(HeaderValue(hv))
	}
	if size <= ir.MaxRequestHeaderBytes && len(hs) <= ir.MaxRequestHeaders {
		return nil
	}
	return Errorf(http.StatusRequestHeaderFieldsTooLarge, "headers_too_large",
		"request headers are %d bytes in %d headers; the gateway takes at most %d KiB in %d headers: send fewer or smaller headers",
		size, len(hs), ir.MaxRequestHeaderBytes>>10, ir.MaxRequestHeaders)
}
