package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestPprofOnlyWithTheEnvironmentVariable(t *testing.T) {
	for _, on := range []bool{false, true} {
		if on {
			t.Setenv(pprofEnv, "1")
		} else {
			t.Setenv(pprofEnv, "")
		}
		mux := http.NewServeMux()
		pprofRoutes(mux)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap?debug=1", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Fatalf("%s=%v: GET /debug/pprof/heap: %d, want %d", pprofEnv, on, rec.Code, want)
		}
	}
}
