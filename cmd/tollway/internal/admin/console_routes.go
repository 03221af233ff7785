package admin

import (
	"net/http"
	"strings"

	"github.com/tollway/tollway/cmd/tollway/internal/admin/console"
	"github.com/tollway/tollway/cmd/tollway/internal/adminapi"
)

// The web console's pages and sign-in on the admin listener: the pages and assets are package
// console's (embedded), which read and write through the admin API like the CLI (no second path
// to the store). How the guard lets console requests in: console_guard.go.

// serveAsset answers with the console's file name, or 404 in the API's error shape.
func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	if !console.Serve(w, r, name) {
		writeErr(w, &adminRefusal{http.StatusNotFound, "not_found", "the console has no file " + name})
	}
}

// consoleRoutes serves the console behind guard; without an admin token (guard.sessions nil)
// the console needs no sign-in, like the admin API.
func consoleRoutes(mux *http.ServeMux, guard *adminGuard) {
	sessions := guard.sessions
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, console.Root, http.StatusFound)
	})
	mux.HandleFunc("GET "+console.Root+"{$}", func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, "index.html")
	})
	mux.HandleFunc("GET "+console.SignIn, func(w http.ResponseWriter, r *http.Request) {
		if sessions == nil {
			http.Redirect(w, r, console.Root, http.StatusFound)
			return
		}
		serveAsset(w, r, "signin.html")
	})
	mux.HandleFunc("GET "+console.Assets+"{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if name == "index.html" || name == "signin.html" || strings.HasPrefix(name, ".") {
			name = "/" // pages have their own paths
		}
		serveAsset(w, r, name)
	})
	mux.HandleFunc("GET "+console.SessionPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if sessions == nil {
			writeJSON(w, http.StatusOK, map[string]any{"token_required": false, "signed_in": true})
			return
		}
		if _, ss, ok := sessions.FromRequest(r); ok {
			writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": true, "csrf_token": ss.CSRF(),
				"expires_at": ss.Expires()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": false})
	})
	mux.HandleFunc("POST "+console.SessionPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if sessions == nil {
			writeErr(w, &adminRefusal{http.StatusConflict, "no_admin_token", "this gateway has no admin token (admin.token), so the console needs no sign-in: open /console/"})
			return
		}
		req, err := decoded(r, decodeSignIn)
		if err != nil {
			writeErr(w, err)
			return
		}
		ok, limited := guard.attempt(w, r, "Bearer "+req.Token, "console sign-in")
		if limited {
			return
		}
		if !ok {
			writeErr(w, &adminRefusal{http.StatusUnauthorized, "invalid_admin_token",
				"that is not this gateway's admin token (admin.token, or TOLLWAY_ADMIN_TOKEN in the gateway's environment)"})
			return
		}
		if old, err := r.Cookie(console.Cookie); err == nil {
			sessions.Revoke(old.Value) // a fresh id at every sign-in: no session fixation
		}
		id, csrf := sessions.Create()
		http.SetCookie(w, console.SessionCookie(id))
		writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": true, "csrf_token": csrf})
	})
	mux.HandleFunc("DELETE "+console.SessionPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if sessions == nil {
			writeJSON(w, http.StatusOK, map[string]any{"token_required": false, "signed_in": true})
			return
		}
		id, ss, ok := sessions.FromRequest(r)
		if ok && !ss.CSRFOK(r.Header.Get(console.CSRFHeader)) {
			writeErr(w, &adminRefusal{http.StatusForbidden, "csrf_failed", "signing out needs the session's CSRF token (header " + console.CSRFHeader + "): reload the console"})
			return
		}
		if ok {
			sessions.Revoke(id)
		}
		http.SetCookie(w, console.ClearedCookie())
		writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": false})
	})
}

// decodeSignIn decodes the body of POST /console/api/session.
func decodeSignIn(raw []byte) (adminapi.SignIn, error) {
	var req adminapi.SignIn
	if err := decodeJSON(raw, &req, `{"token": "<admin token>"}`); err != nil {
		return req, err
	}
	if req.Token == "" {
		return req, faultf("token", "is required: the gateway's admin token (admin.token)")
	}
	return req, nil
}
