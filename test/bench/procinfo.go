package main

import (
	"bufio"
	"fmt"
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
func cpuTime(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are fields 14 and 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * clockTick
}

// proc is a process whose CPU use is charged per request.
type proc struct {
	name string
	pid  int
}

func cpuSnapshot(ps []proc) []time.Duration {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		out[i] = cpuTime(p.pid)
	}
	return out
}
