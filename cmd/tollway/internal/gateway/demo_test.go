package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestDemoServerStartsOnce(t *testing.T) {
	d := &demoServer{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.close() // never started: nothing to stop
	a, err := d.addr()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := d.addr(); err != nil || b != a {
		t.Fatalf("second addr %q, %v; want the same server %q", b, err, a)
	}
	resp, err := http.Post("http://"+a+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	d.close()
	if _, err := http.Post("http://"+a+"/v1/chat/completions", "application/json", strings.NewReader(`{}`)); err == nil {
		t.Error("the demo server still answers after close")
	}
}
