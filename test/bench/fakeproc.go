package main

// The fake provider in a process of its own: the bench's own binary run again with
// fakeChildEnv set serves fakeupstream and nothing else, so the saturation curve reads the
// provider's CPU apart from the load generator's (elsewhere the fake shares the bench's process).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// fakeChildEnv holds the chunk delay of the fake a child process serves.
const fakeChildEnv = "TOLLWAY_BENCH_FAKE_CHILD"

// serveFakeChild is main for the child: it serves the fake, writes "URL ADDR" on a line to
// stdout and stops when its stdin closes (the parent ended, however it ended).
func serveFakeChild(delay string) error {
	d, err := time.ParseDuration(delay)
	if err != nil {
		return fmt.Errorf("%s: %w", fakeChildEnv, err)
	}
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: providerKey, ChunkDelay: d, NoRecord: true})
	if err != nil {
		return err
	}
	defer fake.Close()
	fmt.Printf("%s %s\n", fake.URL(), fake.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// fakeProc is a fake provider running in a child process.
type fakeProc struct {
	cmd       *exec.Cmd
	stdin     io.Closer
	url, addr string
}

func (f *fakeProc) pid() int { return f.cmd.Process.Pid }

// startFakeProc starts the child and waits (at most 10 s) for its address.
func startFakeProc(chunkDelay time.Duration) (*fakeProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fakeChildEnv+"="+chunkDelay.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &fakeProc{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if u, a, ok := strings.Cut(strings.TrimSpace(s), " "); ok {
			f.url, f.addr = u, a
			return f, nil
		}
		f.stop()
		return nil, fmt.Errorf("fake provider process: unexpected first line %q", s)
	case <-time.After(10 * time.Second):
		f.stop()
		return nil, errors.New("fake provider process: no address within 10s")
	}
}

// stop closes the child's stdin and waits for it, killing it after 5 s.
func (f *fakeProc) stop() {
	f.stdin.Close()
	done := make(chan struct{})
	go func() { f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		f.cmd.Process.Kill()
		<-done
	}
}
