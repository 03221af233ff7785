package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/tollway/tollway/cmd/tollway/internal/admin/console"
	"github.com/tollway/tollway/xds/ir"
)

// adminGuard is the one middleware in front of the admin API. A loopback listener is not a
// boundary against the operator's own browser: a web page can send "simple" cross-site requests
// (text/plain POSTs, no preflight) to 127.0.0.1, and can rebind its own host name to 127.0.0.1
// to read the answers. So every request must:
//
//   - name this listener in Host (DNS rebinding carries the attacker's name): else 421 invalid_host;
//   - not come from another origin (Origin, Sec-Fetch-Site): else 403 cross_origin; no CORS
//     headers are ever sent, so browsers keep other pages' scripts out too;
//   - carry the admin token when admin.token is set: else 401 invalid_admin_token. The console
//     carries a session cookie instead (package console), got by signing in with the token,
//     and then every write must also carry the session's CSRF token: else 403 csrf_failed. A
//     source that sent 10 wrong tokens within a minute gets 429 (limit.go);
//   - be JSON when it writes (POST, PUT, PATCH, DELETE, even with an empty body): HTML forms and
//     fetch without preflight cannot send application/json: else 415 unsupported_media_type.
//
// Bodies are capped at maxAdminBody. The token is compared in constant time and never logged.
type adminGuard struct {
	hosts     map[string]bool   // Host values naming this listener, lowercase
	anyIPPort string            // for a wildcard listen.admin (0.0.0.0, ::): its port; any IP literal on it names this listener
	own       string            // listen.admin, for messages
	tokenHash []byte            // SHA-256 of admin.token; nil when no token is required
	sessions  *console.Sessions // console sign-ins; nil when no token is required
	failures  *authLimiter      // wrong tokens by source
	next      http.Handler
}

// maxAdminBody bounds every admin request body: the API takes small JSON documents.
const maxAdminBody = 1 << 20

// newAdminGuard guards next for the admin listener at listenAdmin (host:port, loopback); an
// address it cannot read leaves no Host allowed, so the guard fails closed. Wrong tokens are
// logged on log.
func newAdminGuard(listenAdmin, token string, log *slog.Logger, next http.Handler) *adminGuard {
	g := &adminGuard{hosts: map[string]bool{}, own: listenAdmin, next: next, failures: newAuthLimiter(log)}
	host, port, err := net.SplitHostPort(listenAdmin)
	if ip := net.ParseIP(host); err == nil && (host == "" || ip != nil && ip.IsUnspecified()) {
		// Listening everywhere: callers name it by any of the machine's addresses. An IP
		// literal cannot be DNS rebinding (that needs the attacker's host name).
		g.anyIPPort = port
	}
	if err == nil {
		for _, h := range []string{host, "localhost", "127.0.0.1", "::1"} {
			g.hosts[strings.ToLower(net.JoinHostPort(h, port))] = true
			if port == "80" { // a client may leave the default port out
				g.hosts[strings.ToLower(strings.Trim(net.JoinHostPort(h, ""), ":"))] = true
			}
		}
	}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		g.tokenHash = sum[:]
		g.sessions = console.NewSessions()
	}
	return g
}

// hostOK reports whether a Host header names this listener.
func (g *adminGuard) hostOK(host string) bool {
	if g.hosts[host] {
		return true
	}
	if g.anyIPPort == "" {
		return false
	}
	h, p, err := net.SplitHostPort(host)
	return err == nil && p == g.anyIPPort && net.ParseIP(h) != nil
}

func (g *adminGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-request-id", newRequestID())
	host := strings.ToLower(r.Host)
	if !g.hostOK(host) {
		writeErr(w, &adminRefusal{http.StatusMisdirectedRequest, "invalid_host",
			"Host " + ir.QuoteShort(r.Host) + " does not name this admin API; call it as http://" + g.own +
				" or localhost on that port, and forward that same port through an SSH tunnel (other host names are refused: that is how DNS rebinding attacks reach loopback)"})
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !strings.EqualFold(o, "http://"+host) {
		writeErr(w, &adminRefusal{http.StatusForbidden, "cross_origin",
			"requests from another origin (" + ir.QuoteShort(o) + ") are refused: the admin API serves only its own origin and the CLI"})
		return
	}
	if s := strings.ToLower(r.Header.Get("Sec-Fetch-Site")); (s == "cross-site" || s == "same-site") && !console.Navigation(r) {
		writeErr(w, &adminRefusal{http.StatusForbidden, "cross_origin",
			"a browser sent this request from another site (Sec-Fetch-Site: " + s + "); the admin API serves only its own origin and the CLI"})
		return
	}
	if g.tokenHash != nil && !g.authorized(w, r) {
		return
	}
	if writes(r.Method) {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			writeErr(w, &adminRefusal{http.StatusUnsupportedMediaType, "unsupported_media_type",
				r.Method + " requests to the admin API must send Content-Type: application/json, even with an empty body (this keeps web pages from writing through the operator's browser)"})
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
	g.next.ServeHTTP(w, r)
}

// attempt checks the token a client presents (authorization, via: "bearer token" or "console
// sign-in"). A source over the limit of wrong tokens gets 429 (limited; the token is not
// looked at); a wrong token counts against its source and is logged.
func (g *adminGuard) attempt(w http.ResponseWriter, r *http.Request, authorization, via string) (ok, limited bool) {
	if g.failures.refuse(w, r) {
		return false, true
	}
	if g.tokenOK(authorization) {
		g.failures.succeed(r)
		return true, false
	}
	g.failures.fail(r, via)
	return false, false
}

// tokenOK compares an Authorization header with the token in constant time: hashing first makes
// the comparison independent of the lengths too.
func (g *adminGuard) tokenOK(authorization string) bool {
	scheme, tok, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenHash) == 1
}

// writes reports whether a method changes state: everything but the safe methods.
func writes(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// adminRefusal is a request the guard refuses before any handler runs.
type adminRefusal struct {
	status  int
	code    string
	message string
}

func (e *adminRefusal) Error() string { return e.message }

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "adm_" + hex.EncodeToString(b[:])
}
