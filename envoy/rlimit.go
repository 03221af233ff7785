package envoy

import (
	"fmt"
	"syscall"
)

// RaiseFileLimit lifts this process's soft RLIMIT_NOFILE to its hard limit and returns the
// limit Envoy will inherit. Go raises its own soft limit at start-up but restores the original
// (often 1,024) for the processes it starts; an explicit Setrlimit makes children inherit the
// raised one. Every open request costs Envoy a client and often a provider connection.
func RaiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("envoy: read RLIMIT_NOFILE: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("envoy: raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
	}
	return lim.Cur, nil
}
