package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/tollway/tollway/test/otlp"
)

// Tracing (-scenarios tracing): what OpenTelemetry tracing costs a request. Three billing-on
// Tollways differing only in their tracing: section take the same keyed chat load (-rate, 500/s
// by default) in alternating rounds, as the observe scenario's: tracing off, sampled at 1.0
// and at 0.01, both exporting to a real OTLP/gRPC receiver on loopback (test/otlp, counting the
// spans it gets). Printed: each side against tracing off, and the spans received.
func runTracing(ctx context.Context, o *options, dir string, stdout, stderr io.Writer) error {
	rc, err := otlp.Listen(true)
	if err != nil {
		return err
	}
	defer rc.Stop()
	section := func(rate string) string {
		return fmt.Sprintf("tracing: {otlp_endpoint: %q, sample_rate: %s, service_name: tollway-bench}\n", rc.Endpoint(), rate)
	}
	sides := []*side{
		{name: "tracing off"},
		{name: "sampled 1.0", extra: section("1.0")},
		{name: "sampled 0.01", extra: section("0.01")},
	}
	title := fmt.Sprintf("tracing: off vs sampled at 1.0 and 0.01, billing on, keyed chat at %d req/s for %s per side (%d alternating rounds)", o.rate, o.observeDuration, observeRounds)
	if err := compareSides(ctx, o, filepath.Join(dir, "tracing"), "tracing", title, sides, stdout, stderr); err != nil {
		return err
	}
	for _, s := range sides[1:] {
		fmt.Fprintf(stdout, "%s vs off: %s\n", s.name, against(s, sides[0]))
	}
	fmt.Fprintf(stdout, "spans received by the OTLP receiver (Envoy's flushed every 5 s): %d\n", rc.Count())
	return nil
}
