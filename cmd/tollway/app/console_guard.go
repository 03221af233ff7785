package app

import (
	"net/http"
	"strings"
)

// How adminGuard authenticates when admin.token is set: the token in Authorization (the CLI,
// scripts), or a console session cookie with, for writes, the session's CSRF token. Only the
// sign-in page and what it needs are open without either.

// authorized reports whether r may go on, answering it otherwise.
func (g *adminGuard) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h := r.Header.Get("Authorization"); h != "" {
		ok, limited := g.attempt(w, r, h, "bearer token")
		if !ok && !limited {
			refuseAdminToken(w)
		}
		return ok
	}
	if consolePublic(r) {
		return true
	}
	if _, ss, ok := g.sessions.fromRequest(r); ok {
		if writes(r.Method) && !ss.csrfOK(r.Header.Get(csrfHeader)) {
			writeErr(w, &adminRefusal{http.StatusForbidden, "csrf_failed",
				"this write carries the console's session cookie but not its CSRF token (header " + csrfHeader + "): reload the console and try again; scripts and the CLI send Authorization: Bearer <token> instead"})
			return false
		}
		return true
	}
	if consolePage(r) {
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, consoleSignIn, http.StatusSeeOther)
		return false
	}
	refuseAdminToken(w)
	return false
}

func refuseAdminToken(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tollway admin"`)
	writeErr(w, &adminRefusal{http.StatusUnauthorized, "invalid_admin_token",
		"this gateway requires its admin token (admin.token): send Authorization: Bearer <token> (the tollway CLI takes it from --admin-token or TOLLWAY_ADMIN_TOKEN), or sign in to the console at /console/"})
}

const (
	consoleRoot        = "/console/"
	consoleSignIn      = "/console/signin"
	consoleAssets      = "/console/assets/"
	consoleAPI         = "/console/api/"
	consoleSessionPath = "/console/api/session"
)

// publicAssets are what the sign-in page loads; everything else of the console needs a session.
var publicAssets = map[string]bool{"console.css": true, "signin.js": true, "favicon.svg": true}

// consolePublic: the sign-in page and its assets, the session endpoint (signing in is how a
// session starts; its handler checks the rest) and the root's redirect.
func consolePublic(r *http.Request) bool {
	p := r.URL.Path
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case p == consoleSessionPath:
		return true
	case read && (p == consoleSignIn || p == "/"):
		return true
	case read && strings.HasPrefix(p, consoleAssets):
		return publicAssets[strings.TrimPrefix(p, consoleAssets)]
	}
	return false
}

// consolePage: a console HTML page (not an asset, not the console's API).
func consolePage(r *http.Request) bool {
	p := r.URL.Path
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(p, consoleRoot) &&
		!strings.HasPrefix(p, consoleAssets) && !strings.HasPrefix(p, consoleAPI)
}

// consoleNavigation: the browser opens a console page from a link on another site. Only that
// top-level GET passes the cross-site check: it changes nothing and shows no data (with
// SameSite=Strict no session cookie comes along, so the page asks to sign in or loads its data
// afterwards through same-origin requests, which are checked as ever).
func consoleNavigation(r *http.Request) bool {
	return consolePage(r) && strings.EqualFold(r.Header.Get("Sec-Fetch-Mode"), "navigate") &&
		strings.EqualFold(r.Header.Get("Sec-Fetch-Dest"), "document") && r.Header.Get("Origin") == ""
}
