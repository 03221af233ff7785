package app

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// The web console: static pages (console/, embedded, no build step, nothing from a CDN) served
// on the admin listener at /console/, which read and write through the admin API like the CLI
// (no second path to the store). Sign-in and sessions: console_session.go and
// console_guard.go.

//go:embed console
var consoleFiles embed.FS

// consoleAsset is one embedded file, ready to serve.
type consoleAsset struct {
	body        []byte
	contentType string
	etag        string
}

// consoleAssets are the embedded files by name (index.html, signin.html, app.js ...).
var consoleAssetsByName = func() map[string]consoleAsset {
	out := map[string]consoleAsset{}
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err)
	}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // not left to the system's mime table
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		sum := sha256.Sum256(body)
		out[p] = consoleAsset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}()

// consoleCSP allows the console's own files and nothing else: no inline script or style, no
// other origin, no framing.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := consoleAssetsByName[name]
	if !ok {
		writeErr(w, &adminRefusal{http.StatusNotFound, "not_found", "the console has no file " + name})
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache") // revalidated (ETag): a new binary's console is seen at once
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}

// consoleRoutes serves the console behind guard; without an admin token (guard.sessions nil)
// the console needs no sign-in, like the admin API.
func consoleRoutes(mux *http.ServeMux, guard *adminGuard) {
	sessions := guard.sessions
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, consoleRoot, http.StatusFound)
	})
	mux.HandleFunc("GET "+consoleRoot+"{$}", func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, "index.html")
	})
	mux.HandleFunc("GET "+consoleSignIn, func(w http.ResponseWriter, r *http.Request) {
		if sessions == nil {
			http.Redirect(w, r, consoleRoot, http.StatusFound)
			return
		}
		serveAsset(w, r, "signin.html")
	})
	mux.HandleFunc("GET "+consoleAssets+"{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if name == "index.html" || name == "signin.html" || strings.HasPrefix(name, ".") {
			name = "/" // pages have their own paths
		}
		serveAsset(w, r, name)
	})
	mux.HandleFunc("GET "+consoleSessionPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if sessions == nil {
			writeJSON(w, http.StatusOK, map[string]any{"token_required": false, "signed_in": true})
			return
		}
		if _, ss, ok := sessions.fromRequest(r); ok {
			writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": true, "csrf_token": ss.csrf,
				"expires_at": earliest(ss.lastSeen.Add(sessionIdle), ss.created.Add(sessionLife))})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": false})
	})
	mux.HandleFunc("POST "+consoleSessionPath, func(w http.ResponseWriter, r *http.Request) {
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
		if old, err := r.Cookie(consoleCookie); err == nil {
			sessions.revoke(old.Value) // a fresh id at every sign-in: no session fixation
		}
		id, csrf := sessions.create()
		http.SetCookie(w, sessionCookie(id))
		writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": true, "csrf_token": csrf})
	})
	mux.HandleFunc("DELETE "+consoleSessionPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if sessions == nil {
			writeJSON(w, http.StatusOK, map[string]any{"token_required": false, "signed_in": true})
			return
		}
		id, ss, ok := sessions.fromRequest(r)
		if ok && !ss.csrfOK(r.Header.Get(csrfHeader)) {
			writeErr(w, &adminRefusal{http.StatusForbidden, "csrf_failed", "signing out needs the session's CSRF token (header " + csrfHeader + "): reload the console"})
			return
		}
		if ok {
			sessions.revoke(id)
		}
		http.SetCookie(w, clearedCookie())
		writeJSON(w, http.StatusOK, map[string]any{"token_required": true, "signed_in": false})
	})
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// signInRequest is the body of POST /console/api/session.
type signInRequest struct {
	Token string `json:"token"`
}

func decodeSignIn(raw []byte) (signInRequest, error) {
	var req signInRequest
	if err := decodeJSON(raw, &req, `{"token": "<admin token>"}`); err != nil {
		return req, err
	}
	if req.Token == "" {
		return req, faultf("token", "is required: the gateway's admin token (admin.token)")
	}
	return req, nil
}
