// Package harness starts and drives a real `tollway run` process for the end-to-end tests and the
// benchmark: one implementation of "write a config, start, wait for ready, create a key, stop".
package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr() (string, error) {
	addrs, err := FreeAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// FreeAddrs returns n distinct loopback host:ports that were free a moment ago (held open
// together while chosen, so the kernel cannot hand out one of them twice).
func FreeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// SyncBuffer collects a process's output for assertions while it runs.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 4<<20 { // bounded: keep the start, it explains start-up failures
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Options say how to start a gateway.
type Options struct {
	Bin      string   // the tollway binary
	EnvoyBin string   // passed as ENVOY_BIN
	Dir      string   // working directory; the config and store go here
	Body     string   // the providers: and models: sections of the config
	Env      []string // extra environment, e.g. provider keys
	Drain    time.Duration
	// RunArgs, when set, replace `--config <file with Body>`, e.g. {"--demo"} or {} for the
	// embedded default: then the listen addresses, store path and drain time reach tollway as
	// TOLLWAY_* environment overrides, and the CLI finds the admin API with --admin.
	RunArgs []string
	// Args are appended to `run --config <file>`, e.g. {"--envoy", "external"}.
	Args []string
	// OwnGroup starts tollway in a process group of its own, as a shell does a foreground job,
	// so a test can signal the whole group as a terminal's Ctrl-C does.
	OwnGroup bool
	// SoftNoFile, when set, starts tollway with that soft RLIMIT_NOFILE (as a login shell's
	// default of 1,024 would), to show what Envoy inherits.
	SoftNoFile uint64
}

// Gateway is a running `tollway run`.
type Gateway struct {
	Bin      string
	CfgPath  string // "" when started with RunArgs
	Public   string
	Admin    string
	BaseURL  string // http://<public>/v1
	EnvoyPID int
	Logs     *SyncBuffer // stderr, and stdout lines prefixed "stdout: "

	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
}

// Start writes a config with free listen ports, starts tollway and waits for its ready line. A
// port found free can be taken before tollway binds it (another test's connection gets it as its
// source port): then it starts again on new ports, up to three times.
func Start(ctx context.Context, o Options) (*Gateway, error) {
	for attempt := 1; ; attempt++ {
		g, err := start(ctx, o)
		if err == nil || attempt == 3 || !portTaken(err) {
			return g, err
		}
	}
}

// portTaken reports a start that failed because a listen port was no longer free: tollway's own
// bind, or Envoy refusing a listener on an address in use.
func portTaken(err error) bool {
	return strings.Contains(err.Error(), "address already in use") || strings.Contains(err.Error(), "duplicate address")
}

func start(ctx context.Context, o Options) (*Gateway, error) {
	addrs, err := FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	public, admin := addrs[0], addrs[1]
	if o.Drain == 0 {
		o.Drain = 5 * time.Second
	}
	g := &Gateway{Bin: o.Bin, Public: public, Admin: admin,
		BaseURL: "http://" + public + "/v1", Logs: &SyncBuffer{}, exited: make(chan struct{})}
	store := filepath.Join(o.Dir, "tollway.db")
	env := append(os.Environ(), "ENVOY_BIN="+o.EnvoyBin)
	if o.RunArgs != nil {
		g.cmd = exec.Command(o.Bin, append([]string{"run"}, o.RunArgs...)...)
		env = append(env, "TOLLWAY_LISTEN_PUBLIC="+public, "TOLLWAY_LISTEN_ADMIN="+admin,
			"TOLLWAY_STORE_PATH="+store, "TOLLWAY_ENVOY_DRAIN_TIMEOUT="+o.Drain.String())
	} else {
		g.CfgPath = filepath.Join(o.Dir, "tollway.yaml")
		cfg := fmt.Sprintf("listen: {public: %s, admin: %s}\nstore: {path: %s}\nenvoy: {drain_timeout: %s}\n%s",
			public, admin, store, o.Drain, o.Body)
		if err := os.WriteFile(g.CfgPath, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		g.cmd = exec.Command(o.Bin, append([]string{"run", "--config", g.CfgPath}, o.Args...)...)
	}
	if o.SoftNoFile > 0 {
		// The shell lowers its soft limit and becomes tollway (exec): same pid, same group.
		g.cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -Sn %d && exec "$0" "$@"`, o.SoftNoFile), g.cmd.Path}, g.cmd.Args[1:]...)...)
	}
	g.cmd.Dir = o.Dir
	g.cmd.Env = append(env, o.Env...)
	// If the caller dies without cleaning up, tollway drains and takes its Envoy with it.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: o.OwnGroup}
	g.cmd.Stderr = g.Logs
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(g.Logs, "stdout: "+line)
			if strings.HasPrefix(line, "tollway ready") {
				ready <- line
			}
		}
	}()
	go func() {
		g.exitErr = g.cmd.Wait()
		close(g.exited)
	}()
	select {
	case line := <-ready:
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "envoy_pid="); ok {
				g.EnvoyPID, _ = strconv.Atoi(v)
			}
		}
		return g, nil
	case <-g.exited:
		return nil, fmt.Errorf("tollway exited before ready: %v\n%s", g.exitErr, g.Logs.String())
	case <-ctx.Done():
		g.Stop()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		g.Stop()
		return nil, fmt.Errorf("tollway not ready after 60s:\n%s", g.Logs.String())
	}
}

// Exited is closed when the process has ended; ExitErr then says how.
func (g *Gateway) Exited() <-chan struct{} { return g.exited }

// ExitErr is the process's exit error (nil for exit 0); valid after Exited.
func (g *Gateway) ExitErr() error { return g.exitErr }

// Pid is the tollway process id.
func (g *Gateway) Pid() int { return g.cmd.Process.Pid }

// Signal sends sig to the tollway process.
func (g *Gateway) Signal(sig os.Signal) error { return g.cmd.Process.Signal(sig) }

// SignalGroup sends sig to tollway's whole process group (Options.OwnGroup), as a terminal's
// Ctrl-C does.
func (g *Gateway) SignalGroup(sig syscall.Signal) error { return syscall.Kill(-g.cmd.Process.Pid, sig) }

// Kill ends tollway with SIGKILL, as a crash or an out-of-memory kill would, and waits for it.
func (g *Gateway) Kill() {
	_ = g.cmd.Process.Kill()
	<-g.exited
}

// Stop sends SIGTERM (tollway drains and stops its Envoy) and kills it if that takes too long.
func (g *Gateway) Stop() {
	select {
	case <-g.exited:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

// CLI runs a tollway subcommand against this gateway and returns its stdout.
func (g *Gateway) CLI(ctx context.Context, args ...string) (string, error) {
	where := []string{"--config", g.CfgPath}
	if g.CfgPath == "" {
		where = []string{"--admin", "http://" + g.Admin}
	}
	cmd := exec.CommandContext(ctx, g.Bin, append(args, where...)...)
	// A race-detector build sleeps a second before it exits (to catch races at exit), which
	// made every CLI call in the end-to-end tests cost a second; a command's races are still
	// reported as they happen.
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("tollway %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// NewAccount creates an account with credits (USD, a decimal string) through the CLI.
func (g *Gateway) NewAccount(ctx context.Context, account, credits string) error {
	_, err := g.CLI(ctx, "accounts", "create", account, "--credits", credits)
	return err
}

// NewKey creates an API key through the CLI, as an operator would, creating its account (with
// no credits) if needed. Extra flags (--monthly-limit, --models) pass through.
func (g *Gateway) NewKey(ctx context.Context, account string, flags ...string) (string, error) {
	if err := g.NewAccount(ctx, account, "0"); err != nil && !strings.Contains(err.Error(), "already exists") {
		return "", err
	}
	out, err := g.CLI(ctx, append([]string{"keys", "create", "--account", account}, flags...)...)
	if err != nil {
		return "", err
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "ale-") {
		return "", errors.New("keys create printed " + strconv.Quote(out) + ", want an ale- key")
	}
	return key, nil
}
