package translator

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy's codec limits for request headers sit well above the gateway's own (ir.MaxRequest*),
// which ext_proc enforces with a JSON 431: over the codec's, HTTP/2 streams are reset.
const (
	codecHeaderKB    = 256
	codecHeaderCount = 1000
)

// CircuitBreakers lets a cluster carry n requests at once: n connections (an HTTP/1.1 upstream
// needs one per open request), n waiting for a connection, n open, and n retries in flight.
// Envoy's defaults (1,024 each, 3 concurrent retries) would cap a gateway of long streams far
// below its limit and, under load, silently turn fallback off. An overflow is answered 503
// gateway_overloaded (localReplies).
func CircuitBreakers(n uint32) *clusterv3.CircuitBreakers {
	v := wrapperspb.UInt32(n)
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     v,
		MaxPendingRequests: v,
		MaxRequests:        v,
		MaxRetries:         v,
		TrackRemaining:     true, // remaining_rq etc. in Envoy's stats show the headroom
	}}}
}
