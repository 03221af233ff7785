package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollway/tollway/test/fakeupstream"
)

// consoleCall sends one request to the admin listener with the given cookie and headers (JSON
// body when body is not empty) and returns the response with its body read.
func (g *gateway) consoleCall(method, path, body, cookie string, hdr map[string]string) (*http.Response, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, "http://"+g.Admin+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// TestConsoleSessionSecurity: with an admin token, the console's pages need a session got by
// signing in with the token; the session cookie is HttpOnly and SameSite=Strict and never the
// token; every write with the cookie needs the session's CSRF token; other origins are refused
// even with the cookie; signing out ends the session; the token never reaches the output.
func TestConsoleSessionSecurity(t *testing.T) {
	t.Parallel()
	const token = "console-admin-token-7d1e0c5b3a9f"
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL())+"admin: {token: \"${E2E_ADMIN_TOKEN}\"}\n",
		"FAKE_PROVIDER_KEY="+providerKey, "E2E_ADMIN_TOKEN="+token)

	// Signed out: a page redirects to the sign-in page, the API is 401, the sign-in page and
	// its assets load.
	if resp, _ := g.consoleCall("GET", "/console/", "", "", nil); resp.StatusCode != 303 || resp.Header.Get("Location") != "/console/signin" {
		t.Fatalf("signed-out page: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, body := g.consoleCall("GET", "/admin/v1/keys", "", "", nil); resp.StatusCode != 401 {
		t.Fatalf("signed-out API: %d %s", resp.StatusCode, body)
	}
	resp, body := g.consoleCall("GET", "/console/signin", "", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") || !strings.Contains(body, "<form") {
		t.Fatalf("sign-in page: %d %v %.200s", resp.StatusCode, resp.Header, body)
	}

	// Signing in: a wrong token is 401 and sets nothing.
	if resp, body := g.consoleCall("POST", "/console/api/session", `{"token":"nope"}`, "", nil); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d %v %s", resp.StatusCode, resp.Cookies(), body)
	}
	resp, body = g.consoleCall("POST", "/console/api/session", `{"token":"`+token+`"}`, "", nil)
	var signed struct {
		SignedIn bool   `json:"signed_in"`
		CSRF     string `json:"csrf_token"`
	}
	if err := json.Unmarshal([]byte(body), &signed); err != nil || resp.StatusCode != 200 || !signed.SignedIn || len(signed.CSRF) < 32 {
		t.Fatalf("sign in: %d %s", resp.StatusCode, body)
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == "tollway_console" {
			c = k
		}
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || len(c.Value) < 32 || strings.Contains(c.Value, token) {
		t.Fatalf("session cookie %+v", c)
	}
	if h := resp.Header.Get("Cache-Control"); h != "no-store" {
		t.Errorf("sign-in answer Cache-Control %q", h)
	}
	cookie := c.Name + "=" + c.Value

	// Signed in: pages and reads pass.
	if resp, body := g.consoleCall("GET", "/console/", "", cookie, nil); resp.StatusCode != 200 || !strings.Contains(body, "app.js") {
		t.Fatalf("page with a session: %d %.200s", resp.StatusCode, body)
	}
	if resp, body := g.consoleCall("GET", "/admin/v1/accounts", "", cookie, nil); resp.StatusCode != 200 {
		t.Fatalf("read with a session: %d %s", resp.StatusCode, body)
	}
	// Writes: the cookie alone is refused, a wrong CSRF token too; the session's passes.
	create := `{"id":"acme","credits":"5"}`
	for _, h := range []map[string]string{nil, {"X-Tollway-Csrf": "forged-forged-forged-forged-forged-forged"}} {
		if resp, body := g.consoleCall("POST", "/admin/v1/accounts", create, cookie, h); resp.StatusCode != 403 || !strings.Contains(body, "csrf_failed") {
			t.Fatalf("write without the CSRF token (%v): %d %s", h, resp.StatusCode, body)
		}
	}
	csrf := map[string]string{"X-Tollway-Csrf": signed.CSRF}
	if resp, body := g.consoleCall("POST", "/admin/v1/accounts", create, cookie, csrf); resp.StatusCode/100 != 2 {
		t.Fatalf("write with the CSRF token: %d %s", resp.StatusCode, body)
	}
	// Another origin is refused even with the cookie and the token, and a form post (not JSON)
	// cannot write.
	cross := map[string]string{"X-Tollway-Csrf": signed.CSRF, "Origin": "http://evil.example"}
	if resp, body := g.consoleCall("POST", "/admin/v1/accounts", `{"id":"evil"}`, cookie, cross); resp.StatusCode != 403 || !strings.Contains(body, "cross_origin") {
		t.Fatalf("cross-origin write: %d %s", resp.StatusCode, body)
	}
	form := map[string]string{"X-Tollway-Csrf": signed.CSRF, "Content-Type": "application/x-www-form-urlencoded"}
	if resp, body := g.consoleCall("POST", "/admin/v1/accounts", "id=evil", cookie, form); resp.StatusCode != 415 {
		t.Fatalf("form write: %d %s", resp.StatusCode, body)
	}

	// Signing out needs the CSRF token too, then the session is gone.
	jsonType := map[string]string{"Content-Type": "application/json"}
	if resp, body := g.consoleCall("DELETE", "/console/api/session", "", cookie, jsonType); resp.StatusCode != 403 || !strings.Contains(body, "csrf_failed") {
		t.Fatalf("sign out without CSRF: %d %s", resp.StatusCode, body)
	}
	csrf["Content-Type"] = "application/json"
	resp, _ = g.consoleCall("DELETE", "/console/api/session", "", cookie, csrf)
	if resp.StatusCode != 200 || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("sign out: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp, body := g.consoleCall("GET", "/admin/v1/accounts", "", cookie, nil); resp.StatusCode != 401 {
		t.Fatalf("read after sign-out: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(g.logs.String(), token) || strings.Contains(g.logs.String(), c.Value) {
		t.Error("the admin token or a session id reached the gateway's output")
	}
}

// TestConsoleWithoutToken: on loopback without an admin token, the console needs no sign-in,
// like the admin API, and says so.
func TestConsoleWithoutToken(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, catalog(fake.URL()), "FAKE_PROVIDER_KEY="+providerKey)
	if resp, body := g.consoleCall("GET", "/console/", "", "", nil); resp.StatusCode != 200 || !strings.Contains(body, "app.js") {
		t.Fatalf("page: %d %.200s", resp.StatusCode, body)
	}
	var session struct {
		TokenRequired *bool `json:"token_required"`
	}
	if resp, body := g.consoleCall("GET", "/console/api/session", "", "", nil); resp.StatusCode != 200 || json.Unmarshal([]byte(body), &session) != nil || session.TokenRequired == nil || *session.TokenRequired {
		t.Fatalf("session: %d %s", resp.StatusCode, body)
	}
	if resp, _ := g.consoleCall("GET", "/", "", "", nil); resp.StatusCode != 302 || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("root: %d %v", resp.StatusCode, resp.Header)
	}
}
