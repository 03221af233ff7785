package extproc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/test/harness"
	"github.com/tollway/tollway/xds/ir"
)

// TestClientMessagesNameNoOperatorCommand: no message a client can get names a `tollway ...`
// command, which only the gateway's operator can run. Every string literal given to apiErr or
// put in an APIError in this package is checked.
func TestClientMessagesNameNoOperatorCommand(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			var args []ast.Expr
			switch n := n.(type) {
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); !ok || id.Name != "apiErr" {
					return true
				}
				args = n.Args
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); !ok || id.Name != "Message" {
					return true
				}
				args = []ast.Expr{n.Value}
			default:
				return true
			}
			for _, a := range args {
				ast.Inspect(a, func(n ast.Node) bool {
					lit, ok := n.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						return true
					}
					if s, _ := strconv.Unquote(lit.Value); strings.Contains(s, "tollway ") {
						t.Errorf("%s: a client's error names an operator command: %s", fset.Position(lit.Pos()), s)
					}
					return true
				})
			}
			return true
		})
	}
}

// TestOperatorHintsGoToTheLog: a paused route, an unknown route and an account out of credits
// tell the client what it can do; what the operator can do (its commands) goes to the log, once
// a minute however many requests meet it.
func TestOperatorHintsGoToTheLog(t *testing.T) {
	g := pricedGateway(t)
	g.Routes = []ir.Route{{ID: "route:old", Name: "old", Rule: ir.RulePriorityFallback, Status: "paused", Models: []string{"gpt"}}}
	log := &harness.SyncBuffer{}
	b := &Billing{Ledger: billingLedger("acct-key_valid", "1"), Record: func(store.UsageRecord) {}, Now: func() time.Time { return testNow }}
	e := startServerLogging(t, core.Compile(g, []store.Key{keyRecord("key_valid", validSecret, false)}), b, log)
	auth := "Bearer " + validSecret
	refuse := func(body string) (int, string) {
		t.Helper()
		s := e.open()
		s.roundTrip(chatHeaders(auth, "rid", true))
		im := s.roundTrip(requestBody(body)).GetImmediateResponse()
		if im == nil {
			t.Fatalf("%s was not refused", body)
		}
		s.expectClosed()
		return int(im.GetStatus().GetCode()), string(im.GetBody())
	}
	for _, tc := range []struct {
		body, code, client, log string
	}{
		{`{"model":"route:old","messages":[{"role":"user","content":"hi"}]}`, "route_paused",
			"GET /v1/models", "tollway routes resume route:old"},
		{`{"model":"route:nope","messages":[{"role":"user","content":"hi"}]}`, "route_not_found",
			"GET /v1/models", ""},
		{shortPrompt, "insufficient_credits",
			"ask the gateway's operator", "tollway accounts credit acct-key_valid"},
	} {
		for range 2 {
			status, body := refuse(tc.body)
			if status < 400 || !strings.Contains(body, `"code":"`+tc.code+`"`) || !strings.Contains(body, tc.client) || strings.Contains(body, "tollway ") {
				t.Errorf("%s: %d %s; want %s telling the client %q and no tollway command", tc.code, status, body, tc.code, tc.client)
			}
		}
		if tc.log == "" {
			continue
		}
		if n := strings.Count(log.String(), tc.log); n != 1 {
			t.Errorf("%s: the log names %q %d times after two refusals, want once:\n%s", tc.code, tc.log, n, log.String())
		}
	}
	for _, e := range []*core.APIError{core.ErrMissingKey, core.ErrMalformedKey, core.ErrInvalidKey} {
		if strings.Contains(e.Message, "tollway ") {
			t.Errorf("%s: %s names an operator command", e.Code, e.Message)
		}
	}
}

func billingLedger(account, credits string) *billing.Ledger {
	return billing.NewLedger(map[string]decimal.Decimal{account: decimal.RequireFromString(credits)}, nil, "2026-11")
}

// TestNotFoundListsEveryEndpoint: the 404 for an unknown path names every endpoint a client
// can call.
func TestNotFoundListsEveryEndpoint(t *testing.T) {
	e := startServer(t, testRuntime())
	s := e.open()
	im := s.roundTrip(requestHeaders(true, hdr(":method", "GET", true), hdr(":path", "/v1/completions", true))).GetImmediateResponse()
	if im == nil || im.GetStatus().GetCode() != 404 {
		t.Fatalf("GET /v1/completions: %v", im)
	}
	for _, ep := range []string{"POST /v1/chat/completions", "GET /v1/models", "POST /v1/videos", "GET /v1/videos/{id}",
		"POST /v1/images", "GET /v1/images/{id}", "GET /v1/key"} {
		if !strings.Contains(string(im.GetBody()), ep) {
			t.Errorf("the 404 does not name %s: %s", ep, im.GetBody())
		}
	}
}

// TestMediaWrongMethodPointsToTheRightEndpoint: a POST under a task endpoint (the OpenAI SDK's
// images.generate posts to /v1/images/generations) is told to create with POST on the endpoint;
// other methods are told how to read a task.
func TestMediaWrongMethodPointsToTheRightEndpoint(t *testing.T) {
	e := startServer(t, testRuntime())
	e.srv.tasks = &tasks.Endpoints{} // on; these are refused before the service is asked
	for _, tc := range []struct {
		method, path, want, not string
	}{
		{"POST", "/v1/images/generations", "POST /v1/images", "use GET"},
		{"POST", "/v1/videos/abc", "POST /v1/videos", "use GET"},
		{"POST", "/v1/images/", "POST /v1/images", "use GET"},
		{"DELETE", "/v1/videos/abc", "GET /v1/videos/{id}", ""},
		{"PUT", "/v1/images", "POST /v1/images", ""},
	} {
		s := e.open()
		im := s.roundTrip(requestHeaders(false, hdr(":method", tc.method, true), hdr(":path", tc.path, true),
			hdr("authorization", "Bearer "+validSecret, true), hdr("content-type", "application/json", true))).GetImmediateResponse()
		if im == nil || im.GetStatus().GetCode() != 405 {
			t.Fatalf("%s %s: %v, want 405", tc.method, tc.path, im)
		}
		body := string(im.GetBody())
		if !strings.Contains(body, tc.want) || (tc.not != "" && strings.Contains(body, tc.not)) {
			t.Errorf("%s %s: %s; want it to name %q", tc.method, tc.path, body, tc.want)
		}
	}
}
