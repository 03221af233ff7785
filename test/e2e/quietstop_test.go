package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/test/harness"
)

// alarming matches a log line at warning level or above: Tollway's slog lines and Envoy's
// ("envoy: [time][pid][warning][config] ...").
var alarming = regexp.MustCompile(`level=(WARN|ERROR)|\]\[(warning|error|critical)\]\[`)

// TestCleanStopIsQuiet: a clean stop (SIGTERM to Tollway as a service manager sends it, SIGINT
// to the terminal's group as Ctrl-C does) with a stream in flight lets the stream finish and
// prints no warning or error at all, from Tollway or Envoy (every stop printed Envoy's
// "gRPC config stream to tollway_xds closed: 13" warning).
func TestCleanStopIsQuiet(t *testing.T) {
	// Runs alone (no t.Parallel): any warning fails it, and a loaded machine makes some (health checks late).
	for _, c := range []struct {
		sig  syscall.Signal
		send func(*gateway, syscall.Signal) error
	}{
		{syscall.SIGTERM, func(g *gateway, s syscall.Signal) error { return g.Signal(s) }},
		{syscall.SIGINT, func(g *gateway, s syscall.Signal) error { return g.SignalGroup(s) }},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, ChunkDelay: 100 * time.Millisecond})
			g := startWith(t, harness.Options{Body: catalog(fake.URL()), Env: []string{"FAKE_PROVIDER_KEY=" + providerKey}, OwnGroup: true, Drain: 20 * time.Second})
			resp, sc := slowStream(t, g, 10)
			defer resp.Body.Close()
			if err := c.send(g, c.sig); err != nil {
				t.Fatal(err)
			}
			if !readToEnd(sc) {
				t.Fatalf("the stream was cut by %s: no [DONE]", c.sig)
			}
			waitExit(t, g, 30*time.Second)
			if g.ExitErr() != nil {
				t.Fatalf("exit after %s: %v", c.sig, g.ExitErr())
			}
			logs := g.logs.String()
			if !strings.Contains(logs, "draining") || !strings.Contains(logs, "msg=stopped") {
				t.Fatalf("no drain and stop in the log:\n%s", logs)
			}
			for _, line := range strings.Split(logs, "\n") {
				if alarming.MatchString(line) {
					t.Errorf("a clean stop printed: %s", line)
				}
			}
		})
	}
}
