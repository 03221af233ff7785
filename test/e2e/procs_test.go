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
// it to one. Read from Go's own go_sched_gomaxprocs_threads on /metrics. An explicit
// GOMAXPROCS in the environment pins it instead.
func TestGomaxprocsFollowsLoad(t *testing.T) {
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
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 300) + `"}]}`
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
