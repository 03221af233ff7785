package tasks

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// TestExpiredURLsAreWithheld: after its expiry a result URL is not handed out (a dead link),
// the video says it expired, and expires_at is the earliest expiry.
func TestExpiredURLsAreWithheld(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	vs := []store.TaskVideo{
		{URL: "https://cdn.example/a.mp4", ExpiresAt: now.Add(time.Hour), Seconds: decimal.RequireFromString("6"), Width: 1920, Height: 1080},
		{URL: "https://cdn.example/b.mp4", ExpiresAt: now.Add(-time.Second)},
	}
	out, first := videosOf(vs, now)
	if len(out) != 2 || out[0].URL == "" || out[0].Expired || out[0].Seconds != "6" || out[1].URL != "" || !out[1].Expired {
		t.Fatalf("videos %+v", out)
	}
	if first == nil || *first != now.Add(-time.Second).Unix() {
		t.Fatalf("expires_at %v", first)
	}
	if size(vs) != "1920x1080" {
		t.Fatalf("size %q", size(vs))
	}
}

// TestEnvoyCarriesTheRequest: a task request reaches Envoy's internal listener with the
// provider's cluster header, authority, base path, method and headers; redirects are not
// followed; oversized answers are refused.
func TestEnvoyCarriesTheRequest(t *testing.T) {
	var got *http.Request
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		if r.URL.Query().Get("redirect") != "" {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	e := &Envoy{Addr: strings.TrimPrefix(srv.URL, "http://")}
	p := &ir.Provider{Name: "hailuo", Host: "api.minimax.io", Port: 443, TLS: true, BasePath: ""}
	a, err := e.Do(context.Background(), p, &provider.Upstream{Path: "/v1/video_generation", Body: []byte(`{"x":1}`),
		Headers: map[string]string{"authorization": "Bearer k", "x-drop": ""}})
	if err != nil || a.Status != 200 || string(a.Body) != `{"ok":true}` {
		t.Fatalf("%+v %v", a, err)
	}
	if got.Method != "POST" || got.URL.Path != "/v1/video_generation" || got.Host != "api.minimax.io" || got.Header.Get(ir.ClusterHeader) != p.ClusterName() ||
		got.Header.Get("Authorization") != "Bearer k" || got.Header.Get("X-Drop") != "" || body != `{"x":1}` {
		t.Fatalf("request %s %s host %s headers %v body %s", got.Method, got.URL, got.Host, got.Header, body)
	}
	a, err = e.Do(context.Background(), p, &provider.Upstream{Method: "GET", Path: "/v1/query?redirect=1"})
	if err != nil || a.Status != http.StatusFound || got.Method != "GET" {
		t.Fatalf("redirect: %+v %v", a, err)
	}
}
