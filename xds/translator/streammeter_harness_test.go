package translator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/harness"
	"github.com/tollway/tollway/xds/translator"
)

// A real Envoy for the stream meter: one listener per lane (the lane's input injected with
// envoy.filters.http.set_metadata, then the filter, then the router) to a Go SSE provider on
// loopback, and an access log printing tollway.meter as JSON on Envoy's stdout (a file access
// log would be flushed every 10 s).

// meterLane is one listener's filter chain.
type meterLane struct {
	name string
	lane map[string]any // the tollway.lane metadata set_metadata injects; nil: none
	lua  string         // the filter's script, "-" the embedded one; "": no filter (Envoy alone)
}

// meterEnvoy is a running Envoy with one listener per lane.
type meterEnvoy struct {
	cmd      *exec.Cmd
	admin    *http.Client        // over the admin API's unix socket
	addr     map[string]string   // lane -> host:port
	access   *harness.SyncBuffer // the access log: Envoy's stdout, one JSON entry a line
	logs     *harness.SyncBuffer
	provider *sseProvider
}

// sseProvider serves the answers the tests script: /s/<id> writes the pieces registered under
// id, each flushed on its own after its delay.
type sseProvider struct {
	srv     *httptest.Server
	mu      sync.Mutex
	answers map[string]*sseAnswer
}

type sseAnswer struct {
	status  int
	ctype   string
	pieces  []string
	delay   time.Duration // before each piece but the first
	holdAt  int           // with hold: the piece index before which the answer waits for it
	hold    chan struct{}
	trailer bool          // the body ends with a trailer
	sized   bool          // the answer says its content-length
	stopped chan struct{} // closed when a request's handler returns (the first one)
	stop    sync.Once
}

func newSSEProvider() *sseProvider {
	p := &sseProvider{answers: map[string]*sseAnswer{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

func (p *sseProvider) add(id string, a *sseAnswer) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if a.ctype == "" {
		a.ctype = "text/event-stream"
	}
	a.stopped = make(chan struct{})
	p.mu.Lock()
	p.answers[id] = a
	p.mu.Unlock()
}

func (p *sseProvider) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	a := p.answers[strings.TrimPrefix(r.URL.Path, "/s/")]
	p.mu.Unlock()
	if a == nil {
		http.Error(w, "no such answer", http.StatusNotFound)
		return
	}
	defer a.stop.Do(func() { close(a.stopped) })
	w.Header().Set("content-type", a.ctype)
	if a.sized {
		w.Header().Set("content-length", strconv.Itoa(len(strings.Join(a.pieces, ""))))
	}
	if a.trailer {
		w.Header().Set("trailer", "x-checksum")
		defer w.Header().Set("x-checksum", "1")
	}
	w.WriteHeader(a.status)
	f := w.(http.Flusher)
	f.Flush()
	for i, s := range a.pieces {
		if a.hold != nil && i == a.holdAt {
			select {
			case <-a.hold:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
		if i > 0 && a.delay > 0 {
			time.Sleep(a.delay)
		}
		if _, err := io.WriteString(w, s); err != nil {
			return
		}
		f.Flush()
	}
}

// luaAny is the filter's typed_config as Envoy's JSON reads it; script replaces the embedded
// script unless it is "-" (the benchmark's variants).
func luaAny(t testing.TB, script string) json.RawMessage {
	cfg := translator.StreamMeter()
	if script != "-" {
		cfg = proto.Clone(cfg).(*luav3.Lua)
		cfg.DefaultSourceCode = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: script}}
	}
	a, err := anypb.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// meterBootstrap is the static bootstrap: every lane's listener, the provider's cluster.
func meterBootstrap(t testing.TB, lanes []meterLane, ports map[string]int, providerPort int, admin string) []byte {
	var listeners []any
	for _, l := range lanes {
		var filters []any
		if l.lane != nil {
			filters = append(filters, map[string]any{
				"name": "envoy.filters.http.set_metadata",
				"typed_config": map[string]any{
					"@type":    "type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config",
					"metadata": []any{map[string]any{"metadata_namespace": translator.StreamMeterLaneNamespace, "value": l.lane}},
				},
			})
		}
		if l.lua != "" {
			filters = append(filters, map[string]any{"name": translator.StreamMeterFilterName, "typed_config": luaAny(t, l.lua)})
		}
		filters = append(filters, map[string]any{"name": "envoy.filters.http.router",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}})
		listeners = append(listeners, map[string]any{
			"name":    l.name,
			"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": ports[l.name]}},
			"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
				"name": "envoy.filters.network.http_connection_manager",
				"typed_config": map[string]any{
					"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
					"stat_prefix": l.name,
					"access_log": []any{map[string]any{
						"name": "envoy.access_loggers.stdout",
						"typed_config": map[string]any{
							"@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
							"log_format": map[string]any{"json_format": map[string]any{
								"id":    "%REQ(x-case)%",
								"meter": "%DYNAMIC_METADATA(" + translator.StreamMeterNamespace + ")%",
								"flags": "%RESPONSE_FLAGS%",
							}},
						},
					}},
					"route_config": map[string]any{"virtual_hosts": []any{map[string]any{
						"name": "provider", "domains": []string{"*"},
						"routes": []any{map[string]any{"match": map[string]any{"prefix": "/"}, "route": map[string]any{"cluster": "provider", "timeout": "0s"}}},
					}}},
					"http_filters": filters,
				},
			}}}},
		})
	}
	b, err := json.Marshal(map[string]any{
		"admin": map[string]any{"address": map[string]any{"pipe": map[string]any{"path": admin}}},
		"static_resources": map[string]any{
			"listeners": listeners,
			"clusters": []any{map[string]any{
				"name": "provider", "type": "STATIC", "connect_timeout": "5s",
				// A provider's trailers reach the filter (a body that ends with them).
				"typed_extension_protocol_options": map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
					"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
					"explicit_http_config": map[string]any{"http_protocol_options": map[string]any{"enable_trailers": true}},
				}},
				"load_assignment": map[string]any{"cluster_name": "provider", "endpoints": []any{map[string]any{"lb_endpoints": []any{
					map[string]any{"endpoint": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": providerPort}}}},
				}}}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startMeterEnvoy runs the real Envoy (envoy.FindBinary) with concurrency workers; it stops with
// the test. It is started here rather than with envoy.Start for one flag: the access log is
// written every 50 ms instead of every 10 s.
func startMeterEnvoy(t testing.TB, lanes []meterLane, concurrency int) *meterEnvoy {
	bin, err := envoy.FindBinary("")
	if err != nil {
		t.Fatalf("the stream meter is tested in the real Envoy: %v", err)
	}
	dir, err := os.MkdirTemp("", "meter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	addrs, err := harness.FreeAddrs(len(lanes))
	if err != nil {
		t.Fatal(err)
	}
	e := &meterEnvoy{addr: map[string]string{}, access: &harness.SyncBuffer{}, logs: &harness.SyncBuffer{}, provider: newSSEProvider()}
	t.Cleanup(e.provider.srv.Close)
	ports := map[string]int{}
	for i, l := range lanes {
		e.addr[l.name] = addrs[i]
		_, p, _ := net.SplitHostPort(addrs[i])
		ports[l.name], _ = strconv.Atoi(p)
	}
	_, pp, _ := net.SplitHostPort(e.provider.srv.Listener.Addr().String())
	providerPort, _ := strconv.Atoi(pp)
	admin := filepath.Join(dir, "admin.sock")
	boot := filepath.Join(dir, "envoy.json")
	if err := os.WriteFile(boot, meterBootstrap(t, lanes, ports, providerPort, admin), 0o600); err != nil {
		t.Fatal(err)
	}
	e.admin = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", admin)
	}}}
	e.cmd = exec.Command(bin, "-c", boot, "--concurrency", strconv.Itoa(concurrency), "--log-level", "warning",
		"--disable-hot-restart", "--file-flush-interval-msec", "50")
	e.cmd.Stdout, e.cmd.Stderr = e.access, e.logs
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = e.cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if body, err := e.adminGet("/ready"); err == nil && strings.TrimSpace(body) == "LIVE" {
			return e
		}
		select {
		case <-exited:
			t.Fatalf("envoy exited: %s", e.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy not ready in 30 s: %s", e.logs.String())
		}
	}
}

// adminGet reads a path of Envoy's admin API.
func (e *meterEnvoy) adminGet(path string) (string, error) {
	res, err := e.admin.Get("http://admin" + path)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("admin %s: %s", path, res.Status)
	}
	return string(b), err
}

// get asks lane's listener for the answer registered as id and returns what the client got.
func (e *meterEnvoy) get(ctx context.Context, lane, id string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.addr[lane]+"/s/"+id, strings.NewReader(`{"stream":true}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-case", id)
	return http.DefaultClient.Do(req)
}

// meterLine is one access log entry.
type meterLine struct {
	ID    string         `json:"id"`
	Meter map[string]any `json:"meter"`
	Flags string         `json:"flags"`
}

// logLine waits for the access log entry of id (Envoy writes it when the stream is gone).
func (e *meterEnvoy) logLine(t testing.TB, id string) meterLine {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(e.access.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l meterLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.ID == id {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log entry for %s in 15 s; envoy log:\n%s", id, e.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// luaErrors is the filter's error counter summed over the lanes.
func (e *meterEnvoy) luaErrors(t testing.TB, lanes []meterLane) int64 {
	var n int64
	for _, l := range lanes {
		if l.lua == "" {
			continue
		}
		name := fmt.Sprintf("http.%s.lua.stream_meter.errors", l.name)
		body, err := e.adminGet("/stats?filter=^" + strings.ReplaceAll(name, ".", `\.`) + "$")
		if err != nil {
			t.Fatalf("reading the filter's error counter: %v", err)
		}
		k, v, ok := strings.Cut(strings.TrimSpace(body), ": ")
		c, err := strconv.ParseInt(v, 10, 64)
		if !ok || k != name || err != nil {
			t.Fatalf("the filter's error counter %s: admin said %q", name, body)
		}
		n += c
	}
	return n
}
