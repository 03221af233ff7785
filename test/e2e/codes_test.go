package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/tollway/tollway/test/fakeupstream"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// The status table of docs/api.md#errors, each row proven against the real Envoy: who failed
// decides the status, and every body keeps request_id equal to the x-request-id header (wantError).

const hiBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`

// TestSilentProviderIsUpstreamTimeout: a provider silent past routing.attempt_timeout on the
// last attempt is 504 upstream_timeout, plain and streamed.
func TestSilentProviderIsUpstreamTimeout(t *testing.T) {
	// Runs alone (no t.Parallel): it times a provider's silence.
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, "routing: {attempt_timeout: 300ms}\n"+catalog(fake.URL()), "FAKE_PROVIDER_KEY="+providerKey)
	key := g.newKey("acme")
	for _, stream := range []bool{false, true} {
		fake.Script(fakeupstream.Fault{Delay: 3 * time.Second})
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
		start := time.Now()
		e := wantError(t, g.chat(context.Background(), key, body), 504, translator.CodeUpstreamTimeout)
		t.Logf("stream=%v after %s: %s", stream, time.Since(start).Round(time.Millisecond), e.Error.Message)
	}
}

// TestUnreachableProviderIsUpstreamUnavailable: refused and reset connections, after the whole
// chain, are 503 upstream_unavailable.
func TestUnreachableProviderIsUpstreamUnavailable(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	fake.Script(fakeupstream.Fault{Reset: true})
	wantError(t, g.chat(context.Background(), key, hiBody), 503, translator.CodeUpstreamUnavailable)
	refused := startGateway(t, catalog("http://"+deadAddr+"/v1"), "FAKE_PROVIDER_KEY="+providerKey)
	wantError(t, refused.chat(context.Background(), refused.newKey("acme"), hiBody), 503, translator.CodeUpstreamUnavailable)
}

// hungExtProc accepts ext_proc streams and never answers, like a deadlocked processor.
type hungExtProc struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (hungExtProc) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	<-stream.Context().Done()
	return nil
}

// envoyWithHungExtProc runs the real Envoy with a hungExtProc behind its ext_proc socket.
func envoyWithHungExtProc(t *testing.T, limits ir.Limits) (*gateway, *fakeupstream.Server) {
	t.Helper()
	fake := fakeupstream.Start(t, fakeupstream.Options{})
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "extproc.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, hungExtProc{})
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return envoyWithoutTollway(t, dir, sock, fake, limits), fake
}

// TestHungExtProcIsGatewayUnavailable: an ext_proc that takes the stream but never answers
// (Envoy's message timeout fires, which Envoy itself answers 504) is the gateway's own 500
// gateway_unavailable, and the provider is never reached.
func TestHungExtProcIsGatewayUnavailable(t *testing.T) {
	// Runs alone (no t.Parallel): it times Envoy's message timeout.
	gw, fake := envoyWithHungExtProc(t, ir.Limits{})
	start := time.Now()
	resp := gw.chat(context.Background(), "ale-"+strings.Repeat("k", 43), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	e := wantError(t, resp, 500, translator.CodeGatewayUnavailable)
	// Envoy's timer may fire a few milliseconds short of the configured timeout.
	if d := time.Since(start); d < translator.ExtProcMessageTimeout-100*time.Millisecond {
		t.Fatalf("answered after %s, before ext_proc's message timeout: not the hung path", d)
	}
	t.Log(e.Error.Message)
	if n := fake.RequestCount(); n != 0 {
		t.Fatalf("the provider was reached %d times without ext_proc", n)
	}
}

// TestHeadersOverTheLimit: request headers over the gateway's limit (60 KiB, 100 headers) get a
// JSON 431 headers_too_large over HTTP/1.1 and HTTP/2, not a dropped connection; so do HTTP/1.1
// headers over Envoy's own codec limit (256 KiB). Just under the limit is served.
func TestHeadersOverTheLimit(t *testing.T) {
	t.Parallel()
	g, fake := startWithFake(t, fakeupstream.Options{})
	key := g.newKey("acme")
	h1 := &http.Client{Transport: &http.Transport{}}
	h2tr := &http.Transport{Protocols: new(http.Protocols)}
	h2tr.Protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: h2tr}
	many := func(req *http.Request) {
		for i := range 120 {
			req.Header.Set(fmt.Sprintf("x-h%d", i), "v")
		}
	}
	big := func(n int) func(*http.Request) {
		return func(req *http.Request) { req.Header.Set("x-big", strings.Repeat("a", n)) }
	}
	cases := []struct {
		name   string
		client *http.Client
		proto  string
		set    func(*http.Request)
		status int
	}{
		{"h1 just under", h1, "HTTP/1.1", big(55 << 10), 200},
		{"h2 just under", h2, "HTTP/2.0", big(55 << 10), 200},
		{"h1 over", h1, "HTTP/1.1", big(61 << 10), 431},
		{"h2 over", h2, "HTTP/2.0", big(61 << 10), 431},
		{"h1 many", h1, "HTTP/1.1", many, 431},
		{"h2 many", h2, "HTTP/2.0", many, 431},
		{"h2 far over", h2, "HTTP/2.0", big(200 << 10), 431},
		{"h1 over the codec", h1, "HTTP/1.1", big(300 << 10), 431},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, g.BaseURL+"/chat/completions", strings.NewReader(hiBody))
			req.Header.Set("authorization", "Bearer "+key)
			req.Header.Set("content-type", "application/json")
			c.set(req)
			before := fake.RequestCount()
			resp, err := c.client.Do(req)
			if err != nil {
				t.Fatalf("no HTTP answer: %v", err)
			}
			if resp.Proto != c.proto {
				t.Fatalf("answered over %s, want %s", resp.Proto, c.proto)
			}
			if c.status == 200 {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				return
			}
			if c.name == "h1 over the codec" {
				// Envoy's parser stops before x-request-id exists: no id either side.
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 431 || !strings.Contains(string(raw), `"code":"headers_too_large"`) {
					t.Fatalf("%d %s", resp.StatusCode, raw)
				}
				return
			}
			e := wantError(t, resp, c.status, translator.CodeHeadersTooLarge)
			t.Log(e.Error.Message)
			if fake.RequestCount() != before {
				t.Fatal("the request reached the provider")
			}
		})
	}
}
