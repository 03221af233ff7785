package x402

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Facilitator answers that need no chain, from a stub (the real facilitator: bed_test.go).
func TestFacilitatorAnswers(t *testing.T) {
	now := time.Now()
	a := newExactAuth(now, exactReq(), payerKey)
	p := paid(t, exactReq(), exactPayloadOf(a, a.sign(t, payerKey)))
	var lastBody string
	answer := func(status int, body string) *Facilitator {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b := make([]byte, 1<<16)
			n, _ := r.Body.Read(b)
			lastBody = string(b[:n])
			if status == http.StatusFound {
				http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", status)
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return NewFacilitator(srv.URL + "/")
	}
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		status int
		body   string
		kind   error // nil: valid
		says   string
	}{
		{"valid", 200, `{"isValid":true,"payer":"` + addr(payerKey) + `"}`, nil, ""},
		{"invalid", 200, `{"isValid":false,"invalidReason":"insufficient_funds","payer":"x"}`, ErrRejected, `"insufficient_funds"`},
		{"invalid as a 400", 400, `{"isValid":false,"invalidReason":"invalid_scheme"}`, ErrRejected, "invalid_scheme"},
		{"400 without verdict", 400, `{"error":"body must be JSON"}`, ErrUnavailable, `status 400 and no verdict: "body must be JSON"`},
		{"500", 500, `{"error":"boom 0x` + strings.Repeat("ab", 65) + `"}`, ErrUnavailable, "status 500"},
		{"503 valid?", 503, `{"isValid":true}`, ErrUnavailable, "status 503"},
		{"not JSON", 200, `<html>`, ErrUnavailable, "no verdict"},
		{"no isValid", 200, `{"payer":"x"}`, ErrUnavailable, "no verdict"},
		{"too long", 200, `{"isValid":true,"x":"` + strings.Repeat("x", maxAnswer) + `"}`, ErrUnavailable, "over 65536 bytes"},
		{"redirect", http.StatusFound, ``, ErrUnavailable, "status 302"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := answer(c.status, c.body)
			vr, err := f.Verify(ctx, p, exactReq())
			if c.kind == nil {
				if err != nil || !vr.IsValid {
					t.Fatalf("Verify = %+v, %v", vr, err)
				}
				if !strings.Contains(lastBody, `"x402Version":2,"paymentPayload":{"x402Version":2,`) || !strings.Contains(lastBody, `"paymentRequirements":{"scheme":"exact"`) {
					t.Errorf("request body %s", lastBody)
				}
				return
			}
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) || longHex.MatchString(err.Error()) {
				t.Fatalf("Verify = %v, want %v saying %q", err, c.kind, c.says)
			}
		})
	}
	for _, c := range []struct {
		name   string
		status int
		body   string
		kind   error
	}{
		{"settled", 200, `{"success":true,"transaction":"0xabc","network":"eip155:31337","payer":"x"}`, nil},
		{"failed", 200, `{"success":false,"errorReason":"insufficient_funds","transaction":"0xdead","network":"eip155:31337"}`, ErrSettleFailed},
		{"failed as a 400", 400, `{"success":false,"errorReason":"x"}`, ErrSettleFailed},
		{"success false without reason", 200, `{"success":false}`, ErrSettleFailed},
		{"400 without verdict", 400, `{"error":"body must be JSON"}`, ErrSettleFailed},
		{"404", 404, `not found`, ErrSettleFailed},
		// Sent, and no verdict: it may have settled.
		{"500", 500, `{"error":"x"}`, ErrSettleUnknown},
		{"502 with a refusal", 502, `{"success":false,"errorReason":"x"}`, ErrSettleUnknown},
		{"503 settled?", 503, `{"success":true,"transaction":"0xabc"}`, ErrSettleUnknown},
		{"429", 429, `{"success":false,"errorReason":"slow down"}`, ErrSettleUnknown},
		{"408", 408, ``, ErrSettleUnknown},
		{"redirect", http.StatusFound, ``, ErrSettleUnknown},
		{"not JSON", 200, `<html>`, ErrSettleUnknown},
		{"no success", 200, `{"transaction":"0xabc"}`, ErrSettleUnknown},
		{"too long", 200, `{"success":true,"x":"` + strings.Repeat("x", maxAnswer) + `"}`, ErrSettleUnknown},
		{"settlement_pending", 200, `{"success":false,"errorReason":"settlement_pending","transaction":"0xbeef","network":"eip155:31337"}`, ErrSettleUnknown},
	} {
		t.Run("settle "+c.name, func(t *testing.T) {
			sr, err := answer(c.status, c.body).Settle(ctx, p, exactReq())
			if !errors.Is(err, c.kind) && (c.kind != nil || err != nil) {
				t.Fatalf("Settle = %+v, %v; want %v", sr, err, c.kind)
			}
			if c.kind == ErrSettleFailed && (sr.Success || sr.Transaction != "" || sr.Network != testNetwork) {
				t.Errorf("a failed settlement for PAYMENT-RESPONSE: %+v", sr)
			}
			if c.name == "settlement_pending" && sr.Transaction != "0xbeef" {
				t.Errorf("the pending transaction is lost: %+v", sr)
			}
			if err != nil && (longHex.MatchString(err.Error()) || Code(err) == "") {
				t.Errorf("error %v", err)
			}
		})
	}
	// A facilitator's own errorMessage (viem's, pages long) is not passed on.
	if sr, _ := answer(200, `{"success":false,"errorReason":"x","errorMessage":"reverted: 0x`+strings.Repeat("ab", 65)+`"}`).Settle(ctx, p, exactReq()); sr.ErrorMessage != "" {
		t.Errorf("errorMessage kept: %+v", sr)
	}
	// Unreachable: /verify is unavailable (503), and a /settle that never left is not unknown.
	f := NewFacilitator("http://127.0.0.1:1")
	if _, err := f.Verify(ctx, p, exactReq()); !errors.Is(err, ErrUnavailable) || Status(err) != 503 {
		t.Errorf("unreachable: %v", err)
	}
	if _, err := f.Settle(ctx, p, exactReq()); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSettleUnknown) {
		t.Errorf("settle unreachable: %v", err)
	}
	// Sent, then no answer within the timeout, or the connection dropped: unknown.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so the server notices the client giving up
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	f = NewFacilitator(slow.URL)
	f.Timeout = 100 * time.Millisecond
	if _, err := f.Settle(ctx, p, exactReq()); !errors.Is(err, ErrSettleUnknown) || !strings.Contains(err.Error(), "within 100ms") {
		t.Errorf("slow: %v", err)
	}
	if _, err := f.Verify(ctx, p, exactReq()); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "within 100ms") {
		t.Errorf("slow verify: %v", err)
	}
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer drop.Close()
	if _, err := NewFacilitator(drop.URL).Settle(ctx, p, exactReq()); !errors.Is(err, ErrSettleUnknown) || !strings.Contains(err.Error(), "closed the connection") {
		t.Errorf("dropped: %v", err)
	}
}

// TestSpentNonce: the refusals of a second settlement that say the first one settled.
func TestSpentNonce(t *testing.T) {
	for _, c := range []struct {
		scheme, reason string
		spent          bool
	}{
		{SchemeExact, "invalid_exact_evm_nonce_already_used", true},
		{SchemeUpto, "permit2_invalid_nonce", true},
		{SchemeExact, "permit2_invalid_nonce", true},
		{SchemeUpto, "permit2_simulation_failed", true},
		{SchemeExact, "permit2_simulation_failed", false},
		{SchemeUpto, "permit2_allowance_required", false},
		{SchemeExact, "invalid_exact_evm_payload_authorization_valid_before", false},
		{SchemeExact, "", false},
	} {
		if got := SpentNonce(c.scheme, c.reason); got != c.spent {
			t.Errorf("SpentNonce(%s, %q) = %v", c.scheme, c.reason, got)
		}
	}
}

func TestSupportedCheck(t *testing.T) {
	s := Supported{Kinds: []SupportedKind{
		{X402Version: 2, Scheme: "exact", Network: testNetwork},
		{X402Version: 2, Scheme: "upto", Network: testNetwork, Extra: []byte(`{"facilitatorAddress":"` + strings.ToLower(testFacilitator) + `"}`)},
	}}
	if err := s.Check(exactReq()); err != nil {
		t.Error(err)
	}
	if err := s.Check(uptoReq()); err != nil {
		t.Error(err)
	}
	other := uptoReq()
	other.Extra = []byte(`{"facilitatorAddress":"` + testPayTo + `"}`)
	if err := s.Check(other); !errors.Is(err, ErrConfig) {
		t.Errorf("another facilitator address: %v", err)
	}
	other = exactReq()
	other.Network = "eip155:1"
	if err := s.Check(other); !errors.Is(err, ErrConfig) {
		t.Errorf("another network: %v", err)
	}
}
