package tasks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
)

// TestSignatureRoundTrip: a receiver verifies what the gateway signed, and refuses a changed
// body, another secret and an old timestamp.
func TestSignatureRoundTrip(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"video_1","status":"completed"}`)
	h := Sign("whsec_a", now, body)
	if err := Verify("whsec_a", h, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"body":   Verify("whsec_a", h, []byte(`{}`), now, 5*time.Minute),
		"secret": Verify("whsec_b", h, body, now, 5*time.Minute),
		"old":    Verify("whsec_a", h, body, now.Add(time.Hour), 5*time.Minute),
		"shape":  Verify("whsec_a", "v1=abc", body, now, 5*time.Minute),
	} {
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// TestDelivererRetriesUntilDelivered: a receiver that fails twice gets the callback a third
// time, signed and with the same delivery id; the outbox is empty afterwards. A connection to
// an address the operator did not allow is refused at dial time.
func TestDelivererRetriesUntilDelivered(t *testing.T) {
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var calls atomic.Int32
	var ids, sigs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ids = append(ids, r.Header.Get(DeliveryHeader))
		secret, _ := st.CallbackSecret("acme")
		if err := Verify(secret, r.Header.Get(SignatureHeader), body, time.Now(), time.Minute); err != nil {
			sigs = append(sigs, err.Error())
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	task := &store.Task{ID: store.NewTaskID("video"), Kind: "video", Account: "acme", Model: "m", Provider: "p", ProviderTaskID: "x", Status: "queued", CallbackURL: srv.URL}
	if err := st.PutTask(task); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateTask(task.ID, func(x *store.Task) (store.TaskChange, error) {
		x.Status = "completed"
		return store.TaskChange{Callbacks: []store.Callback{{TaskID: x.ID, Account: "acme", URL: srv.URL, Body: []byte(`{"status":"completed"}`)}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	d := &Deliverer{Store: st, Client: NewCallbackClient(&Guard{Allow: NewAllowList([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})}),
		Log: slog.New(slog.DiscardHandler), Now: time.Now, Base: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go d.Run(ctx, 5*time.Millisecond)
	for calls.Load() < 3 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	if calls.Load() != 3 || len(sigs) != 0 || ids[0] == "" || ids[0] != ids[2] {
		t.Fatalf("calls %d, signature errors %v, ids %v", calls.Load(), sigs, ids)
	}
	if due, _ := st.DueCallbacks(time.Now().Add(time.Hour), 10); len(due) != 0 {
		t.Fatalf("outbox still holds %+v", due)
	}
	// Without the allow-list the same receiver (on loopback) is refused at connection time.
	strict := NewCallbackClient(&Guard{})
	if _, err := strict.Post(srv.URL, "application/json", strings.NewReader("{}")); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback receiver without allow-list: %v", err)
	}
	// A reload replaces the list: the same client follows it at its next connection.
	list := NewAllowList(nil)
	live := NewCallbackClient(&Guard{Allow: list})
	live.Transport.(*http.Transport).DisableKeepAlives = true
	if _, err := live.Post(srv.URL, "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("delivered to loopback before the list allowed it")
	}
	list.Set([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	resp, err := live.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("after the list allowed it: %v", err)
	}
	resp.Body.Close()
	list.Set(nil)
	if _, err := live.Post(srv.URL, "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("delivered to loopback after the list was emptied")
	}
}

// TestDelivererDeadHostDelaysOnlyItself: 80 callbacks to a host that accepts connections and
// never answers hold at most PerHost connections there, and another host's callback goes out
// at once rather than after the dead host's timeouts.
func TestDelivererDeadHostDelaysOnlyItself(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var most peak
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			done := most.enter()
			go func() { _, _ = io.Copy(io.Discard, c); done(); c.Close() }()
		}
	}()
	var got atomic.Int64
	good := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Store(time.Now().UnixNano()) }))
	defer good.Close()
	st, task, d := outbox(t, 80, "http://"+ln.Addr().String()+"/cb")
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { d.Run(ctx, 20*time.Millisecond); close(stopped) }()
	time.Sleep(200 * time.Millisecond) // the dead host's deliveries are under way
	if _, err := st.UpdateTask(task.ID, func(*store.Task) (store.TaskChange, error) {
		return store.TaskChange{Callbacks: []store.Callback{{TaskID: task.ID, Account: "b", URL: good.URL + "/cb", Body: []byte(`{}`)}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for got.Load() == 0 && time.Since(start) < 15*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() == 0 || time.Unix(0, got.Load()).Sub(start) > 2*time.Second {
		t.Fatalf("the other host's callback: delivered at %v (0: not within 15 s)", time.Unix(0, got.Load()).Sub(start))
	}
	if m := most.most.Load(); m < 1 || m > 4 {
		t.Fatalf("the dead host held %d connections at once, want 1 to PerHost (4)", m)
	}
	// The receiver has the callback before the deliverer has its answer and acks it: wait for
	// the ack (a stop before it would leave the delivery in the outbox, as it should).
	left := func() int { due, _ := st.DueCallbacks(time.Now().Add(time.Hour), 100); return len(due) }
	for deadline := time.Now().Add(5 * time.Second); left() != 80 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select { // stopping cuts the deliveries in flight and waits for them
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := left(); n != 80 {
		t.Fatalf("%d callbacks left in the outbox, want the dead host's 80", n)
	}
}

// TestDelivererKeepsAFastHostBusy: a host's lane asks for more as it drains, so 300 callbacks
// to one fast receiver go out at once, not 64 per reading of the outbox (here read once an
// hour), never more than PerHost at a time.
func TestDelivererKeepsAFastHostBusy(t *testing.T) {
	var got atomic.Int32
	var most peak
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		defer most.enter()()
		time.Sleep(time.Millisecond)
		got.Add(1)
	}))
	defer srv.Close()
	_, _, d := outbox(t, 300, srv.URL+"/cb")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx, time.Hour)
	waitUntil := time.Now().Add(20 * time.Second)
	for got.Load() < 300 && time.Now().Before(waitUntil) {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() != 300 || most.most.Load() > 4 {
		t.Fatalf("%d of 300 delivered, at most %d at once (want 300, at most 4)", got.Load(), most.most.Load())
	}
}

// outbox is a store whose outbox holds n callbacks of one task to url, and a deliverer of it
// that may reach loopback.
func outbox(t *testing.T, n int, url string) (*bbolt.Store, *store.Task, *Deliverer) {
	t.Helper()
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	task := &store.Task{ID: store.NewTaskID("video"), Kind: "video", Account: "a", Model: "m", Provider: "p", ProviderTaskID: "x", Status: "queued"}
	if err := st.PutTask(task); err != nil {
		t.Fatal(err)
	}
	cbs := make([]store.Callback, n)
	for i := range cbs {
		cbs[i] = store.Callback{TaskID: task.ID, Account: "a", URL: url, Body: []byte(`{}`)}
	}
	if _, err := st.UpdateTask(task.ID, func(*store.Task) (store.TaskChange, error) { return store.TaskChange{Callbacks: cbs}, nil }); err != nil {
		t.Fatal(err)
	}
	return st, task, &Deliverer{Store: st, Client: NewCallbackClient(&Guard{Allow: NewAllowList([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})}),
		Log: slog.New(slog.DiscardHandler), Now: time.Now}
}

// peak counts what is open at once and keeps the most.
type peak struct{ open, most atomic.Int32 }

// enter counts one more open; the function it returns counts it closed.
func (p *peak) enter() func() {
	n := p.open.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	return func() { p.open.Add(-1) }
}

// failingAcks is an outbox whose first AckCallback fails, as a full disk's would.
type failingAcks struct {
	store.Callbacks
	failed atomic.Bool
}

func (f *failingAcks) AckCallback(c store.Callback) error {
	if f.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: no space left on device", store.ErrUnavailable)
	}
	return f.Callbacks.AckCallback(c)
}

var _ store.Callbacks = (*failingAcks)(nil)

// TestGiveUpSurvivesAFailedAck: a callback given up whose removal from the outbox fails is
// logged, and the give-up is kept: the next read removes it without sending it again (the
// receiver sees one delivery of a callback allowed one attempt), and the outbox ends empty.
func TestGiveUpSurvivesAFailedAck(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	st, _, d := outbox(t, 1, srv.URL)
	var log logBuffer
	d.Store, d.Log, d.MaxAttempts, d.Base = &failingAcks{Callbacks: st}, slog.New(slog.NewTextHandler(&log, nil)), 1, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { d.Run(ctx, 5*time.Millisecond); close(stopped) }()
	deadline := time.Now().Add(5 * time.Second)
	for due, _ := st.DueCallbacks(time.Now().Add(time.Hour), 10); len(due) > 0; due, _ = st.DueCallbacks(time.Now().Add(time.Hour), 10) {
		if time.Now().After(deadline) {
			t.Fatalf("the given-up callback is still in the outbox: %+v", due)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // room for a delivery that should not happen
	cancel()
	<-stopped
	if n := posts.Load(); n != 1 {
		t.Fatalf("the receiver got %d deliveries of a callback allowed 1 attempt", n)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "no space left on device") {
		t.Fatalf("the failed removal was not logged:\n%s", log.String())
	}
}
