package translator

// The stream meter: the per-chunk half of the fast lane. For an OpenAI-shaped stream, ext_proc
// answers the answer's headers and leaves the stream; this Lua filter, in Envoy's worker, does
// what extproc/chat/answer.go did for each chunk (the catalog model id, the usage chunk the
// gateway asked for dropped, mid-stream errors and cut streams made the spec's error events)
// and meters the stream into dynamic metadata, which the access log carries to settlement.
// Reading a chunk in ext_proc cost Envoy and Tollway 30-40 us of CPU; in Lua it adds about
// 5.7 us to Envoy alone's 16.6 us (BenchmarkStreamMeter, a shared 2-core host: 1.29x), of which
// about 3 are Envoy copying the chunk into Lua and back, which any rewrite in Lua costs. An
// answer not in the fast lane costs one metadata lookup and nothing per chunk.

// Where the script reads less than answer.go, which parses what it reads (TestStreamMeter pins
// the rest byte for byte):
//   - the model member is the first top-level "model" string spelled so (Go also matches an
//     escaped name), rewritten without checking that the JSON before it is valid;
//   - usage is read from the usage object alone (Go drops it when any other member of the event
//     fails to decode); counts must be integers an int64 holds, as in Go;
//   - text_bytes counts every string member named content, and name and arguments when the
//     event has tool_calls, wherever they are (Go: those of choices' deltas and messages); a
//     stray invalid UTF-8 byte counts as one byte (Go decodes it as U+FFFD, three);
//   - error members' names are folded ASCII-only, the status lower-cased ASCII-only;
//   - an event mixing lone-CR line ends with LF ones is one line (Go's framer splits it).
//
// Beyond answer.go: a fast-lane answer that is not a 2xx text/event-stream passes untouched;
// the provider's content-length is removed; an event still incomplete past 1 MiB passes
// untouched (oversized); a script failure passes what it held and the rest untouched (failed);
// and an answer whose body ends with trailers cannot get its held tail or the cut-stream error
// event (Lua adds no body after trailers; the filter logs it, the metadata says error).

import (
	_ "embed"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"github.com/tollway/tollway/xds/ir"
)

// StreamMeterFilterName names the filter in the HTTP connection manager. It must come before
// the ext_proc filter in the filter list: an answer passes the filters in reverse order, and the
// meter reads its input when the answer's headers reach it, after ext_proc answered them.
const StreamMeterFilterName = "tollway.filters.http.stream_meter"

// The dynamic metadata namespaces of the contract between ext_proc and the filter.
const (
	// StreamMeterLaneNamespace is the filter's input, set by ext_proc on the answer's headers:
	// fast (bool; only then is the body read), model (the catalog id the model member becomes),
	// drop_usage (bool; the usage-only chunk is metered, then removed), request_id (for error
	// events).
	StreamMeterLaneNamespace = ir.LaneMetadata
	// StreamMeterNamespace is the filter's output, kept current chunk by chunk so that a stream
	// the client cut still leaves its counts: text_bytes (number, from the first chunk on: the
	// UTF-8 bytes of content, tool-call names and arguments passed, as decoded); prompt_tokens,
	// completion_tokens, cached_tokens, image_tokens (numbers, once the provider's usage was
	// seen); usage, finished, done, error, ended (the body reached its end through the filter),
	// oversized (an event still incomplete past 1 MiB went through unread), failed (the script
	// failed; the rest went through unread) (bools, present once true).
	StreamMeterNamespace = ir.MeterMetadata
)

// StreamMeterLagBytes bounds how far text_bytes may lag behind the stream (the script's
// LAG_BYTES): it is published once that many bytes of text went unpublished, and whenever
// anything else is. A stream cut by its client may have passed up to StreamMeterLagBytes-1
// bytes more than the access log says. Publishing at every chunk instead cost 2.7 us more
// per chunk (8.4 over Envoy alone instead of 5.7, BenchmarkStreamMeter): each publication is
// two wrappers and a protobuf merge, as much as the rest of a chunk's work, and every 64
// bytes (about 16 tokens of English) is once in 10-16 chunks.
const StreamMeterLagBytes = ir.MeterLagBytes

// streamMeterScript is the filter's code. A 2xx text/event-stream answer whose lane says fast
// is read; any other answer costs one metadata lookup and is not iterated.
//
//go:embed streammeter.lua
var streamMeterScript string

// streamMeterStatPrefix names the filter's counters: http.<hcm>.lua.stream_meter.errors counts
// script errors (each one an answer that went on unread from that chunk on).
const streamMeterStatPrefix = "stream_meter"

// StreamMeter is the filter's configuration: the script inline, so the whole filter travels in
// xDS and no file has to exist beside Envoy.
func StreamMeter() *luav3.Lua {
	return &luav3.Lua{
		DefaultSourceCode: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: streamMeterScript}},
		StatPrefix:        streamMeterStatPrefix,
	}
}
