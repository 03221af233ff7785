package ir

import "fmt"

// Limits bound what one gateway holds at once. Envoy's circuit breakers are sized from them, so
// an overload is a clear 503 rather than Envoy's defaults (1,024 requests per cluster, which two
// ext_proc streams per request turn into ~512 open requests).
type Limits struct {
	// MaxConcurrentRequests is how many requests may be open at once, streams included
	// (limits.max_concurrent_requests); 0 means DefaultMaxConcurrentRequests.
	MaxConcurrentRequests uint32 `json:"maxConcurrentRequests,omitempty"`
}

// Bounds of the public request: headers over these get 431 headers_too_large. The size is
// Envoy's own default, counted as Envoy does (names and values, pseudo-headers included).
const (
	DefaultMaxConcurrentRequests = 10000
	MaxConcurrentRequestsCeiling = 1_000_000
	MaxRequestHeaderBytes        = 60 << 10
	MaxRequestHeaders            = 100
	// ExtProcStreamsPerRequest: the router-level and the per-attempt ext_proc filters each hold
	// a stream for as long as the request lives.
	ExtProcStreamsPerRequest = 2
	// extProcSpare covers catalog reads and streams Envoy has not closed yet.
	extProcSpare = 256
	// MaxXFFTrustedHops bounds listen.xff_num_trusted_hops: a chain of proxies longer than this
	// in front of a gateway is a misconfiguration, not a deployment.
	MaxXFFTrustedHops = 10
)

// Requests is the configured limit, or the default.
func (l Limits) Requests() uint32 {
	if l.MaxConcurrentRequests == 0 {
		return DefaultMaxConcurrentRequests
	}
	return l.MaxConcurrentRequests
}

// ExtProcStreams is what the ext_proc cluster must carry at once for Requests open requests.
func (l Limits) ExtProcStreams() uint32 {
	return ExtProcStreamsPerRequest*l.Requests() + extProcSpare
}

// Validate refuses limits Envoy cannot represent or that make no sense.
func (l Limits) Validate() error {
	if l.MaxConcurrentRequests > MaxConcurrentRequestsCeiling {
		return fmt.Errorf("limits.max_concurrent_requests %d: at most %d: %w", l.MaxConcurrentRequests, MaxConcurrentRequestsCeiling, ErrInvalid)
	}
	return nil
}
