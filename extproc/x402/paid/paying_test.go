package paid

import (
	"errors"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/store/bbolt"
)

// payTo is the test offer's asset, receiver and payer.
const payTo = "0x1111111111111111111111111111111111111111"

// chatOffers is a paid chat endpoint, "chat", at 0.01 USDC exact.
func chatOffers(t *testing.T) map[string]*x402.Offer {
	t.Helper()
	c := x402.Config{PayURL: "http://127.0.0.1:8080", FacilitatorURL: "http://127.0.0.1:4020", Endpoints: []x402.Endpoint{{
		Slug: "chat", Target: x402.ChatTarget, Accepts: []x402.Accept{{Scheme: "exact", Network: "eip155:84532", Asset: payTo, PayTo: payTo,
			Price: "0.01", AssetDecimals: new(int), Extra: map[string]any{"name": "USDC", "version": "2"}}},
	}}}
	*c.Endpoints[0].Accepts[0].AssetDecimals = 6
	offers, err := c.NewOffers()
	if err != nil {
		t.Fatal(err)
	}
	return offers
}

// TestCredentialInUse: a credential is one request's from its claim until that request ends: a
// copy meanwhile is 409 payment_in_progress (and does not claim it), a copy after is 402
// payment_already_used; of many concurrent copies exactly one gets it. Claims go to a real
// bbolt store.
func TestCredentialInUse(t *testing.T) {
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	offers := chatOffers(t)
	var paid Endpoints
	paid.Set(&Payments{Offers: offers, Credentials: st})
	newExchange := func() *exchange {
		x := &exchange{Exchange: &core.Exchange{Shared: &core.Shared{}}, e: &paid}
		x.pay = &payState{slug: "chat", offer: offers["chat"], x: x}
		x.Given = x.endPaying
		x.pay.offered, _ = offers["chat"].Requirements(decimal.Zero)
		return x
	}
	cred := x402.Credential{Scheme: "exact", Network: "eip155:84532", Asset: payTo, Payer: payTo, Nonce: "0x01", ValidBefore: time.Now().Add(time.Minute)}

	first, copy1 := newExchange(), newExchange()
	if e := first.useCredential(cred); e != nil {
		t.Fatalf("first use: %v", e)
	}
	if e := copy1.useCredential(cred); e == nil || e.Status != http.StatusConflict || e.Code != "payment_in_progress" || e.Headers != nil {
		t.Fatalf("a copy while the first runs: %v", e)
	}
	copy1.GiveAnswer() // the refused copy held nothing: the first still does
	if e := newExchange().useCredential(cred); e == nil || e.Code != "payment_in_progress" {
		t.Fatalf("a copy after another copy ended: %v", e)
	}
	first.GiveAnswer()
	e := newExchange().useCredential(cred)
	if e == nil || e.Status != http.StatusPaymentRequired || e.Code != "payment_already_used" || e.Headers[headerPaymentRequired] == "" {
		t.Fatalf("a copy after the first ended: %v", e)
	}

	// Fifty concurrent copies of another credential: one gets it, every other is refused.
	cred.Nonce = "0x02"
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			code := "ok"
			if e := newExchange().useCredential(cred); e != nil {
				code = e.Code
			}
			mu.Lock()
			got[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got["ok"] != 1 || got["payment_in_progress"]+got["payment_already_used"] != 49 {
		t.Fatalf("fifty copies: %v", got)
	}
}

// TestPaidRefusal: a paid endpoint answers a refused business parameter 422 and keeps 400 for
// a request it cannot read; other statuses, and the shared error values, are untouched.
func TestPaidRefusal(t *testing.T) {
	for _, c := range []struct {
		e    *core.APIError
		want int
	}{
		{core.Errorf(http.StatusBadRequest, "invalid_request", "max_tokens must be a positive integer"), 422},
		{core.Errorf(http.StatusBadRequest, "model_not_found", "no such model"), 422},
		{core.Errorf(http.StatusBadRequest, "invalid_messages", "messages must be an array"), 422},
		{core.Errorf(http.StatusBadRequest, "upstream_error", "the provider refused it"), 422},
		{core.Errorf(http.StatusBadRequest, "invalid_json", "not JSON"), 400},
		{core.Errorf(http.StatusBadRequest, "invalid_payment_signature", "not base64"), 400},
		{core.Errorf(http.StatusBadRequest, "invalid_payment_payload", "not an object"), 400},
		{core.Malformed(core.Errorf(http.StatusBadRequest, "invalid_request", "the multipart body is malformed")), 400},
		{core.ErrNoBody, 400},
		{core.Errorf(http.StatusForbidden, "model_not_allowed", "not this model"), 403},
		{core.Errorf(http.StatusPaymentRequired, "payment_required", "pay"), 402},
	} {
		before := *c.e
		got := paidRefusal(c.e)
		if got.Status != c.want || got.Code != c.e.Code || got.Message != c.e.Message {
			t.Errorf("%d %s: paid %d %s, want %d", c.e.Status, c.e.Code, got.Status, got.Code, c.want)
		}
		if c.e.Status != before.Status {
			t.Errorf("%s: the original error was changed", c.e.Code)
		}
	}
}

// TestSharedStoreDownRefusesPaidUpFront: with the shared database down (its check failing), a
// paid request is refused 503 store_unavailable before it is priced or its credential claimed:
// nothing is charged, and the credential stays unused.
func TestSharedStoreDownRefusesPaidUpFront(t *testing.T) {
	offers := chatOffers(t)
	var paid Endpoints
	paid.Set(&Payments{Offers: offers})
	sh := &core.Shared{}
	sh.SetStoreCheck(func() error { return nil }) // the spool takes records
	sh.SetSharedStoreCheck(func() error { return errors.New("postgres at db:5432/tollway is unreachable") })
	x := &exchange{Exchange: &core.Exchange{Shared: sh}, e: &paid}
	x.pay = &payState{slug: "chat", offer: offers["chat"], x: x}
	e := x.payAdmit(decimal.NewFromInt(1))
	if e == nil || e.Status != http.StatusServiceUnavailable || e.Code != "store_unavailable" || e.Headers["retry-after"] == "" {
		t.Fatalf("a paid request with the database down: %v", e)
	}
}
