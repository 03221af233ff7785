package ir

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Tracing is where traces go (the tracing: section): Envoy's OpenTelemetry tracer makes the
// server and upstream spans and ext_proc adds its own under them, both exporting over OTLP/gRPC
// to one collector. A nil *Tracing is off.
type Tracing struct {
	Host string `json:"host"`
	Port uint32 `json:"port"`
	TLS  bool   `json:"tls,omitempty"`
	// CAFile verifies the collector's certificate (TLS only): the system bundle.
	CAFile string `json:"caFile,omitempty"`
	// SampleRate is the share of requests traced, 0 to 1 (a client's sampled traceparent is
	// followed as it says).
	SampleRate  float64 `json:"sampleRate"`
	ServiceName string  `json:"serviceName"`
}

// TracingCluster is the Envoy cluster that reaches the OTLP collector.
const TracingCluster = "tollway_otlp"

// DefaultOTLPPort is OTLP/gRPC's port, for an endpoint written without one.
const DefaultOTLPPort = 4317

// ForceTraceHeader asks Envoy's internal listener to trace a task call whose request is traced
// (its client_sampling); it never reaches a provider.
const ForceTraceHeader = "x-client-trace-id"

// DefaultServiceName is tracing.service_name when not set.
const DefaultServiceName = "tollway"

// ParseOTLPEndpoint reads tracing.otlp_endpoint: http://host:port (plaintext gRPC) or
// https://host:port (TLS), the port 4317 when omitted, nothing after the authority.
func ParseOTLPEndpoint(s string) (host string, port uint32, tls bool, err error) {
	bad := func(why string) (string, uint32, bool, error) {
		return "", 0, false, fmt.Errorf("tracing.otlp_endpoint %q: %s; write the collector's OTLP/gRPC address as http://host:4317 (or https:// for TLS), e.g. http://collector:4317: %w", s, why, ErrInvalid)
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL")
	}
	switch u.Scheme {
	case "http":
	case "https":
		tls = true
	default:
		return bad("the scheme must be http or https")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return bad("only a scheme, a host and a port are taken (OTLP/gRPC has no path)")
	}
	host = u.Hostname()
	if host == "" || strings.ContainsAny(host, " %") {
		return bad("a host is required")
	}
	port = DefaultOTLPPort
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return bad("the port must be 1 to 65535")
		}
		port = uint32(n)
	}
	return host, port, tls, nil
}

// Endpoint is the collector's host:port, for the OTLP exporter.
func (t *Tracing) Endpoint() string {
	return net.JoinHostPort(t.Host, strconv.FormatUint(uint64(t.Port), 10))
}

// CheckSampleRate checks tracing.sample_rate.
func CheckSampleRate(r float64) error {
	if !(r >= 0 && r <= 1) { // NaN too
		return fmt.Errorf("tracing.sample_rate %v: give the share of requests to trace from 0 to 1, e.g. 1.0 (every request) or 0.01 (one in a hundred): %w", r, ErrInvalid)
	}
	return nil
}

// Validate checks a tracing section the IR was given.
func (t *Tracing) Validate() error {
	if t == nil {
		return nil
	}
	if t.Host == "" || t.Port == 0 {
		return fmt.Errorf("tracing.otlp_endpoint: a host and a port are required, e.g. http://collector:4317: %w", ErrInvalid)
	}
	if t.TLS && t.CAFile == "" {
		return fmt.Errorf("tracing.otlp_endpoint: no CA bundle to verify %s with: %w", t.Host, ErrInvalid)
	}
	if t.ServiceName == "" {
		return fmt.Errorf("tracing.service_name: give the name traces show for the gateway, e.g. tollway: %w", ErrInvalid)
	}
	return CheckSampleRate(t.SampleRate)
}
