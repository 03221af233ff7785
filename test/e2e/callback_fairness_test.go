package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// deadHost accepts connections and never answers, holding each until the test ends: the
// callback host of a tenant who wants to stall everyone's callbacks.
type deadHost struct {
	ln             net.Listener
	open, accepted atomic.Int32
	most           atomic.Int32 // the most connections open at once
}

func startDeadHost(t *testing.T) *deadHost {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &deadHost{ln: ln}
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.accepted.Add(1)
			n := d.open.Add(1)
			for m := d.most.Load(); n > m && !d.most.CompareAndSwap(m, n); m = d.most.Load() {
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				_, _ = io.Copy(io.Discard, c) // never answers; returns when the client gives up
				d.open.Add(-1)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return d
}

// TestDeadCallbackHostStallsOnlyItself: one tenant's 80 tasks with callbacks to a host that
// never answers do not delay another account's callback: it leaves within 15 s of its task's
// change (docs/media.md#callbacks).
func TestDeadCallbackHostStallsOnlyItself(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	dead := startDeadHost(t)
	type arrival struct {
		at   time.Time
		body map[string]any
	}
	arrivals := make(chan arrival, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		arrivals <- arrival{time.Now(), m}
	}))
	defer hook.Close()
	g := startGateway(t, v1Config(fake)+"callbacks: {allow_private: [127.0.0.1]}\n", "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	for _, a := range []string{"tenant", "other"} {
		if err := g.NewAccount(ctx, a, "100"); err != nil {
			t.Fatal(err)
		}
	}
	tenant, other := g.newKey("tenant"), g.newKey("other")
	for i := range 80 {
		if code, obj := g.do("POST", tenant, "/videos", `{"model":"hailuo-02","prompt":"a fox","callback_url":"http://`+dead.ln.Addr().String()+`/cb"}`); code != 200 {
			t.Fatalf("tenant task %d: %d %v", i, code, obj)
		}
	}
	waitFor(t, "the attack to be under way (deliveries to the dead host)", 60*time.Second, func() bool { return dead.accepted.Load() >= 4 })

	code, obj := g.do("POST", other, "/videos", `{"model":"hailuo-02","prompt":"another fox","callback_url":"`+hook.URL+`/cb"}`)
	if code != 200 {
		t.Fatalf("other's task: %d %v", code, obj)
	}
	id := obj["id"].(string)
	deadline := time.After(120 * time.Second)
	for {
		select {
		case a := <-arrivals:
			if a.body["id"] != id || a.body["status"] != "completed" {
				continue
			}
			completed := time.Unix(int64(a.body["completed_at"].(float64)), 0)
			// completed_at is whole seconds, at most a second before the change itself.
			if late := a.at.Sub(completed); late > 16*time.Second {
				t.Fatalf("other's callback arrived %s after its task completed (the dead host held %d connections at once, %d in all)", late.Round(time.Millisecond), dead.most.Load(), dead.accepted.Load())
			} else {
				t.Logf("other's callback arrived %s after its task completed; the dead host held %d connections at once, %d in all", late.Round(time.Millisecond), dead.most.Load(), dead.accepted.Load())
			}
			return
		case <-deadline:
			t.Fatalf("other's completed callback never arrived (the dead host held %d connections at once, %d in all)", dead.most.Load(), dead.accepted.Load())
		}
	}
}
