package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/cmd/tollway/internal/leaktest"
	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
)

// TestX402AppliesLeakNoTransport: applying a configuration with x402 endpoints 50 times keeps
// one facilitator client, not one HTTP transport (and its connections) per apply.
func TestX402AppliesLeakNoTransport(t *testing.T) {
	configtest.ClearEnv(t)
	var supported atomic.Int64
	fac := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		supported.Add(1)
		w.Header().Set("content-type", "application/json")
		fmt.Fprint(w, `{"kinds":[{"x402Version":2,"scheme":"exact","network":"eip155:84532"}]}`)
	}))
	defer fac.Close()
	cfg, err := config.Load(configtest.Write(t, `
providers: [{name: p, type: openai, base_url: "http://127.0.0.1:1/v1"}]
models: [{id: m, providers: [{provider: p, model: x}], pricing: {prompt: "0.000001"}}]
x402:
  pay_url: http://pay-url.invalid
  facilitator_url: `+fac.URL+`
  endpoints:
    - slug: chat
      target: /v1/chat/completions
      accepts:
        - {scheme: exact, network: "eip155:84532", asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", price: "0.01", asset_decimals: 6, extra: {name: USDC, version: "2"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	before := goleak.IgnoreCurrent()
	g := New(Options{Log: log, Store: st, XDS: xds.New(log), Ext: extproc.NewServer(log, extproc.Compile(&ir.Gateway{}, nil), nil),
		Settlements: paid.NewSettlements(st, log)})
	const applies = 50
	for range applies {
		if err := g.ApplyConfig(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	// The checks the applies asked for are done once none runs.
	for deadline := time.Now().Add(10 * time.Second); len(leaktest.Running("(*checks).runAll")) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the last answer is read
	if n := len(leaktest.Running("net/http.(*persistConn).readLoop")); n > 1 || supported.Load() == 0 {
		t.Fatalf("after %d applies (%d facilitator checks), %d facilitator connections are kept open (one HTTP transport per apply)", applies, supported.Load(), n)
	}
	g.Close() // closes the client's connections
	goleak.VerifyNone(t, before)
}
