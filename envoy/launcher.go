package envoy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tollway/tollway/xds/ir"
)

// Process is a running Envoy child.
type Process struct {
	log   *slog.Logger
	cmd   *exec.Cmd
	admin *http.Client
	done  chan struct{}
	err   error
	// stopping is set when Tollway starts stopping Envoy: what Envoy's own exit makes it log is
	// expected from then on (stopNoise).
	stopping *atomic.Bool
}

// LaunchConfig says how to start Envoy.
type LaunchConfig struct {
	Binary        string
	BootstrapPath string
	AdminSocket   string // the unix socket of Envoy's admin API (from the bootstrap)
	// Concurrency is --concurrency, Envoy's worker threads; 0 leaves Envoy's default (every
	// hardware thread of the host, whatever the container's CPU limit).
	Concurrency int
	LogLevel    string
	DrainTime   time.Duration
	// FullLog prints Envoy's multi-line messages whole; otherwise only their first line, since
	// a rejected resource is logged with its whole protobuf dump (thousands of lines).
	FullLog bool
	// AccessLog receives Envoy's stdout as it is: the access log's JSON lines (Envoy logs on
	// stderr). Nil: stdout goes with the log.
	AccessLog io.Writer
}

// args is Envoy's command line.
func args(c LaunchConfig, level string, drainSeconds int) []string {
	a := []string{
		"-c", c.BootstrapPath,
		"--log-level", level,
		"--disable-hot-restart", // several gateways (and tests) may run side by side
		"--drain-time-s", strconv.Itoa(drainSeconds),
		"--drain-strategy", "immediate",
	}
	if c.Concurrency > 0 {
		a = append(a, "--concurrency", strconv.Itoa(c.Concurrency))
	}
	return a
}

// Start launches Envoy. Its log goes to logOut line by line, prefixed so it is told apart.
func Start(log *slog.Logger, c LaunchConfig, logOut io.Writer) (*Process, error) {
	level := c.LogLevel
	if level == "" {
		level = "warning"
	}
	drain := int(c.DrainTime / time.Second)
	if drain < 1 {
		drain = 1
	}
	cmd := exec.Command(c.Binary, args(c, level, drain)...)
	// Envoy gets its own process group, so a terminal's Ctrl-C (sent to the foreground group)
	// reaches only Tollway, which drains Envoy; and it must not outlive us if we are killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if c.AccessLog != nil {
		cmd.Stdout = &lineWriter{out: c.AccessLog}
	}
	stopping := new(atomic.Bool)
	go forwardLog(pr, logOut, c.FullLog, stopping)
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("envoy: start %s: %w", c.Binary, err)
	}
	p := &Process{
		log: log,
		cmd: cmd,
		admin: &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", c.AdminSocket)
		}}},
		done:     make(chan struct{}),
		stopping: stopping,
	}
	go func() {
		err := cmd.Wait()
		pw.Close()
		if err == nil {
			err = errors.New("envoy exited")
		}
		p.err = fmt.Errorf("envoy: %w", err)
		close(p.done)
	}()
	return p, nil
}

// stopNoise is what Envoy logs as a warning when it exits because Tollway stopped it: its own
// shutdown resets the connection of its xDS stream (gRPC status 13, connection_termination),
// which Envoy reports like a control plane that went away. Tollway stops Envoy before its xDS
// server; the line says nothing about Tollway.
const stopNoise = "gRPC config stream to " + ir.XDSCluster + " closed"

// forwardLog copies Envoy's log to out line by line, prefixed so it is told apart. A record
// starts with "[timestamp]"; the lines after it that do not are its continuation, shown only
// with full (a count of them otherwise). Once stopping is set, stopNoise records are dropped
// unless full.
func forwardLog(r io.Reader, out io.Writer, full bool, stopping *atomic.Bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	inRecord, dropping, hidden := false, false, 0
	flush := func() {
		if hidden > 0 {
			fmt.Fprintf(out, "envoy:   (%d more lines of this message; log.level: debug shows them)\n", hidden)
			hidden = 0
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "[") {
			flush()
			inRecord = true
			dropping = !full && stopping.Load() && strings.Contains(line, stopNoise)
		} else if inRecord && (dropping || !full) {
			if !dropping {
				hidden++
			}
			continue
		}
		if !dropping {
			fmt.Fprintf(out, "envoy: %s\n", line)
		}
	}
	flush()
	_, _ = io.Copy(io.Discard, r) // a line over the scanner's limit must not block Envoy
}

// Done is closed when Envoy exits; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is why Envoy exited; valid after Done.
func (p *Process) Err() error { return p.err }

// Pid is the Envoy process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// WaitReady polls Envoy's /ready until it reports LIVE (its listeners are up), Envoy exits, or
// check reports a reason to give up (e.g. Envoy rejected the first configuration).
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		// check first: Envoy goes LIVE even when it rejected part of its first configuration.
		if err := check(); err != nil {
			return err
		}
		if body, code, err := p.adminCall(ctx, http.MethodGet, "/ready"); err == nil && code == http.StatusOK && strings.TrimSpace(body) == "LIVE" {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("envoy exited during start-up: %w", p.err)
		case <-ctx.Done():
			return fmt.Errorf("envoy not ready after %s (is the public port free?)", timeout)
		case <-tick.C:
		}
	}
}

// Stat reads one counter or gauge from Envoy's admin API.
func (p *Process) Stat(ctx context.Context, name string) (int64, error) {
	body, _, err := p.adminCall(ctx, http.MethodGet, "/stats?filter=^"+strings.ReplaceAll(name, ".", `\.`)+"$")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && k == name {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("envoy: stat %s not found", name)
}

// Drain stops accepting new connections, lets in-flight requests (streams included) finish for
// up to timeout, then asks Envoy to exit and waits for it. Cancelling ctx (a second signal)
// ends the wait at once; it returns how many requests were still open then.
func (p *Process) Drain(ctx context.Context, activeGauge string, timeout time.Duration) int64 {
	var open int64
	admin, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if _, _, err := p.adminCall(admin, http.MethodPost, "/drain_listeners?graceful&skip_exit"); err != nil {
		p.log.Warn("envoy drain request failed", "error", err)
	}
	cancel()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := p.Stat(ctx, activeGauge)
		if err != nil || n == 0 {
			open = n
			break
		}
		open = n
		select {
		case <-p.done:
			return open
		case <-ctx.Done():
			p.Stop()
			return open
		case <-time.After(100 * time.Millisecond):
		}
	}
	p.Stop()
	return open
}

// Stop asks Envoy to quit, then kills it if it does not.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, _, err := p.adminCall(ctx, http.MethodPost, "/quitquitquit"); err != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *Process) adminCall(ctx context.Context, method, path string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://envoy"+path, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := p.admin.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b), resp.StatusCode, err
}

func splitHostPort(addr string) (string, uint32) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	n, _ := strconv.ParseUint(port, 10, 16)
	return host, uint32(n)
}

// WaitHealthChecked waits until every host has had its first active health check, so that a
// chain's fallback order is known before traffic arrives (a host pending its first check counts
// as unhealthy, and a retry could then find no healthy priority to move to).
func (p *Process) WaitHealthChecked(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pending, err := p.pendingHealthChecks(ctx)
		if err == nil && pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("envoy: %d hosts still wait for their first health check after %s (err %v)", pending, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *Process) pendingHealthChecks(ctx context.Context) (int, error) {
	clusters, err := p.clusters(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range clusters {
		for _, h := range c.HostStatuses {
			if pending, _ := h.HealthStatus["pending_active_hc"].(bool); pending {
				n++
			}
		}
	}
	return n, nil
}

// clusterStatus is one cluster of Envoy's /clusters?format=json.
type clusterStatus struct {
	Name         string `json:"name"`
	HostStatuses []struct {
		HealthStatus map[string]any `json:"health_status"`
	} `json:"host_statuses"`
}

func (p *Process) clusters(ctx context.Context) ([]clusterStatus, error) {
	body, code, err := p.adminCall(ctx, http.MethodGet, "/clusters?format=json")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("envoy /clusters: HTTP %d", code)
	}
	var out struct {
		ClusterStatuses []clusterStatus `json:"cluster_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		return nil, fmt.Errorf("envoy /clusters: %w", err)
	}
	return out.ClusterStatuses, nil
}

// ClusterHealth reads /clusters: for every cluster, whether at least one of its hosts is
// healthy (not failing active health checks, not ejected by outlier detection). A cluster whose
// name has not resolved to any host counts as unhealthy.
func (p *Process) ClusterHealth(ctx context.Context) (map[string]bool, error) {
	clusters, err := p.clusters(ctx)
	if err != nil {
		return nil, err
	}
	health := make(map[string]bool, len(clusters))
	for _, c := range clusters {
		ok := false
		for _, h := range c.HostStatuses {
			healthy := true
			for k, v := range h.HealthStatus {
				if b, isBool := v.(bool); isBool && b && strings.HasPrefix(k, "failed_") {
					healthy = false
				}
				if k == "eds_health_status" && v != "HEALTHY" {
					healthy = false
				}
			}
			ok = ok || healthy
		}
		health[c.Name] = ok
	}
	return health, nil
}

// lineWriter passes whole lines on, so access log lines from Envoy never interleave with
// another writer's output mid-line.
type lineWriter struct {
	mu  sync.Mutex
	out io.Writer
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if i := bytes.LastIndexByte(w.buf, '\n'); i >= 0 {
		if _, err := w.out.Write(w.buf[:i+1]); err != nil {
			return 0, err
		}
		w.buf = append(w.buf[:0], w.buf[i+1:]...)
	}
	if len(w.buf) > 1<<20 { // a line that long is not a log line: pass it on as it is
		_, _ = w.out.Write(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
