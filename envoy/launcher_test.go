package envoy

import (
	"bytes"
	"strings"
	"testing"
)

// TestForwardLogFoldsDumps: a rejected resource is logged by Envoy with its protobuf dump; only
// the record's first line is forwarded unless the full log is asked for.
func TestForwardLogFoldsDumps(t *testing.T) {
	in := "raw line before any record\n" +
		"[2026-11-23 19:17:17.339][1][warning][upstream] cds: cluster 'x' config rejected: ALPN configured\n" +
		strings.Repeat("  seconds: 5\n", 1000) +
		"[2026-11-23 19:17:17.351][1][warning][misc] next record\n"
	var out bytes.Buffer
	forwardLog(strings.NewReader(in), &out, false)
	want := "envoy: raw line before any record\n" +
		"envoy: [2026-11-23 19:17:17.339][1][warning][upstream] cds: cluster 'x' config rejected: ALPN configured\n" +
		"envoy:   (1000 more lines of this message; log.level: debug shows them)\n" +
		"envoy: [2026-11-23 19:17:17.351][1][warning][misc] next record\n"
	if out.String() != want {
		t.Fatalf("folded:\n%s", out.String())
	}
	out.Reset()
	forwardLog(strings.NewReader(in), &out, true)
	if n := strings.Count(out.String(), "\n"); n != 1003 {
		t.Fatalf("full log has %d lines, want 1003", n)
	}
}
