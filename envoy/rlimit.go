package envoy

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// RaiseFileLimit lifts this process's soft RLIMIT_NOFILE to its hard limit, for Envoy to
// inherit. Go raises its own soft limit at start-up but restores the original (often 1,024)
// for the processes it starts; an explicit Setrlimit makes children inherit the raised one.
// Envoy 1.40 also raises its own soft limit to the hard one; older builds do not.
func RaiseFileLimit() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("envoy: read RLIMIT_NOFILE: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("envoy: raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return nil
}

// FileLimit is the soft RLIMIT_NOFILE the running Envoy has (from /proc/<pid>/limits): every
// open request costs it a client and often a provider connection.
func (p *Process) FileLimit() (uint64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/limits")
	if err != nil {
		return 0, fmt.Errorf("envoy: file limit: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if f[0] == "unlimited" {
					return ^uint64(0), nil
				}
				return strconv.ParseUint(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("envoy: no open files limit in /proc/%d/limits", p.Pid())
}
