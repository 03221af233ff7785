package harness

// The offline x402 test bed (test/x402: a local chain, an EIP-3009 token, Permit2, the upto
// proxy and a real facilitator) and its reference clients, for the Go tests.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Bed is a running test bed: testbed.mjs's JSON line (test/x402/README.md lists every field).
type Bed struct {
	RPCURL             string `json:"rpc_url"`
	Network            string `json:"network"`
	Asset              string `json:"asset"`
	AssetName          string `json:"asset_name"`
	AssetVersion       string `json:"asset_version"`
	AssetDecimals      int    `json:"asset_decimals"`
	PayerKey           string `json:"payer_key"`
	PayerAddress       string `json:"payer_address"`
	PayTo              string `json:"pay_to"`
	FacilitatorURL     string `json:"facilitator_url"`
	FacilitatorAddress string `json:"facilitator_address"`

	Dir  string      // test/x402
	Logs *SyncBuffer // the bed's stderr
	cmd  *exec.Cmd
	stop io.Closer
}

// BedDir finds test/x402 from a test's working directory (a package directory of the repo).
func BedDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 6 {
		if _, err := os.Stat(filepath.Join(dir, "test", "x402", "testbed.mjs")); err == nil {
			return filepath.Join(dir, "test", "x402"), nil
		}
		dir = filepath.Dir(dir)
	}
	return "", errors.New("test/x402 not found above the working directory")
}

// StartBed starts testbed.mjs with args and waits (at most 60 s) for its JSON line. It needs
// Node and `npm ci` in test/x402 (make deps); the error says which is missing.
func StartBed(args ...string) (*Bed, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node is not on PATH: the x402 tests need Node 20 and `make deps`")
	}
	dir, err := BedDir()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@x402", "core")); err != nil {
		return nil, fmt.Errorf("the x402 test bed is not installed: run `make deps` (or `cd %s && npm ci`)", dir)
	}
	cmd := exec.Command(node, append([]string{"testbed.mjs", "--stdin", "watch"}, args...)...)
	cmd.Dir = dir
	b := &Bed{Dir: dir, Logs: &SyncBuffer{}, cmd: cmd}
	cmd.Stderr = b.Logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	b.stop = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		if !ok || json.Unmarshal([]byte(l), b) != nil || b.FacilitatorURL == "" {
			b.Stop()
			return nil, fmt.Errorf("the x402 test bed did not start (line %q); its log:\n%s", l, b.Logs.String())
		}
	case <-time.After(60 * time.Second):
		b.Stop()
		return nil, fmt.Errorf("the x402 test bed was not ready within 60 s; its log:\n%s", b.Logs.String())
	}
	return b, nil
}

// Stop ends the bed (closing its stdin stops anvil and the facilitator), at most 15 s.
func (b *Bed) Stop() {
	_ = b.stop.Close()
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = b.cmd.Process.Kill() // anvil has a parent-death signal
		<-done
	}
}
