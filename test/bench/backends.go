package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/harness"
)

// plainBootstrap is "Envoy alone": one listener, HCM, router, one static HTTP/1.1 cluster to the
// fake, no route timeout. The cluster options mirror Tollway's plaintext provider clusters so
// the only difference left is ext_proc and its routing.
const plainBootstrap = `admin:
  address: {pipe: {path: %q}}
static_resources:
  listeners:
  - name: bench
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          codec_type: AUTO
          route_config:
            name: bench
            virtual_hosts:
            - name: fake
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: fake, timeout: 0s}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: fake
    type: STATIC
    connect_timeout: 5s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options: {idle_timeout: 3600s}
        %s
%s    load_assignment:
      cluster_name: fake
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}
`

// The plain Envoy's cluster to a plaintext fake (HTTP/1.1) or to one behind TLS (h2 or
// HTTP/1.1 by ALPN, the CA in a file), as Tollway's provider clusters are.
const (
	plainHTTP1    = "explicit_http_config: {http_protocol_options: {}}"
	plainALPN     = "auto_config: {http2_protocol_options: {}}"
	plainTLSBlock = `    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          alpn_protocols: [h2, http/1.1]
          validation_context:
            trusted_ca: {filename: %q}
            match_typed_subject_alt_names: [{san_type: IP_ADDRESS, matcher: {exact: "127.0.0.1"}}]
`
)

// plainEnvoy is a running "Envoy alone".
type plainEnvoy struct {
	proc    *envoy.Process
	baseURL string
	admin   string // unix socket of its admin API
	logs    *harness.SyncBuffer
}

// startPlainEnvoy launches the same binary with the same flags as Tollway's launcher does.
func startPlainEnvoy(ctx context.Context, bin, dir, fakeAddr string) (*plainEnvoy, error) {
	return startPlainEnvoyTLS(ctx, bin, dir, fakeAddr, "")
}

// startPlainEnvoyTLS is startPlainEnvoy whose fake is behind TLS with the CA in caFile ("": plaintext).
func startPlainEnvoyTLS(ctx context.Context, bin, dir, fakeAddr, caFile string) (*plainEnvoy, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	_, fakePort, _ := net.SplitHostPort(fakeAddr)
	p, _ := strconv.Atoi(port)
	fp, _ := strconv.Atoi(fakePort)
	admin := filepath.Join(dir, "envoy-admin.sock")
	boot := filepath.Join(dir, "envoy.yaml")
	proto, socket := plainHTTP1, ""
	if caFile != "" {
		proto, socket = plainALPN, fmt.Sprintf(plainTLSBlock, caFile)
	}
	if err := os.WriteFile(boot, fmt.Appendf(nil, plainBootstrap, admin, p, proto, socket, fp), 0o600); err != nil {
		return nil, err
	}
	e := &plainEnvoy{baseURL: "http://" + addr + "/v1", admin: admin, logs: &harness.SyncBuffer{}}
	log := slog.New(slog.NewTextHandler(e.logs, nil))
	e.proc, err = envoy.Start(log, envoy.LaunchConfig{Binary: bin, BootstrapPath: boot, AdminSocket: admin, DrainTime: time.Second}, e.logs)
	if err != nil {
		return nil, err
	}
	if err := e.proc.WaitReady(ctx, 30*time.Second, func() error { return nil }); err != nil {
		e.proc.Stop()
		return nil, fmt.Errorf("plain envoy: %w\n%s", err, e.logs.String())
	}
	return e, nil
}

// tollway is a running `tollway run`.
type tollway struct {
	*harness.Gateway
	baseURL string
	billing bool
}

// tollwayBody is the same catalog for both Tollway runs: one priced model on the fake. Only the
// billing block differs, so "billing on - billing off" is admission plus metering and nothing else.
const tollwayBody = `providers:
  - {name: fake, type: openai, base_url: %s, api_key: "${BENCH_PROVIDER_KEY}"}
models:
  - id: %s
    providers: [{provider: fake, model: fake-llama-3}]
    supported_sampling_parameters: [temperature, top_p, max_tokens]
    pricing: {prompt: "0.000001", completion: "0.000002"}
billing: {enabled: %t}
`

// benchAccount holds the credits every billed bench request draws on: far more than a run can
// spend (a request costs about $0.0001), so no request is ever refused for money.
const (
	benchAccount = "bench"
	benchCredits = "1000000"
)

// startTollway starts `tollway run` whose one provider is the fake, with billing on or off.
func startTollway(ctx context.Context, bin, envoyBin, dir, fakeURL string, billing bool, extraEnv []string) (*tollway, error) {
	return startTollwayConfig(ctx, bin, envoyBin, dir, fmt.Sprintf(tollwayBody, fakeURL, modelID, billing), billing, extraEnv)
}

// startTollwayConfig starts `tollway run` on the configuration body (tollwayBody, varied).
func startTollwayConfig(ctx context.Context, bin, envoyBin, dir, body string, billing bool, extraEnv []string) (*tollway, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	g, err := harness.Start(ctx, harness.Options{
		Bin: bin, EnvoyBin: envoyBin, Dir: dir, Drain: 2 * time.Second,
		Body: body,
		Env:  append([]string{"BENCH_PROVIDER_KEY=" + providerKey}, extraEnv...),
	})
	if err != nil {
		return nil, err
	}
	return &tollway{Gateway: g, baseURL: g.BaseURL, billing: billing}, nil
}

// startTollwayTarget starts Tollway as startTollway does, funds the bench account and returns
// the target named name that sends with its key (its client is the caller's to set). The caller
// stops tw.
func startTollwayTarget(ctx context.Context, bin, envoyBin, dir, fakeURL string, billing bool, extraEnv []string, name string) (*tollway, *target, error) {
	tw, err := startTollway(ctx, bin, envoyBin, dir, fakeURL, billing, extraEnv)
	if err != nil {
		return nil, nil, err
	}
	key, err := tw.newKey(ctx)
	if err != nil {
		tw.stop()
		return nil, nil, err
	}
	return tw, &target{name: name, baseURL: tw.baseURL, auth: key, tw: tw}, nil
}

// newKey funds the bench account first (NewKey would create it with no credits), then creates
// a key on it.
func (t *tollway) newKey(ctx context.Context) (string, error) {
	if err := t.NewAccount(ctx, benchAccount, benchCredits); err != nil {
		return "", err
	}
	return t.NewKey(ctx, benchAccount)
}

// usageRecords is the number of durable usage records: the admin API sums the store's daily
// aggregates, which Settle writes in the same transaction as each record.
func (t *tollway) usageRecords(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Admin+"/admin/v1/usage", nil)
	if err != nil {
		return 0, err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return 0, fmt.Errorf("GET /admin/v1/usage: %s: %s", resp.Status, b)
	}
	var sum struct {
		Requests *int64 `json:"requests"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&sum); err != nil {
		return 0, fmt.Errorf("GET /admin/v1/usage: %w", err)
	}
	if sum.Requests == nil {
		return 0, errors.New(`GET /admin/v1/usage: no "requests" in the answer`)
	}
	return *sum.Requests, nil
}

var adminHTTP = &http.Client{Timeout: 5 * time.Second}

func (t *tollway) stop() { t.Stop() }

// envoyAdmin finds the admin socket of Tollway's Envoy next to the bootstrap it was started
// with (-c DIR/bootstrap.json); "" if that layout changes.
func (t *tollway) envoyAdmin() string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", t.EnvoyPID))
	if err != nil {
		return ""
	}
	args := strings.Split(string(raw), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-c" {
			sock := filepath.Join(filepath.Dir(args[i+1]), "envoy-admin.sock")
			if _, err := os.Stat(sock); err == nil {
				return sock
			}
		}
	}
	return ""
}

// unixClient talks HTTP to an Envoy admin socket.
func unixClient(sock string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, // a few reads per scenario; leave no idle connection behind
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

// adminGet reads one admin page; the host part of the URL is ignored.
func adminGet(c *http.Client, path string) (string, error) {
	resp, err := c.Get("http://envoy" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("envoy admin %s: %s", path, resp.Status)
	}
	return string(b), err
}
