package tasks

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r[host], nil
}

// TestCheckCallbackURL: only http(s) URLs whose every address is public pass, unless the
// operator allowed the address; the refusal names the host, why and the fix.
func TestCheckCallbackURL(t *testing.T) {
	r := resolver{
		"hooks.example.com": {netip.MustParseAddr("93.184.216.34")},
		"rebind.example":    {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.7")},
		"meta.example":      {netip.MustParseAddr("169.254.169.254")},
		"v6.example":        {netip.MustParseAddr("fd00::1")},
	}
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	for raw, want := range map[string]string{
		"https://hooks.example.com/v":        "",
		"http://127.0.0.1:9000/cb":           "", // allowed by the operator
		"http://127.0.0.2/cb":                "loopback",
		"http://[::1]/cb":                    "loopback",
		"https://rebind.example/":            "private",
		"https://meta.example/":              "metadata",
		"http://169.254.169.254/":            "metadata",
		"http://169.254.1.1/":                "link-local",
		"https://v6.example/":                "private",
		"http://100.64.0.1/":                 "private",
		"http://[::ffff:10.1.1.1]/":          "private",
		"ftp://hooks.example.com/":           "http or https",
		"https://user:pw@hooks.example.com/": "credentials",
		"not a url":                          "http or https",
	} {
		err := CheckCallbackURL(context.Background(), raw, allow, r)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want it to say %q", raw, err, want)
		}
	}
}

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
	st, err := store.Open(filepath.Join(t.TempDir(), "t.db"))
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
	d := &Deliverer{Store: st, Client: NewCallbackClient(NewAllowList([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})),
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
	strict := NewCallbackClient(nil)
	if _, err := strict.Post(srv.URL, "application/json", strings.NewReader("{}")); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback receiver without allow-list: %v", err)
	}
	// A reload replaces the list: the same client follows it at its next connection.
	list := NewAllowList(nil)
	live := NewCallbackClient(list)
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
