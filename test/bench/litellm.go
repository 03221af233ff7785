package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tollway/tollway/test/harness"
)

// LiteLLM's proxy as a peer path (-scenarios peers): the same fake provider behind LiteLLM's
// OpenAI-compatible proxy, so the two gateways' added latency and CPU are measured in one run
// on one machine. `make bench-deps` installs the pinned version into tools/litellm.

const litellmMasterKey = "sk-litellm-bench-master"

// litellmConfig: one model on the fake, no database (so no virtual keys: the master key is the
// only credential LiteLLM checks without one), nothing that would reach the internet.
const litellmConfig = `model_list:
  - model_name: %s
    litellm_params:
      model: openai/fake-llama-3
      api_base: %s
      api_key: %s
litellm_settings:
  disable_hf_tokenizer_download: true
  telemetry: false
  set_verbose: false
  suppress_debug_info: true
  request_timeout: 30
general_settings:
  master_key: %s
  disable_spend_logs: true
  disable_reset_budget: true
`

// litellmEnv keeps LiteLLM offline: the cost map bundled with the package instead of a
// download, no Hugging Face hub, no telemetry.
var litellmEnv = []string{
	"LITELLM_LOCAL_MODEL_COST_MAP=True",
	"HF_HUB_OFFLINE=1",
	"TRANSFORMERS_OFFLINE=1",
	"LITELLM_TELEMETRY=False",
	"LITELLM_LOG=ERROR",
	"DISABLE_ADMIN_UI=True",
	"NO_DOCS=True",
}

// litellmProxy is a running `litellm` proxy, started in its own process group: with more than
// one worker, uvicorn forks, and CPU and memory are summed over the group's processes.
type litellmProxy struct {
	cmd     *exec.Cmd
	baseURL string
	logs    *harness.SyncBuffer
	exited  chan struct{}
}

// findLiteLLM: -litellm, else $TOLLWAY_LITELLM, else tools/litellm/bin/litellm.
func findLiteLLM(flagBin string) (string, error) {
	bin := cmpStr(flagBin, cmpStr(os.Getenv("TOLLWAY_LITELLM"), "tools/litellm/bin/litellm"))
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("litellm: %w (run `make bench-deps` or pass -litellm)", err)
	}
	return abs, nil
}

func startLiteLLM(ctx context.Context, bin, dir, fakeURL string, workers int) (*litellmProxy, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(addr, ":")
	cfg := filepath.Join(dir, "litellm.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, litellmConfig, modelID, fakeURL, providerKey, litellmMasterKey), 0o600); err != nil {
		return nil, err
	}
	l := &litellmProxy{baseURL: "http://" + addr + "/v1", logs: &harness.SyncBuffer{}, exited: make(chan struct{})}
	l.cmd = exec.Command(bin, "--config", cfg, "--host", host, "--port", port, "--num_workers", strconv.Itoa(workers))
	l.cmd.Dir = dir
	// No DATABASE_URL: a stray one in the environment would make it connect to a database.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "DATABASE_URL=") })
	l.cmd.Env = append(env, append(litellmEnv, "HOME="+dir, "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))...)
	l.cmd.Stdout, l.cmd.Stderr = l.logs, l.logs
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := l.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { l.cmd.Wait(); close(l.exited) }()
	if err := l.waitReady(ctx, 180*time.Second); err != nil {
		l.stop()
		return nil, fmt.Errorf("litellm: %w\n%s", err, tail(l.logs.String(), 3000))
	}
	return l, nil
}

// waitReady polls the unauthenticated liveness endpoint; LiteLLM imports for many seconds.
func (l *litellmProxy) waitReady(ctx context.Context, limit time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second}
	url := strings.TrimSuffix(l.baseURL, "/v1") + "/health/liveliness"
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.exited:
			return errors.New("exited before it was ready")
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s", limit)
}

func (l *litellmProxy) pid() int { return l.cmd.Process.Pid }

// stop ends the whole process group: SIGTERM, then SIGKILL after 10 s.
func (l *litellmProxy) stop() {
	pgid := l.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-l.exited
	}
	syscall.Kill(-pgid, syscall.SIGKILL) // workers that outlived their parent
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
