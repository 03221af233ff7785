package fakeupstream

import "net/http"

// abort flushes what was written and drops the connection (HTTP/2: resets
// the stream) without ending the body properly.
func abort(w http.ResponseWriter) {
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}
