// Package console is the web console's side of the admin listener: its pages and assets
// (web/, embedded: plain HTML, CSS and JavaScript, no build step, nothing from a CDN), the
// paths they live at, and the sessions a sign-in starts. The pages read and write through the
// admin API like the CLI; package admin serves them behind its guard.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

//go:embed web
var files embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// assets are the embedded files by name (index.html, signin.html, app.js ...).
var assets = func() map[string]asset {
	out := map[string]asset{}
	sub, err := fs.Sub(files, "web")
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
		out[p] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}()

// csp allows the console's own files and nothing else: no inline script or style, no other
// origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Serve answers r with the embedded file name; false (nothing written) when there is none.
func Serve(w http.ResponseWriter, r *http.Request, name string) bool {
	a, ok := assets[name]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache") // revalidated (ETag): a new binary's console is seen at once
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	return true
}
