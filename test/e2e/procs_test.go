package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestGomaxprocsFollowsLoad: a quiet gateway runs its Go code on one P (a sidecar's usual
// state: no second thread woken to spin on every ext_proc message); a burst of streamed
// answers (one ext_proc message per chunk) gives it every core back, and quiet again returns
// it to one. The streams ask for the usage chunk, which keeps them on the chunk lane on the
// default gateway (a fast-lane stream costs ext_proc no message per chunk: no load to follow). Read from Go's own go_sched_gomaxprocs_threads on /metrics. An explicit
// GOMAXPROCS in the environment pins it instead.
func TestGomaxprocsFollowsLoad(t *testing.T) {
	// Runs alone (no t.Parallel): it reads the CPUs the gateway uses.
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	g := startGateway(t, catalog(fake.URL())+fmt.Sprintf("admin: {token: %q}\n", metricsToken), "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	busy, quiet := runtime.GOMAXPROCS(0), 1 // the default for this machine and cgroup, as the gateway's
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		busy, _ = strconv.Atoi(v)
		quiet = busy
	} else if busy == 1 {
		t.Log("one CPU: nothing to tune, GOMAXPROCS stays 1")
	}
	procs := func() int {
		return int(sum(scrape(t, g, "/metrics"), "go_sched_gomaxprocs_threads", nil))
	}
	waitFor(t, fmt.Sprintf("GOMAXPROCS %d while idle", quiet), 10*time.Second, func() bool { return procs() == quiet })

	// A 300-word prompt comes back as about 300 chunks, each an ext_proc message.
	body := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + strings.Repeat("word ", 300) + `"}]}`
	ctx, stop := context.WithCancel(context.Background())
	var load sync.WaitGroup
	for range 4 {
		load.Add(1)
		go func() {
			defer load.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.BaseURL+"/chat/completions", strings.NewReader(body))
				req.Header.Set("authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the load stopped
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, fmt.Sprintf("GOMAXPROCS %d under load", busy), 15*time.Second, func() bool { return procs() == busy })
	stop()
	load.Wait()
	waitFor(t, fmt.Sprintf("GOMAXPROCS %d once quiet again", quiet), 10*time.Second, func() bool { return procs() == quiet })
}

// TestEnvoyWorkersFollowTheCPUs: the child Envoy runs one worker per CPU Tollway may use (Go's
// view: the affinity mask and the cgroup's CPU limit, or GOMAXPROCS), not Envoy's default of
// every hardware thread of the host, which in a container limited to 2 CPUs on a 64-core node
// is 64 workers, each with its own connections to every provider and to ext_proc.
// envoy.concurrency sets it. Read from Envoy's own server.concurrency gauge.
func TestEnvoyWorkersFollowTheCPUs(t *testing.T) {
	// Runs alone (no t.Parallel): it reads the CPUs Envoy uses.
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey, NoRecord: true})
	body := catalog(fake.URL()) + fmt.Sprintf("admin: {token: %q}\n", metricsToken)
	workers := func(g *gateway) int {
		return int(sum(scrape(t, g, "/metrics/envoy"), "envoy_server_concurrency", nil))
	}
	want := runtime.GOMAXPROCS(0) // this process's view of the same machine and cgroup
	def := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey)
	if got := workers(def); got != want {
		t.Errorf("default: Envoy runs %d workers, want %d (the CPUs Go sees)", got, want)
	}
	// Envoy's workers are fixed for its life: an edited file says so rather than seeming applied.
	cfg, err := os.ReadFile(def.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(cfg), "envoy: {", "envoy: {concurrency: 4, ", 1)
	if err := os.WriteFile(def.CfgPath, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the warning that envoy.concurrency takes effect on restart", 10*time.Second, func() bool {
		return strings.Contains(def.logs.String(), "envoy.concurrency changed; Envoy's workers follow on restart")
	})
	if got := workers(def); got != want {
		t.Errorf("after the edit: Envoy runs %d workers, want %d until a restart", got, want)
	}
	// One CPU, as a pod limited to one CPU sees it (Envoy's default here would be every core).
	if got := workers(startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey, "GOMAXPROCS=1")); got != 1 {
		t.Errorf("GOMAXPROCS=1: Envoy runs %d workers, want 1", got)
	}
	// envoy.concurrency, here from the environment as a container would set it.
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey, "TOLLWAY_ENVOY_CONCURRENCY=3")
	if got := workers(g); got != 3 {
		t.Errorf("envoy.concurrency 3: Envoy runs %d workers", got)
	}
	key := g.newKey("acme")
	resp := g.chat(context.Background(), key, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat through 3 workers: %d %s", resp.StatusCode, answer)
	}
}
