package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machine describes where the numbers come from; they mean little without it.
func machine(envoyBin string) string {
	cpu := "unknown"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	ev := "unknown"
	if out, err := exec.Command(envoyBin, "--version").Output(); err == nil {
		ev = strings.TrimSpace(string(out))
		if _, v, ok := strings.Cut(ev, "version: "); ok {
			ev = v
		}
	}
	return fmt.Sprintf("machine: nproc=%d GOMAXPROCS=%d cpu=%q kernel=%s\ngo: %s %s/%s\nenvoy: %s (%s)",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), cpu, strings.TrimSpace(string(kernel)),
		runtime.Version(), runtime.GOOS, runtime.GOARCH, ev, envoyBin)
}

// mem is a process's memory from /proc/PID/status, in KiB.
type mem struct {
	rss, hwm   int64 // VmRSS, VmHWM (peak)
	anon, file int64 // RssAnon (heap, stacks), RssFile (the binary, mmapped files such as bbolt's)
	pss        int64 // proportional set size (shared pages split among their users); procMem only
}

// memKB reads a process's resident memory, in KiB.
func memKB(pid int) (m mem, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			m.rss = n
		case "VmHWM":
			m.hwm = n
		case "RssAnon":
			m.anon = n
		case "RssFile":
			m.file = n
		}
	}
	return m, nil
}

// clockTick is USER_HZ, 100 on every Linux the bench runs on (getconf CLK_TCK).
const clockTick = 10 * time.Millisecond

// cpuTime is the user+system CPU a whole process (all threads) has used so far.
func cpuTime(pid int) time.Duration { return ticks(statFields(pid), 11) } // utime, stime

// ticks is the sum of the two clock-tick fields of a stat line from f[i] on.
func ticks(f []string, i int) time.Duration {
	if len(f) < i+2 {
		return 0
	}
	a, _ := strconv.ParseInt(f[i], 10, 64)
	b, _ := strconv.ParseInt(f[i+1], 10, 64)
	return time.Duration(a+b) * clockTick
}

// statFields are /proc/PID/stat's fields after the parenthesised command name (state first:
// field 3 of proc(5) is [0]); nil when the process is gone.
func statFields(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(raw)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// treeCPU is a process's CPU with its children's: the live ones' and what the children it
// reaped used (cutime, cstime): a PostgreSQL server and its backends, whose sessions of their
// own put each in a process group of its own.
func treeCPU(pid int) time.Duration {
	f := statFields(pid)
	sum := ticks(f, 11) + ticks(f, 13) // its own, its reaped children's (cutime, cstime)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cf := statFields(child); len(cf) > 1 && cf[1] == strconv.Itoa(pid) {
			sum += cpuTime(child)
		}
	}
	return sum
}

// proc is a process whose CPU use is charged per request.
// A negative pid, as kill(2) takes it, names the process group -pid: its processes are summed
// (LiteLLM's proxy and its workers).
type proc struct {
	name string
	pid  int
}

func cpuSnapshot(ps []proc) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		out[i] = procCPU(p)
	}
	return out
}

// groupPIDs lists the processes of process group pgid (a LiteLLM proxy and its workers).
func groupPIDs(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(raw)
		// After ") ": state, ppid, pgrp.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procCPU is a proc's CPU so far: its whole process group's for a negative pid.
func procCPU(p proc) time.Duration {
	if p.pid >= 0 {
		return cpuTime(p.pid)
	}
	var sum time.Duration
	for _, pid := range groupPIDs(-p.pid) {
		sum += cpuTime(pid)
	}
	return sum
}

// procMem is a proc's memory: summed over its process group for a negative pid (pages the
// workers share with their parent after fork count once per process: an upper bound).
func procMem(p proc) (mem, error) {
	if p.pid >= 0 {
		m, err := memKB(p.pid)
		m.pss = pssKB(p.pid)
		return m, err
	}
	var sum mem
	pids := groupPIDs(-p.pid)
	if len(pids) == 0 {
		return sum, fmt.Errorf("process group %d: no processes", -p.pid)
	}
	for _, pid := range pids {
		m, err := memKB(pid)
		if err != nil {
			continue // a worker that just exited
		}
		sum.rss, sum.hwm, sum.anon, sum.file = sum.rss+m.rss, sum.hwm+m.hwm, sum.anon+m.anon, sum.file+m.file
		sum.pss += pssKB(pid)
	}
	return sum, nil
}

// pssKB is a process's proportional set size: forked workers share their parent's pages, which
// VmRSS counts in full in each.
func pssKB(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// machineLine is machine() on one line, repeated under every table's title: a table pasted
// elsewhere keeps what it was measured on.
func machineLine(envoyBin string) string {
	s := strings.ReplaceAll(machine(envoyBin), "\n", "; ")
	if i := strings.LastIndex(s, " ("); i > 0 && strings.HasSuffix(s, ")") {
		s = s[:i] // the Envoy binary's path
	}
	return "   [" + s + "]"
}

// tableWriter copies its writes, adding line after every line that starts a table ("== ").
type tableWriter struct {
	w    io.Writer
	line string
	buf  []byte
}

func (t *tableWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l := t.buf[:i+1]
		if _, err := t.w.Write(l); err != nil {
			return 0, err
		}
		if bytes.HasPrefix(l, []byte("== ")) {
			fmt.Fprintln(t.w, t.line)
		}
		t.buf = t.buf[i+1:]
	}
}

// flush writes what is left of an unfinished last line.
func (t *tableWriter) flush() {
	t.w.Write(t.buf)
	t.buf = nil
}
