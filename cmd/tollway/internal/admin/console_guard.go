package admin

import (
	"net/http"

	"github.com/tollway/tollway/cmd/tollway/internal/admin/console"
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
	if console.Public(r) {
		return true
	}
	if _, ss, ok := g.sessions.FromRequest(r); ok {
		if writes(r.Method) && !ss.CSRFOK(r.Header.Get(console.CSRFHeader)) {
			writeErr(w, &adminRefusal{http.StatusForbidden, "csrf_failed",
				"this write carries the console's session cookie but not its CSRF token (header " + console.CSRFHeader + "): reload the console and try again; scripts and the CLI send Authorization: Bearer <token> instead"})
			return false
		}
		return true
	}
	if console.Page(r) {
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, console.SignIn, http.StatusSeeOther)
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
