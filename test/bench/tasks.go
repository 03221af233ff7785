package main

// Tasks (-scenarios tasks): the media task lifecycle in process, against the fake MiniMax API
// directly (no Envoy: what is measured is the gateway's own work): one poll round over
// -tasks open tasks (CPU, heap, store size), and callback delivery throughput from the outbox
// to a local receiver.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/xds/ir"
)

type taskCatalog struct {
	p *ir.Provider
	m *ir.Model
}

func (c taskCatalog) Provider(string) *ir.Provider { return c.p }
func (c taskCatalog) Model(string) *ir.Model       { return c.m }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runTasks(ctx context.Context, dir string, n, callbacks int, w io.Writer) error {
	fake, err := fakeupstream.New(fakeupstream.Options{NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	st, err := bbolt.Open(filepath.Join(dir, "tasks.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	p := &ir.Provider{Name: "hailuo", Type: ir.ProviderTypeMiniMax, Host: "127.0.0.1", APIKey: "k"}
	m := &ir.Model{ID: "hailuo-02", Family: "V1"}
	svc := &tasks.Service{Store: st, Envoy: &tasks.Envoy{Addr: strings.TrimPrefix(fake.MiniMaxURL(), "http://")},
		Log: slog.New(slog.DiscardHandler), Now: time.Now, Catalog: func() tasks.Catalog { return taskCatalog{p, m} },
		RefreshEvery: time.Hour}
	// The tasks: created at the fake (so its queries answer), stored, all due now.
	start := time.Now()
	for i := range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_, err := svc.Create(ctx, tasks.NewTask{Kind: "video", Account: "acme", KeyID: "k1", Model: m,
			Attempts: []tasks.Attempt{{Provider: p, Model: "MiniMax-Hailuo-02"}},
			Body:     provider.Request{"prompt": []byte(fmt.Sprintf(`"fox %d"`, i))}, Request: task.Validated{MaxSeconds: 6},
			Hold: decimal.RequireFromString("0.32")})
		if err != nil {
			return err
		}
	}
	created := time.Since(start)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// One poll round: a service started over this store (as after a restart) has every running
	// task due at once.
	svc = &tasks.Service{Store: st, Envoy: svc.Envoy, Log: svc.Log, Now: time.Now, Catalog: svc.Catalog, RefreshEvery: time.Hour}
	if _, err := svc.Resume(); err != nil {
		return err
	}
	open, _ := st.OpenTasks(n+1, "")
	cpu0, t0 := cpuNow(), time.Now()
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { svc.Poll(pctx, 50*time.Millisecond, 8); close(done) }()
	var polled int
	for time.Since(t0) < 5*time.Minute && polled < n {
		time.Sleep(50 * time.Millisecond)
		polled = int(svc.Queries())
	}
	cancel()
	<-done
	round, cpu := time.Since(t0), cpuNow()-cpu0
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fi, _ := os.Stat(filepath.Join(dir, "tasks.db"))
	fmt.Fprintf(w, "\n== tasks: %d open tasks, in process against the fake MiniMax API directly (no Envoy) ==\n", n)
	fmt.Fprintf(w, "created and stored durably: %d in %s (%.0f/s, each an HTTP create + an fsynced write)\n", n, created.Round(time.Millisecond), float64(n)/created.Seconds())
	fmt.Fprintf(w, "one poll round over %d due tasks (8 at a time): %s, %.0f tasks/s, %s CPU (%.0f us a task), heap %.1f MiB after, store %.1f MiB (%.0f bytes a task)\n",
		polled, round.Round(time.Millisecond), float64(polled)/round.Seconds(), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(max(polled, 1)),
		float64(after.HeapAlloc)/(1<<20), float64(fi.Size())/(1<<20), float64(fi.Size())/float64(n))

	// Callbacks: an outbox of -callbacks deliveries to a local receiver.
	var got atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	defer recv.Close()
	body := []byte(`{"id":"video_X","object":"video","status":"completed","progress":100}`)
	for i := 0; i < callbacks; i += 100 {
		t := open[(i/100)%len(open)]
		_, err := st.UpdateTask(t.ID, func(x *store.Task) (store.TaskChange, error) {
			cbs := make([]store.Callback, 0, 100)
			for j := 0; j < 100 && i+j < callbacks; j++ {
				cbs = append(cbs, store.Callback{TaskID: x.ID, Account: "acme", URL: recv.URL, Body: body})
			}
			return store.TaskChange{Callbacks: cbs}, nil
		})
		if err != nil {
			return err
		}
	}
	d := &tasks.Deliverer{Store: st, Client: tasks.NewCallbackClient(&tasks.Guard{Allow: tasks.NewAllowList([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})}),
		Log: slog.New(slog.DiscardHandler), Now: time.Now}
	dctx, dcancel := context.WithCancel(ctx)
	t1, cpu1 := time.Now(), cpuNow()
	go d.Run(dctx, time.Second) // as the gateway runs it: lanes ask for more as they drain
	for got.Load() < int64(callbacks) && time.Since(t1) < 2*time.Minute {
		time.Sleep(10 * time.Millisecond)
	}
	dcancel()
	el, dcpu := time.Since(t1), cpuNow()-cpu1
	fmt.Fprintf(w, "callbacks: %d delivered signed in %s = %.0f/s (4 at a time, all to one host; each an HMAC, a POST and an fsynced ack), %.0f us CPU each\n",
		got.Load(), el.Round(time.Millisecond), float64(got.Load())/el.Seconds(), float64(dcpu.Microseconds())/float64(max(got.Load(), 1)))
	if got.Load() < int64(callbacks) || polled < n {
		return fmt.Errorf("tasks: %d of %d polled, %d of %d callbacks delivered", polled, n, got.Load(), callbacks)
	}
	return nil
}
