package admin

// GET /debug/pprof/...: Go's profiles of the gateway process, for the performance work (make
// bench -scenarios peers captures a CPU and an allocation profile under load). Off unless the
// environment has TOLLWAY_PPROF=1: a profile reveals code paths and timing, and a CPU profile
// costs CPU while it runs. Like every admin path it sits behind the admin guard (loopback host,
// same origin, the admin token when one is set).

import (
	"net/http"
	"net/http/pprof"
	"os"
)

// pprofEnv turns the profiling endpoints on.
const pprofEnv = "TOLLWAY_PPROF"

func pprofRoutes(mux *http.ServeMux) {
	if os.Getenv(pprofEnv) != "1" {
		return
	}
	mux.HandleFunc("GET /debug/pprof/", pprof.Index) // heap, allocs, goroutine, block, mutex ...
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
