package envoy

import (
	"bytes"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/test/harness"
)

// TestForwardLogFoldsDumps: a rejected resource is logged by Envoy with its protobuf dump; only
// the record's first line is forwarded unless the full log is asked for.
func TestForwardLogFoldsDumps(t *testing.T) {
	in := "raw line before any record\n" +
		"[2026-11-23 19:17:17.339][1][warning][upstream] cds: cluster 'x' config rejected: ALPN configured\n" +
		strings.Repeat("  seconds: 5\n", 1000) +
		"[2026-11-23 19:17:17.351][1][warning][misc] next record\n"
	var out bytes.Buffer
	forwardLog(strings.NewReader(in), &out, false, new(atomic.Bool))
	want := "envoy: raw line before any record\n" +
		"envoy: [2026-11-23 19:17:17.339][1][warning][upstream] cds: cluster 'x' config rejected: ALPN configured\n" +
		"envoy:   (1000 more lines of this message; log.level: debug shows them)\n" +
		"envoy: [2026-11-23 19:17:17.351][1][warning][misc] next record\n"
	if out.String() != want {
		t.Fatalf("folded:\n%s", out.String())
	}
	out.Reset()
	forwardLog(strings.NewReader(in), &out, true, new(atomic.Bool))
	if n := strings.Count(out.String(), "\n"); n != 1003 {
		t.Fatalf("full log has %d lines, want 1003", n)
	}
}

// TestForwardLogQuietDuringStop: the xDS stream's close that Envoy's own exit causes is
// expected once Tollway stops Envoy, so it is not forwarded then (log.level debug keeps it);
// before the stop, the same line is a real disconnection and is forwarded.
func TestForwardLogQuietDuringStop(t *testing.T) {
	const closed = "[2026-11-28 07:40:41.696][3821][warning][config] [./source/extensions/config_subscription/grpc/grpc_stream.h:189] StreamAggregatedResources gRPC config stream to tollway_xds closed: 13, upstream_reset_after_response_started{connection_termination}\n"
	const other = "[2026-11-28 07:40:41.697][3821][warning][main] something else\n"
	for _, full := range []bool{false, true} {
		var stopping atomic.Bool
		var out harness.SyncBuffer
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() { forwardLog(pr, &out, full, &stopping); close(done) }()
		io.WriteString(pw, closed)
		io.WriteString(pw, other)
		for !strings.Contains(out.String(), "something else") { // both lines handled before the stop
			time.Sleep(time.Millisecond)
		}
		stopping.Store(true)
		io.WriteString(pw, closed)
		io.WriteString(pw, other)
		pw.Close()
		<-done
		want := 1
		if full {
			want = 2
		}
		if n := strings.Count(out.String(), "tollway_xds closed"); n != want {
			t.Errorf("full=%v: the close was forwarded %d times, want %d:\n%s", full, n, want, out.String())
		}
		if n := strings.Count(out.String(), "something else"); n != 2 {
			t.Errorf("full=%v: other warnings forwarded %d times, want 2:\n%s", full, n, out.String())
		}
	}
}
