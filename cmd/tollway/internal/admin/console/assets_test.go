package console

import (
	"regexp"
	"strings"
	"testing"
)

// TestConsoleAssets: every file the console's pages load is embedded and served by name, and
// the markup keeps to what the CSP allows (no inline script, no style attribute), so a page
// that works in the browser test cannot be broken by a missing or blocked file.
func TestConsoleAssets(t *testing.T) {
	ref := regexp.MustCompile(`(?:src|href)="/console/assets/([^"]+)"`)
	for _, page := range []string{"index.html", "signin.html"} {
		a, ok := assets[page]
		if !ok {
			t.Fatalf("%s is not embedded", page)
		}
		html := string(a.body)
		for _, m := range ref.FindAllStringSubmatch(html, -1) {
			if _, ok := assets[m[1]]; !ok {
				t.Errorf("%s loads %s, which is not embedded", page, m[1])
			}
			if page == "signin.html" && !publicAssets[m[1]] {
				t.Errorf("signin.html loads %s, which needs a session (publicAssets)", m[1])
			}
		}
		if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<\s]`).MatchString(html) {
			t.Errorf("%s has an inline script, which the CSP blocks", page)
		}
		if strings.Contains(html, "style=") || strings.Contains(html, "<style") || regexp.MustCompile(`\son[a-z]+=`).MatchString(html) {
			t.Errorf("%s has inline style or an inline handler, which the CSP blocks", page)
		}
	}
	app, ok := assets["app.js"]
	if !ok {
		t.Fatal("app.js is not embedded")
	}
	if app.contentType != "text/javascript; charset=utf-8" {
		t.Errorf("app.js is served as %q", app.contentType)
	}
	// Data reaches the page as text nodes only: no HTML parsing of API answers.
	for _, risky := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(string(app.body), risky) {
			t.Errorf("app.js uses %s", risky)
		}
	}
}
