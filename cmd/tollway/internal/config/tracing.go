package config

import (
	"errors"
	"fmt"
	"unicode"

	"github.com/tollway/tollway/xds/catalog"
	"github.com/tollway/tollway/xds/ir"
)

// maxServiceName bounds tracing.service_name: a name, not a document.
const maxServiceName = 128

// checkTracing checks the tracing: section: off without an endpoint (its other keys then
// must not be set), else a collector URL, a rate from 0 to 1 and a service name.
func (c *Config) checkTracing() []error {
	t := c.Tracing
	if t.OTLPEndpoint == "" {
		if t.SampleRate != 1 || t.ServiceName != ir.DefaultServiceName {
			return []error{errors.New("tracing: sample_rate and service_name need tracing.otlp_endpoint, the collector's OTLP/gRPC address (e.g. http://collector:4317); without it tracing is off")}
		}
		return nil
	}
	var errs []error
	if _, _, _, err := ir.ParseOTLPEndpoint(t.OTLPEndpoint); err != nil {
		errs = append(errs, err)
	}
	if err := ir.CheckSampleRate(t.SampleRate); err != nil {
		errs = append(errs, err)
	}
	if n := t.ServiceName; n == "" || len(n) > maxServiceName || !printable(n) {
		errs = append(errs, fmt.Errorf("tracing.service_name %q: give the name traces show for the gateway, 1 to %d printable characters, e.g. tollway (the default)", n, maxServiceName))
	}
	return errs
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// IRTracing is the tracing: section as the IR takes it; nil: off (Validate checked it).
func (c *Config) IRTracing() *ir.Tracing {
	t := c.Tracing
	if t.OTLPEndpoint == "" {
		return nil
	}
	host, port, tls, err := ir.ParseOTLPEndpoint(t.OTLPEndpoint)
	if err != nil {
		return nil
	}
	out := &ir.Tracing{Host: host, Port: port, TLS: tls, SampleRate: t.SampleRate, ServiceName: t.ServiceName}
	if tls {
		out.CAFile = catalog.SystemCABundle()
	}
	return out
}
