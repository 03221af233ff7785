package console

import (
	"net/http"
	"strings"
)

// Where the console lives on the admin listener.
const (
	Root        = "/console/"
	SignIn      = "/console/signin"
	Assets      = "/console/assets/"
	API         = "/console/api/"
	SessionPath = "/console/api/session"
)

// publicAssets are what the sign-in page loads; everything else of the console needs a session.
var publicAssets = map[string]bool{"console.css": true, "signin.js": true, "favicon.svg": true}

// Public: the sign-in page and its assets, the session endpoint (signing in is how a session
// starts; its handler checks the rest) and the root's redirect.
func Public(r *http.Request) bool {
	p := r.URL.Path
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case p == SessionPath:
		return true
	case read && (p == SignIn || p == "/"):
		return true
	case read && strings.HasPrefix(p, Assets):
		return publicAssets[strings.TrimPrefix(p, Assets)]
	}
	return false
}

// Page: a console HTML page (not an asset, not the console's API).
func Page(r *http.Request) bool {
	p := r.URL.Path
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(p, Root) &&
		!strings.HasPrefix(p, Assets) && !strings.HasPrefix(p, API)
}

// Navigation: the browser opens a console page from a link on another site. Only that
// top-level GET passes the cross-site check: it changes nothing and shows no data (with
// SameSite=Strict no session cookie comes along, so the page asks to sign in or loads its data
// afterwards through same-origin requests, which are checked as ever).
func Navigation(r *http.Request) bool {
	return Page(r) && strings.EqualFold(r.Header.Get("Sec-Fetch-Mode"), "navigate") &&
		strings.EqualFold(r.Header.Get("Sec-Fetch-Dest"), "document") && r.Header.Get("Origin") == ""
}
