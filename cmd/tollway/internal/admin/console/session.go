package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

// Console sessions. With admin.token set, the console signs in once with the token and then
// holds a session cookie: a random id that maps to a session kept in memory here (so a restart
// signs everyone out), never the token. Each session has its own CSRF token, which the console
// sends in a header with every write; a cross-site page can neither read it nor set the header.

const (
	Cookie     = "tollway_console"
	CSRFHeader = "X-Tollway-Csrf"
	// sessionIdle and sessionLife bound a session: unused for sessionIdle, or older than
	// sessionLife, it is gone and the console asks for the token again.
	sessionIdle = time.Hour
	sessionLife = 12 * time.Hour
	// maxSessions bounds memory: signing in past it ends the oldest session.
	maxSessions = 1000
)

// Session is one console sign-in.
type Session struct {
	csrf     string
	created  time.Time
	lastSeen time.Time
}

// Sessions maps the SHA-256 of each live session id to its session: the ids themselves
// are not kept, and a lookup by hash leaks nothing useful through its timing.
type Sessions struct {
	mu       sync.Mutex
	sessions map[[32]byte]*Session
	now      func() time.Time
}

// NewSessions is an empty set of sessions.
func NewSessions() *Sessions {
	return &Sessions{sessions: map[[32]byte]*Session{}, now: time.Now}
}

// randomToken is 32 bytes from crypto/rand in unpadded base64url (43 characters).
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Create starts a session and returns its id (for the cookie) and CSRF token.
func (s *Sessions) Create() (id, csrf string) {
	id, csrf = randomToken(), randomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	if len(s.sessions) >= maxSessions {
		var oldest [32]byte
		var at time.Time
		for h, ss := range s.sessions {
			if at.IsZero() || ss.created.Before(at) {
				oldest, at = h, ss.created
			}
		}
		delete(s.sessions, oldest)
	}
	s.sessions[sha256.Sum256([]byte(id))] = &Session{csrf: csrf, created: now, lastSeen: now}
	return id, csrf
}

// lookup returns the live session with this id (and marks it used), or false.
func (s *Sessions) lookup(id string) (Session, bool) {
	if id == "" {
		return Session{}, false
	}
	h := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[h]
	if ss == nil {
		return Session{}, false
	}
	now := s.now()
	if expired(ss, now) {
		delete(s.sessions, h)
		return Session{}, false
	}
	ss.lastSeen = now
	return *ss, true
}

// Revoke ends the session with this id (sign-out).
func (s *Sessions) Revoke(id string) {
	h := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, h)
}

func (s *Sessions) sweepLocked(now time.Time) {
	for h, ss := range s.sessions {
		if expired(ss, now) {
			delete(s.sessions, h)
		}
	}
}

func expired(ss *Session, now time.Time) bool {
	return now.Sub(ss.lastSeen) >= sessionIdle || now.Sub(ss.created) >= sessionLife
}

// FromRequest is the session r's cookie names, if it is live.
func (s *Sessions) FromRequest(r *http.Request) (id string, ss Session, ok bool) {
	c, err := r.Cookie(Cookie)
	if err != nil {
		return "", Session{}, false
	}
	ss, ok = s.lookup(c.Value)
	return c.Value, ss, ok
}

// CSRFOK compares the header a write carries with the session's CSRF token in constant time.
func (ss Session) CSRFOK(header string) bool {
	return header != "" && subtle.ConstantTimeCompare([]byte(header), []byte(ss.csrf)) == 1
}

// SessionCookie is the cookie that carries a session id: HttpOnly (page scripts never see it),
// SameSite=Strict (no other site's page or link sends it), Path=/ (the console and the admin
// API). It has no Expires, so it ends with the browser; the server ends it sooner (sessionIdle,
// sessionLife, sign-out). Not Secure: the admin listener speaks plain HTTP (put a TLS proxy or
// an SSH tunnel in front of a non-loopback one).
func SessionCookie(id string) *http.Cookie {
	return &http.Cookie{Name: Cookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// ClearedCookie tells the browser to drop the session cookie.
func ClearedCookie() *http.Cookie {
	return &http.Cookie{Name: Cookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1}
}

// CSRF is the session's CSRF token, which the console sends with every write.
func (ss Session) CSRF() string { return ss.csrf }

// Expires is when the session ends unless it is used again (sessionIdle) or earlier, at the end
// of its life (sessionLife).
func (ss Session) Expires() time.Time {
	idle, life := ss.lastSeen.Add(sessionIdle), ss.created.Add(sessionLife)
	if idle.Before(life) {
		return idle
	}
	return life
}
