// Package leaktest helps tests see which goroutines are running right now, without waiting for
// them to end (goleak's checks wait): a part that returns while its goroutines still run is the
// bug they look for.
package leaktest

import (
	"runtime"
	"strings"
)

// Running lists the stacks of the goroutines running one of fns now (function names as
// runtime.Stack writes them, such as "(*Supervisor).Run" or "net/http.(*persistConn).readLoop").
func Running(fns ...string) []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range fns {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
